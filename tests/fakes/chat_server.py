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
When the script runs out, the last step repeats (repeat_last=True) or the answer is 500.
`GET /v1/models` lists one model, "m-1".
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PIECE_CHARS = 4  # streamed text and arguments are cut into pieces this long, to exercise merging


class _QuietServer(ThreadingHTTPServer):
    """A client that went away (a run interrupted, a timeout) is no error of the server's:
    print nothing, since a test runner would read it as the next command's output."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class ChatServer:
    def __init__(self, script: list[dict[str, Any]], *, repeat_last: bool = False) -> None:
        self.script = list(script)
        self.repeat_last = repeat_last
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def next_step(self, request: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            self.requests.append(request)
            if self.script:
                step = self.script.pop(0)
                if not self.script and self.repeat_last:
                    self.script.append(step)
                return step
            return None


def _handler_for(chat: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

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
            request = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "json": body}
            if self.path != "/v1/chat/completions":
                self._send(404, "application/json", json.dumps({"error": {"message": f"no route {self.path}"}}))
                return
            step = chat.next_step(request)
            if step is None:
                self._send(500, "application/json", json.dumps({"error": {"message": "the script ran out"}}))
                return
            time.sleep(step.get("sleep", 0))
            self._answer(step, bool(isinstance(body, dict) and body.get("stream")))

        def _answer(self, step: dict[str, Any], asked_stream: bool) -> None:
            if "status" in step:
                self._send(step["status"], "application/json", step.get("body", ""))
            elif "raw" in step:
                self._send(200, step.get("content_type", "application/json"), step["raw"])
            elif step.get("stream", asked_stream):
                self._send(200, "text/event-stream", streamed_reply(step))
            else:
                self._send(200, "application/json", json.dumps(completion(step)))

        def _send(self, status: int, content_type: str, text: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
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


def completion(step: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
    calls = _calls(step)
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "model": "m-1",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
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
    events = [": a comment line, which readers must skip\n\n", _chunk({"role": "assistant", "content": ""})]
    if step.get("content"):
        events += [_chunk({"content": piece}) for piece in _pieces(step["content"])]
    calls = _calls(step)
    for index, call in enumerate(calls):
        events.append(_chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                              "function": {"name": call["name"], "arguments": ""}}]}))
        events += [_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                   for piece in _pieces(call["arguments"])]
    events.append(_chunk({}, "tool_calls" if calls else "stop"))
    # A usage chunk with no choices, as servers send when asked for usage.
    events.append(f"data: {json.dumps({'id': 'chatcmpl-fake', 'choices': [], 'usage': {'total_tokens': 1}})}\n\n")
    events.append("data: [DONE]\n\n")
    return "".join(events)
