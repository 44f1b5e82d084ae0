"""A scripted Anthropic Messages API on 127.0.0.1, for tests: as strict as the real one about
what it is sent, so that a request fw gets wrong is refused (400) as Claude's API would.

    with AnthropicServer([{"tool_use": [{"name": "add", "input": {"a": 1}}]}, {"text": "done"}], key=KEY) as server:
        server.base_url  # http://127.0.0.1:PORT/v1
        server.requests  # [{"path", "headers", "json"}], in order

Each POST to /v1/messages takes the next step of the script:
  {"text": "..."} and/or {"tool_use": [{"name", "input", "id"?}]}   a message, as JSON or as
                           an event stream (message_start, content_block_*, message_delta,
                           message_stop), as the request asked
  {"thinking": "..."}      added to a message: a thinking block (with a signature) first; a
                           later request must send it back, signature and all, before the
                           tool_use it came with, or it is refused
  {"stop_reason": "max_tokens"}   instead of end_turn / tool_use
  {"stream": True/False}   answer streamed (or not) whatever was asked
  {"status": 529, "body": {...}, "headers"?: {...}}   an HTTP error
  {"error": {"type", "message"}}   streamed: an error event after the first text piece
Checked on every request: `x-api-key` (the server's key, else 401 quoting what was sent, as a
server that echoes a key would), `anthropic-version: 2023-06-01`, a `model`, a whole number
`max_tokens`, roles that alternate starting with the user, no system message in `messages`,
each `tool_result` answering a `tool_use` of the message just before, and every `tool_use`
answered. `GET /v1/models` lists two models (with the right key).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from .chat_server import _QuietServer

PIECE_CHARS = 5
MODELS = ["claude-haiku-4-5", "claude-sonnet-4-5"]


class AnthropicServer:
    def __init__(self, script: list[dict[str, Any]], *, key: str, repeat_last: bool = False) -> None:
        self.script = list(script)
        self.key = key
        self.repeat_last = repeat_last
        self.requests: list[dict[str, Any]] = []
        self.thinking_given: dict[str, dict[str, Any]] = {}  # tool_use id -> the thinking block it came with
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> AnthropicServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def next_step(self) -> dict[str, Any] | None:
        with self._lock:
            if not self.script:
                return None
            step = self.script.pop(0)
            if not self.script and self.repeat_last:
                self.script.append(step)
            return step

    def refusal(self, headers: dict[str, str], body: Any) -> tuple[int, str] | None:
        """(status, message) when the real API would refuse the request."""
        if headers.get("x-api-key") != self.key:
            return 401, f"invalid x-api-key: {headers.get('x-api-key')}"
        if headers.get("anthropic-version") != "2023-06-01":
            return 400, "anthropic-version: header is required"
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return 400, "model: Field required"
        if isinstance(body.get("max_tokens"), bool) or not isinstance(body.get("max_tokens"), int):
            return 400, "max_tokens: Field required"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, "messages: at least one message is required"
        return self._conversation_refusal(messages)

    def _conversation_refusal(self, messages: list[Any]) -> tuple[int, str] | None:
        expected, open_calls = "user", set()
        for index, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in ("user", "assistant"):
                return 400, f"messages.{index}.role: Input should be 'user' or 'assistant'"
            if role != expected:
                return 400, f"messages: roles must alternate between user and assistant, starting with user (index {index})"
            blocks = message["content"] if isinstance(message["content"], list) else [{"type": "text", "text": message["content"]}]
            if role == "user":
                answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
                if answered - open_calls:
                    return 400, f"messages.{index}: unexpected tool_use_id found in tool_result blocks"
                if open_calls - answered:
                    return 400, f"messages.{index}: tool_use ids were found without tool_result blocks immediately after"
                open_calls = set()
            else:
                why = self._assistant_refusal(index, blocks)
                if why:
                    return 400, why
                open_calls = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
            expected = "assistant" if role == "user" else "user"
        return None

    def _assistant_refusal(self, index: int, blocks: list[dict[str, Any]]) -> str | None:
        for position, block in enumerate(blocks):
            if block.get("type") == "tool_use":
                if not isinstance(block.get("input"), dict):
                    return f"messages.{index}.content.{position}.tool_use.input: Input should be an object"
                thinking = self.thinking_given.get(block.get("id"))
                if thinking is not None and thinking not in blocks[:position]:
                    return (f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                            "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with a "
                            "thinking block")
            elif block.get("type") == "text" and not block.get("text"):
                return f"messages.{index}.content.{position}.text: text content blocks must be non-empty"
        return None


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def _handler_for(server: AnthropicServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            if self.path.split("?")[0].rstrip("/") != "/v1/models":
                return self._send(404, _error("not_found_error", f"no route {self.path}"))
            if headers.get("x-api-key") != server.key or headers.get("anthropic-version") != "2023-06-01":
                return self._send(401, _error("authentication_error", f"invalid x-api-key: {headers.get('x-api-key')}"))
            data = [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in MODELS]
            self._send(200, {"data": data, "has_more": False, "first_id": MODELS[0], "last_id": MODELS[-1]})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            with server._lock:
                server.requests.append({"path": self.path, "headers": headers, "json": body})
            if self.path != "/v1/messages":
                return self._send(404, _error("not_found_error", f"no route {self.path}"))
            refused = server.refusal(headers, body)
            if refused:
                status, message = refused
                return self._send(status, _error(ERROR_TYPES[status], message))
            step = server.next_step()
            if step is None:
                return self._send(500, _error("api_error", "the script ran out"))
            if "status" in step:
                return self._send(step["status"], step.get("body", _error(ERROR_TYPES.get(step["status"], "api_error"), "no")),
                                  step.get("headers"))
            content = _content(step)
            for block in content:
                if block["type"] == "tool_use" and step.get("thinking"):
                    server.thinking_given[block["id"]] = content[0]
            if step.get("stream", bool(body.get("stream"))):
                self._stream(step, content)
            else:
                self._send(200, _message(step, content))

        def _stream(self, step: dict[str, Any], content: list[dict[str, Any]]) -> None:
            data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in stream_events(step, content)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send(self, status: int, doc: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _content(step: dict[str, Any]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if step.get("thinking"):
        content.append({"type": "thinking", "thinking": step["thinking"], "signature": "sig-" + str(len(step["thinking"]))})
    if step.get("text"):
        content.append({"type": "text", "text": step["text"]})
    for position, call in enumerate(step.get("tool_use", [])):
        content.append({"type": "tool_use", "id": call.get("id", f"toolu_{position}_{call['name']}"),
                        "name": call["name"], "input": call.get("input", {})})
    return content


def _stop_reason(step: dict[str, Any]) -> str:
    return step.get("stop_reason") or ("tool_use" if step.get("tool_use") else "end_turn")


def _message(step: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake", "content": content,
            "stop_reason": _stop_reason(step), "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}


def _pieces(text: str) -> list[str]:
    return [text[i:i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)] or [""]


def stream_events(step: dict[str, Any], content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The message as the API streams it."""
    start = {**_message(step, []), "stop_reason": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(content):
        kind = block["type"]
        if kind == "text":
            events.append({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
            for position, piece in enumerate(_pieces(block["text"])):
                events.append({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}})
                if position == 0 and step.get("error"):
                    return events + [{"type": "error", "error": step["error"]}]
        elif kind == "thinking":
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
            events += [{"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": p}}
                       for p in _pieces(block["thinking"])]
            events.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "signature_delta", "signature": block["signature"]}})
        else:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
            events += [{"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": p}}
                       for p in _pieces(json.dumps(block["input"]))]
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": _stop_reason(step), "stop_sequence": None},
                   "usage": {"output_tokens": 1}})
    events.append({"type": "message_stop"})
    return events
