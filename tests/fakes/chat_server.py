"""A scripted OpenAI-compatible chat completions server on 127.0.0.1, for tests.

    with ChatServer([{"tool_calls": [{"name": "add", "arguments": {"a": 1}}]}, {"content": "done"}]) as server:
        ChatClient(server.base_url, "sk-...", "m-1").complete(...)
        server.requests  # [{"path", "headers", "json"}], in order

Each POST to /v1/chat/completions takes the next step of the script:
  {"content": "..."} and/or {"tool_calls": [{"name", "arguments" (text or object), "id"?}]}
                           a reply, as JSON or as an event stream, as the request asked
  {"stream": True/False}   added to a reply: answer streamed (or not) whatever was asked
  {"status": 401, "body": "..."}   an HTTP error
  {"raw": "...", "content_type"?: "..."}   this body as it is
  {"sleep": seconds}       added to any step: wait that long before answering
  {"status": 429, "headers": {"Retry-After": "1"}}   an HTTP error with these headers
  {"drop": True}           close the connection without answering
  {"finish_reason": "length"}   added to a reply: this finish_reason instead of stop/tool_calls
  {"refusal": "..."}       a reply that refuses: no content, the text in `refusal`
  {"error": {...}}         a 200 answer holding this error object; with "stream" (or when the
                           request asked to stream) it comes mid-stream, after any content
  {"no_index": True}       added to a streamed reply: tool-call pieces carry no `index`, only
                           the call's `id`, repeated on every piece
  {"trickle": seconds}     a 200 answer that never ends: one SSE comment (streamed) or one
                           space of a JSON body every so many seconds, until the client leaves
  {"gate": threading.Event()}   added to a streamed reply: the stream pauses after its first
                           content piece until the event is set
  {"echo": "prefix"}       a reply whose content is the prefix and the text of the request's
                           last user message (so each answer says which message it answers)
  {"reasoning": "..."}     added to a reply: a thinking model's `reasoning_content` beside the
                           answer (streamed first, in pieces, as DeepSeek streams it)
With `tls=(certificate file, key file)` it speaks HTTPS (its base_url says so).
When the script runs out, the last step repeats (repeat_last=True) or the answer is 500.
With `thinking=True` the server is as strict as DeepSeek's thinking mode: within the turn of a
request (after its last user message), an assistant message with tool calls this server
answered with reasoning must carry that `reasoning_content` unchanged, or the answer is 400.
Earlier turns need none.
`GET /v1/models` lists one model, "m-1". Each request records the client's port as
"client_port": requests over one kept-alive connection share it; and "started" and "ended",
the server's time.monotonic() when it arrived and when its answer was sent.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PIECE_CHARS = 4  # streamed text and arguments are cut into pieces this long, to exercise merging


class _QuietServer(ThreadingHTTPServer):
    """A client that went away (a run interrupted, a timeout) is no error of the server's:
    print nothing, since a test runner would read it as the next command's output."""

    daemon_threads = True
    request_queue_size = 1024  # hundreds of runs may connect at once (a benchmark of many conversations)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class ChatServer:
    def __init__(self, script: list[dict[str, Any]], *, repeat_last: bool = False, thinking: bool = False,
                 tls: tuple[str, str] | None = None) -> None:
        self.script = list(script)
        self.repeat_last = repeat_last
        self.thinking = thinking
        self.reasoning_given: dict[str, str] = {}  # tool call id -> the reasoning answered with it
        self.requests: list[dict[str, Any]] = []
        self.stopping = threading.Event()  # set on exit: endless answers (trickle, gate) stop
        self.connections: list[Any] = []  # every accepted socket, closed on exit
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self.tls = tls
        if tls is not None:  # (certificate file, key file): the server speaks HTTPS
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stopping.set()
        # Close the connections a client keeps alive, so that none of them can outlive this
        # server and reach its handlers when a later server listens on the same port.
        with self._lock:
            for connection in self.connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def missing_reasoning(self, body: Any) -> str | None:
        """DeepSeek's rule: why the request is refused, or None."""
        messages = (body.get("messages") if isinstance(body, dict) else None) or []
        users = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"]
        for index, message in enumerate(messages):
            if index < (users[-1] if users else 0) or not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            given = {self.reasoning_given.get(c.get("id")) for c in message.get("tool_calls") or []} - {None}
            if given and message.get("reasoning_content") not in given:
                return (f"Missing `reasoning_content` field in the assistant message at message index {index}. "
                        "For more information, please refer to https://api-docs.deepseek.com/guides/thinking_mode")
        return None

    def next_step(self, request: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            self.requests.append(request)
            if self.thinking and (why := self.missing_reasoning(request["json"])):
                return {"status": 400, "body": json.dumps({"error": {"message": why, "type": "invalid_request_error",
                                                                     "param": None, "code": "invalid_request_error"}})}
            if self.script:
                step = self.script.pop(0)
                if not self.script and self.repeat_last:
                    self.script.append(step)
                if step.get("reasoning"):
                    for call in _calls(step):
                        self.reasoning_given[call["id"]] = step["reasoning"]
                return step
            return None


def _handler_for(chat: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def setup(self) -> None:
            super().setup()
            # Headers and body are written apart: without this, Nagle's algorithm and the
            # client's delayed ACK hold every answer on a kept-alive connection ~40 ms.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with chat._lock:
                chat.connections.append(self.connection)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                models = {"object": "list", "data": [{"id": "m-1", "object": "model"}]}
                self._send(200, "application/json", json.dumps(models))
            else:
                self._send(404, "application/json", json.dumps({"error": {"message": f"no route {self.path}"}}))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            request = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "json": body,
                       "client_port": self.client_address[1], "started": time.monotonic()}
            if self.path != "/v1/chat/completions":
                self._send(404, "application/json", json.dumps({"error": {"message": f"no route {self.path}"}}))
                return
            step = chat.next_step(request)
            if step is None:
                self._send(500, "application/json", json.dumps({"error": {"message": "the script ran out"}}))
                return
            time.sleep(step.get("sleep", 0))
            if "echo" in step:
                users = [m for m in (body or {}).get("messages", []) if isinstance(m, dict) and m.get("role") == "user"]
                step = {**{k: v for k, v in step.items() if k != "echo"}, "content": step["echo"] + str(users[-1]["content"] if users else "")}
            self._answer(step, bool(isinstance(body, dict) and body.get("stream")))
            request["ended"] = time.monotonic()

        def _answer(self, step: dict[str, Any], asked_stream: bool) -> None:
            if step.get("drop"):
                self.close_connection = True  # nothing written: the client sees the connection drop
            elif "trickle" in step:
                self._trickle(step["trickle"], ": still thinking\n\n" if step.get("stream", asked_stream) else " ")
            elif "status" in step:
                self._send(step["status"], "application/json", step.get("body", ""), step.get("headers"))
            elif "gate" in step:
                self._stream_with_gate(step)
            elif "raw" in step:
                self._send(200, step.get("content_type", "application/json"), step["raw"])
            elif step.get("stream", asked_stream):
                self._send(200, "text/event-stream", streamed_reply(step))
            else:
                self._send(200, "application/json", json.dumps(completion(step)))

        def _trickle(self, every: float, piece: str) -> None:
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if piece.startswith(":") else "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                while not chat.stopping.wait(every):
                    self.wfile.write(piece.encode())
                    self.wfile.flush()
            except OSError:
                pass  # the client went away, as it should

        def _stream_with_gate(self, step: dict[str, Any]) -> None:
            """The events of a streamed reply, written as they would be produced, pausing after
            the first content piece until the test opens the gate."""
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for position, event in enumerate(stream_events(step)):
                    self.wfile.write(event.encode())
                    self.wfile.flush()
                    if position == 2 and step.get("content"):  # a comment, the role, the first piece
                        while not step["gate"].wait(0.05) and not chat.stopping.is_set():
                            pass
            except OSError:
                pass

        def _send(self, status: int, content_type: str, text: str, headers: dict[str, str] | None = None) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _calls(step: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for position, call in enumerate(step.get("tool_calls", [])):
        arguments = call.get("arguments", {})
        calls.append({
            "id": call.get("id", f"call_{position}_{call['name']}"),
            "name": call["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        })
    return calls


def _finish(step: dict[str, Any], calls: list[Any]) -> str:
    return step.get("finish_reason") or ("tool_calls" if calls else "stop")


def completion(step: dict[str, Any]) -> dict[str, Any]:
    if "error" in step:
        return {"error": step["error"]}
    message: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
    if "reasoning" in step:
        message["reasoning_content"] = step["reasoning"]
    if "refusal" in step:
        message["refusal"] = step["refusal"]
    calls = _calls(step)
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "model": "m-1",
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(step, calls)}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},  # as OpenAI sends (llm reads it)
    }


def _pieces(text: str) -> list[str]:
    return [text[i:i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)] or [""]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    doc = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "m-1",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(doc)}\n\n"


def streamed_reply(step: dict[str, Any]) -> str:
    """The reply as server-sent events, the way OpenAI streams it: text in pieces, each tool
    call opened by a piece with its index, id and name, its arguments spread over later pieces."""
    return "".join(stream_events(step))


def _tool_call_events(step: dict[str, Any], calls: list[dict[str, Any]]) -> list[str]:
    events = []
    for index, call in enumerate(calls):
        if step.get("no_index"):  # every piece names its call by id, none by index
            events.append(_chunk({"tool_calls": [{"id": call["id"], "type": "function",
                                                  "function": {"name": call["name"], "arguments": ""}}]}))
            events += [_chunk({"tool_calls": [{"id": call["id"], "function": {"arguments": piece}}]})
                       for piece in _pieces(call["arguments"])]
            continue
        events.append(_chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                              "function": {"name": call["name"], "arguments": ""}}]}))
        events += [_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                   for piece in _pieces(call["arguments"])]
    return events


def stream_events(step: dict[str, Any]) -> list[str]:
    events = [": a comment line, which readers must skip\n\n", _chunk({"role": "assistant", "content": ""})]
    if step.get("reasoning"):  # DeepSeek's deltas: the reasoning first, content null beside it
        events += [_chunk({"content": None, "reasoning_content": piece}) for piece in _pieces(step["reasoning"])]
    if step.get("content"):
        events += [_chunk({"content": piece}) for piece in _pieces(step["content"])]
    if "error" in step:  # an error object in the middle of the stream, as some proxies send
        events.append(f"data: {json.dumps({'error': step['error']})}\n\n")
        return events
    if step.get("refusal"):
        events += [_chunk({"refusal": piece}) for piece in _pieces(step["refusal"])]
    calls = _calls(step)
    events += _tool_call_events(step, calls)
    events.append(_chunk({}, _finish(step, calls)))
    # A usage chunk with no choices, as servers send when asked for usage.
    events.append(f"data: {json.dumps({'id': 'chatcmpl-fake', 'choices': [], 'usage': {'total_tokens': 1}})}\n\n")
    events.append("data: [DONE]\n\n")
    return events
