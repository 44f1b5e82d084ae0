"""An awkward MCP server for tests, speaking raw JSON-RPC over stdio (no SDK, so it starts at
once and can say what the SDK would refuse to): `python raw_mcp_server.py [options]`.

  --tools N       also offer N numbered tools t0000 ... (to pass the 128-tool cap)
  --stderr TEXT   write TEXT to stderr, ($VARS expanded), then exit with status 4 before answering anything
  --crash-file P  do what --stderr does, with P's text, when the file P exists
  --noise         print lines that are not JSON on stdout before each answer
  --marker TEXT   ignored: a unique argument a test finds in `ps`
  --delay S       sleep S seconds before answering initialize (a slow start)
  --broken        also list `broken`, whose input schema is a string (the SDK's client refuses
                  the whole list for it)
  --http PORT     serve streamable HTTP on 127.0.0.1:PORT at /mcp instead of stdio: a session id
                  from the handshake, required after it; answers as JSON, or with --sse as event
                  streams that first ask fw a question (sampling) and send a notification; the
                  `answers` tool tells what fw answered those questions
  --reject        with --http: answer every POST 401, its body echoing every request header
                  (a server that quotes a key back), escaped in JSON and cut in the middle too
  --forget N      with --http: forget the session after N requests in it (a restarted server):
                  the next request of it is answered 404; `sessions` tells how many were started
  --reject-padded with --http: answer every POST 401 with 64 KiB of spaces, then the value of
                  X-Api-Key, sent so that its first 8 characters end the first 64 KiB

It writes its pid to $FAKE_MCP_PID_FILE first. Its tools: awkward names (`get.weather`, `a b`,
`über`, 80 characters), one with the input schema `{"type": "string"}`, `ok` (read-only),
`wipe` (destructive), `plain`, `fails` (answers isError with its text), `huge` (a result of
N bytes), `hidden` (zero-width and bidirectional controls in its name and description),
`sleep` (sleeps, then answers), `spawn` (starts a helper in its process group and answers),
`halves` (a result that holds a lone UTF-16 surrogate), `needs_task` and `may_task`
(`execution.taskSupport` required and optional: called plainly, the first answers -32601, as a
server that only runs it as a task does), `titled` (a title of its own), `items` (a result of
every kind of content: text, a resource link, embedded text, an embedded blob, an image; with
`{"secret": true}` the blob's bytes hold $RAW_TOKEN, with `{"embedded_bytes": N}` the embedded
text is N letters e).
"""

import json
import os
import subprocess
import sys
import time

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
NONE = {"type": "object", "properties": {}}


def tools(argv):
    listed = [
        {"name": "get.weather", "description": "dots", "inputSchema": NONE},
        {"name": "a b", "description": "a space", "inputSchema": NONE},
        {"name": "über", "description": "not ASCII", "inputSchema": NONE},
        {"name": "x" * 80, "description": "too long", "inputSchema": NONE},
        {"name": "stringy", "description": "a schema that is not an object schema", "inputSchema": {"type": "string"}},
        {"name": "ok", "description": "Reads only.", "inputSchema": NONE, "annotations": {"readOnlyHint": True}},
        {"name": "wipe", "description": "Destroys.", "inputSchema": NONE, "annotations": {"destructiveHint": True, "readOnlyHint": False}},
        {"name": "plain", "description": "No annotations.", "inputSchema": SCHEMA},
        {"name": "fails", "description": "Answers isError.", "inputSchema": SCHEMA},
        {"name": "huge", "description": "A big result.", "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}},
        {"name": "hid\u200bden", "description": "Looks \u202eharmless\u202c\u2060.", "inputSchema": NONE},
        {"name": "sleep", "description": "Sleeps.", "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}}},
        {"name": "spawn", "description": "Starts a helper.", "inputSchema": {"type": "object", "properties": {"marker": {"type": "string"}}}},
        {"name": "halves", "description": "Answers a lone UTF-16 surrogate.", "inputSchema": NONE},
        {"name": "needs_task", "description": "Runs only as a task.", "inputSchema": NONE, "execution": {"taskSupport": "required"}},
        {"name": "may_task", "description": "Runs as a task or not.", "inputSchema": NONE, "execution": {"taskSupport": "optional"}},
        {"name": "titled", "title": "A Friendly Title", "description": "Has a title.", "inputSchema": NONE},
        {"name": "items", "description": "Every kind of content.",
         "inputSchema": {"type": "object", "properties": {"secret": {"type": "boolean"}, "embedded_bytes": {"type": "integer"}}}},
    ]
    if "--http" in argv:
        listed.append({"name": "answers", "description": "What fw answered this server's questions.", "inputSchema": NONE})
        listed.append({"name": "sessions", "description": "How many sessions were started.", "inputSchema": NONE})
    if "--broken" in argv:
        listed.append({"name": "broken", "description": "A schema that is not one.", "inputSchema": "not a schema"})
    if "--tools" in argv:
        listed += [{"name": f"t{i:04d}", "description": "numbered", "inputSchema": NONE} for i in range(int(argv[argv.index("--tools") + 1]))]
    return listed


def answer(name, args):
    if name == "fails":
        return {"content": [{"type": "text", "text": f"upstream says no: {args.get('text', '')}"}], "isError": True}
    if name == "huge":
        return {"content": [{"type": "text", "text": "y" * int(args.get("bytes", 1000))}]}
    if name == "sleep":
        time.sleep(float(args.get("seconds", 1)))
        return {"content": [{"type": "text", "text": "slept"}]}
    if name == "spawn":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", args.get("marker", "helper")])
        return {"content": [{"type": "text", "text": "spawned"}]}
    if name == "halves":  # json.dumps writes it as the escape \\ud83d, which decodes to no character
        return {"content": [{"type": "text", "text": "half an emoji: \ud83d"}], "structuredContent": {"k": "\ud83d"}}
    if name == "answers":
        return {"content": [{"type": "text", "text": json.dumps(ANSWERS)}]}
    if name == "items":
        return {"content": items(args.get("secret") is True, args.get("embedded_bytes"))}
    return {"content": [{"type": "text", "text": f"{name} done"}]}


ANSWERS = []  # what the client answered the server's own requests (over HTTP)
BLOB = bytes(range(256)) * 4  # 1 KiB of bytes no text is made of
PNG = bytes.fromhex("89504e470d0a1a0a") + b"\x00" * 24


def items(secret, embedded_bytes=None):
    import base64

    blob = BLOB + (os.environ.get("RAW_TOKEN", "").encode() if secret else b"")
    return [
        {"type": "text", "text": "here they are"},
        {"type": "resource_link", "uri": "file:///data/report.csv", "name": "report.csv", "mimeType": "text/csv",
         "description": "the monthly report"},
        {"type": "resource", "resource": {"uri": "file:///data/notes.txt", "mimeType": "text/plain",
                                          "text": "e" * embedded_bytes if embedded_bytes else "embedded notes"}},
        {"type": "resource", "resource": {"uri": "file:///data/blob.bin", "mimeType": "application/octet-stream",
                                          "blob": base64.b64encode(blob).decode()}},
        {"type": "image", "mimeType": "image/png", "data": base64.b64encode(PNG).decode()},
    ]


def respond(message, argv):
    """The answer to one request (None for a notification or a client's answer)."""
    if "id" not in message or "method" not in message:
        if "id" in message:
            ANSWERS.append(message)
        return None
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        if "--delay" in argv:
            time.sleep(float(argv[argv.index("--delay") + 1]))
        result = {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
                  "serverInfo": {"name": "raw", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": tools(argv)}
    elif method == "tools/call" and params.get("name") == "needs_task" and "task" not in params:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "needs_task must be called as a task"}}
    elif method == "tools/call":
        result = answer(params["name"], params.get("arguments") or {})
    else:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def serve_http(argv):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    port, sse = int(argv[argv.index("--http") + 1]), "--sse" in argv
    forget = int(argv[argv.index("--forget") + 1]) if "--forget" in argv else None
    state = {"session": None, "started": 0, "served": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def do_DELETE(self):
            self.reply(200 if self.headers.get("Mcp-Session-Id") == state["session"] else 404, b"", "text/plain")

        def do_POST(self):
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if self.path != "/mcp":
                return self.reply(404, b"no such endpoint", "text/plain")
            if "--reject-padded" in argv:
                key = self.headers.get("X-Api-Key", "")
                prefix = '{"you sent": "'
                body = (" " * (65528 - len(prefix)) + prefix + key + '"}').encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:65536])
                self.wfile.flush()
                time.sleep(0.2)
                self.wfile.write(body[65536:])
                return None
            if "--reject" in argv:
                headers = dict(sorted(self.headers.items(), key=lambda kv: not kv[0].lower().startswith("x-")))  # keys first
                cut = {k: v[: len(v) // 2] for k, v in headers.items()}
                echo = json.dumps({"error": "unauthorized", "you sent": headers, "cut": cut, "escaped": json.dumps(headers)})
                return self.reply(401, echo.encode(), "application/json")
            initializing = message.get("method") == "initialize"
            given = self.headers.get("Mcp-Session-Id")
            if initializing:
                state["started"] += 1
                state["session"], state["served"] = f"raw-session-{state['started']}", 0
            elif not given:
                return self.reply(400, b"Bad Request: no valid session id", "text/plain")
            elif given != state["session"]:
                return self.reply(404, b"Session not found", "text/plain")
            elif "id" in message and "method" in message:
                state["served"] += 1
                if forget is not None and state["served"] > forget:
                    state["session"] = None  # forgotten: this request is not served
                    return self.reply(404, b"Session not found", "text/plain")
            if message.get("method") == "tools/call" and (message.get("params") or {}).get("name") == "sessions":
                answered = {"jsonrpc": "2.0", "id": message["id"],
                            "result": {"content": [{"type": "text", "text": str(state["started"])}]}}
            else:
                answered = respond(message, argv)
            if answered is None:
                return self.reply(202, b"", "text/plain")
            if not sse or initializing:
                return self.reply(200, json.dumps(answered).encode(), "application/json", initializing)
            question = {"jsonrpc": "2.0", "id": f"q{message['id']}", "method": "sampling/createMessage", "params": {}}
            note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}}
            events = "".join(f"event: message\ndata: {json.dumps(m)}\n\n" for m in (question, note, answered))
            self.reply(200, events.encode(), "text/event-stream")

        def reply(self, status, body, kind, with_session=False):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            if with_session:
                self.send_header("Mcp-Session-Id", state["session"])
            self.end_headers()
            self.wfile.write(body)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main(argv):
    pid_file = os.environ.get("FAKE_MCP_PID_FILE")
    if pid_file:
        with open(pid_file, "w") as handle:
            handle.write(str(os.getpid()))
    crash = argv[argv.index("--stderr") + 1] if "--stderr" in argv else None
    if "--crash-file" in argv and os.path.exists(argv[argv.index("--crash-file") + 1]):
        crash = open(argv[argv.index("--crash-file") + 1]).read()
    if crash is not None:
        sys.stderr.write("starting up\n" + os.path.expandvars(crash) + "\n")
        sys.stderr.flush()
        sys.exit(4)
    if "--http" in argv:
        return serve_http(argv)
    noise = "--noise" in argv
    out = sys.stdout
    for line in sys.stdin:
        answered = respond(json.loads(line), argv)
        if answered is None:
            continue  # a notification
        if noise and "result" in answered:
            out.write("Traceback (most recent call last): not JSON at all\n")
        out.write(json.dumps(answered) + "\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
