"""An awkward MCP server for tests, speaking raw JSON-RPC over stdio (no SDK, so it starts at
once and can say what the SDK would refuse to): `python raw_mcp_server.py [options]`.

  --tools N       also offer N numbered tools t0000 ... (to pass the 128-tool cap)
  --stderr TEXT   write TEXT to stderr, ($VARS expanded), then exit with status 4 before answering anything
  --crash-file P  do what --stderr does, with P's text, when the file P exists
  --noise         print lines that are not JSON on stdout before each answer
  --marker TEXT   ignored: a unique argument a test finds in `ps`
  --delay S       sleep S seconds before answering initialize (a slow start)

It writes its pid to $FAKE_MCP_PID_FILE first. Its tools: awkward names (`get.weather`, `a b`,
`über`, 80 characters), one with the input schema `{"type": "string"}`, `ok` (read-only),
`wipe` (destructive), `plain`, `fails` (answers isError with its text), `huge` (a result of
N bytes), `hidden` (zero-width and bidirectional controls in its name and description),
`sleep` (sleeps, then answers), `spawn` (starts a helper in its process group and answers).
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
    ]
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
    return {"content": [{"type": "text", "text": f"{name} done"}]}


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
    noise = "--noise" in argv
    out = sys.stdout
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            if "--delay" in argv:
                time.sleep(float(argv[argv.index("--delay") + 1]))
            result = {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
                      "serverInfo": {"name": "raw", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": tools(argv)}
        elif method == "tools/call":
            result = answer(params["name"], params.get("arguments") or {})
        else:
            out.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no such method"}}) + "\n")
            out.flush()
            continue
        if noise:
            out.write("Traceback (most recent call last): not JSON at all\n")
        out.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
