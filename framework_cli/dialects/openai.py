"""The OpenAI-compatible chat completions API (`api: openai`, the default): OpenAI, DeepSeek,
vLLM, LiteLLM's proxy and most servers that speak "OpenAI".

`POST {base_url}/chat/completions` with `Authorization: Bearer KEY`; fw's conversation is this
API's own shape, so it is sent as it is, each assistant message with the fields the server
gave it (`reasoning_content` among them: DeepSeek refuses a tool loop's next request without it).
"""

from __future__ import annotations

from typing import Any

from .base import (
    HeldSurrogate,
    HttpRequest,
    OnText,
    Reply,
    ServerError,
    ToolCall,
    UnreadableAnswer,
    UnusableAnswer,
    arguments_text,
    joined,
    json_object,
)

MESSAGE_FIELDS = ("role", "content", "tool_calls")  # the rest of an assistant message is kept as it came


class OpenAIChat:
    api = "openai"
    unreadable_hint = "is base_url an OpenAI-compatible API (usually ending in /v1)?"

    def chat_request(self, base_url: str, api_key: str, model_id: str, conversation: list[dict[str, Any]],
                     tools: list[dict[str, Any]] | None, *, stream: bool, max_tokens: int | None) -> HttpRequest:
        body: dict[str, Any] = {"model": model_id, "messages": conversation}
        if tools:
            body["tools"] = [wire_tool(t) for t in tools]
        if max_tokens is not None:  # only when the model sets it: some servers refuse the field
            body["max_tokens"] = max_tokens
        if stream:
            body["stream"] = True
        return HttpRequest("POST", _url(base_url, "chat/completions"), _headers(api_key), body)

    def reply_from_answer(self, payload: Any) -> Reply:
        choice = _first_choice(payload)
        message = choice.get("message")
        if not isinstance(message, dict):
            raise UnusableAnswer("its first choice has no message")
        wire_calls = message.get("tool_calls") or []
        if not isinstance(wire_calls, list):
            raise UnusableAnswer("tool_calls is not a list")
        calls = [_tool_call(position, wire) for position, wire in enumerate(wire_calls)]
        refusal = message.get("refusal")
        kept = {key: value for key, value in message.items() if key not in MESSAGE_FIELDS}
        return Reply(_text(message.get("content")), calls, _finish_reason(choice),
                     refusal if isinstance(refusal, str) and refusal else None, kept)

    def streamed_answer(self, on_text: OnText | None) -> StreamedChat:
        return StreamedChat(on_text)

    def models_request(self, base_url: str, api_key: str) -> HttpRequest:
        return HttpRequest("GET", _url(base_url, "models"), {"Authorization": f"Bearer {api_key}"})

    def model_ids(self, payload: Any) -> list[str]:
        """`{"data": [{"id"}, ...]}` (a bare list of ids or objects is taken too)."""
        items = payload["data"] if isinstance(payload, dict) else payload
        if not isinstance(items, list):
            raise TypeError("no list of models")
        return sorted(str(m["id"]) if isinstance(m, dict) else str(m) for m in items)


def _url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + "/" + path


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}


def wire_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """fw's tool description (name, description, input_schema) as a chat completions tool."""
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "parameters": tool["input_schema"],
        },
    }


# -- whole answers -------------------------------------------------------------------------
def _first_choice(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise UnreadableAnswer("not a JSON object")
    _raise_for_error_object(payload)
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UnreadableAnswer("no choices")
    return choices[0]


def _raise_for_error_object(payload: dict[str, Any]) -> None:
    """Some servers answer 200 (or mid-stream) with {"error": ...} instead of an error status."""
    error = payload.get("error")
    if error:
        raise ServerError(error)


def _finish_reason(choice: dict[str, Any]) -> str | None:
    reason = choice.get("finish_reason")
    return reason if isinstance(reason, str) and reason else None


def _text(content: Any) -> str | None:
    """The message text: a string, or (some servers) a list of text parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type", "text") == "text")
    raise UnusableAnswer("content is neither text nor a list of text parts")


def _tool_call(position: int, wire: Any) -> ToolCall:
    function = wire.get("function") if isinstance(wire, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise UnusableAnswer("a tool call has no function name")
    return ToolCall(_call_id(wire.get("id"), position), function["name"], arguments_text(function.get("arguments")))


def _call_id(value: Any, position: int) -> str:
    # The id only pairs a tool result with its call; a server that omits it still gets a stable one.
    return value if isinstance(value, str) and value else f"call_{position}"


# -- streamed answers ----------------------------------------------------------------------
class StreamedChat:
    """The pieces of a streamed answer as they come: the content deltas (heard by `on_text`
    as they arrive), the refusal, the tool-call pieces, the last finish_reason, and every
    other field of the deltas (text pieces joined, such as `reasoning_content`)."""

    def __init__(self, on_text: OnText | None = None) -> None:
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.pieces: list[Any] = []
        self.kept: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.chunks = 0
        self.done = False
        self._heard = HeldSurrogate(on_text)

    def add(self, data: str) -> None:
        if data.strip() == "[DONE]":
            self.done = True
            return
        chunk = json_object(data, "a streamed chunk")
        _raise_for_error_object(chunk)
        for choice in _choices(chunk):
            self.chunks += 1
            self.finish_reason = _finish_reason(choice) or self.finish_reason
            delta = choice.get("delta", choice.get("message")) or {}
            if not isinstance(delta, dict):
                raise UnusableAnswer("a streamed delta is not an object")
            text_piece = _text(delta.get("content"))
            if text_piece:
                self.content.append(text_piece)
                self._heard(text_piece)
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            wire_pieces = delta.get("tool_calls") or []
            if not isinstance(wire_pieces, list):
                raise UnusableAnswer("a streamed tool_calls is not a list")
            self.pieces.extend(wire_pieces)
            self._keep(delta)

    def _keep(self, delta: dict[str, Any]) -> None:
        for key, value in delta.items():
            if key in MESSAGE_FIELDS or value is None:
                continue
            if isinstance(value, str) and isinstance(self.kept.get(key), list):
                self.kept[key].append(value)
            elif isinstance(value, str):
                self.kept[key] = [value]
            else:
                self.kept[key] = value

    def reply(self) -> Reply:
        if not self.chunks:
            raise UnreadableAnswer("the stream held no choices")
        kept = {key: joined(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value
                for key, value in self.kept.items()}
        return Reply(joined(self.content) if self.content else None, merge_tool_call_pieces(self.pieces),
                     self.finish_reason, joined(self.refusal) or None, kept)


def _choices(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    """The first choice of a chunk; a usage-only chunk has no choices and gives none."""
    choices = chunk.get("choices") or []
    if not isinstance(choices, list):
        raise UnreadableAnswer("a streamed chunk's choices is not a list")
    first = []
    for choice in choices:
        if not isinstance(choice, dict):
            raise UnreadableAnswer("a streamed choice is not an object")
        if choice.get("index", 0) == 0:
            first.append(choice)
    return first


def merge_tool_call_pieces(pieces: list[Any]) -> list[ToolCall]:
    """Streamed tool calls come in pieces keyed by `index` (or, from servers that send none,
    by the call's `id`): the id and name arrive with the first piece, the arguments text is
    spread over all of them."""
    merged: dict[int, dict[str, Any]] = {}
    by_id: dict[str, int] = {}
    for piece in pieces:
        if not isinstance(piece, dict):
            raise UnusableAnswer("a streamed tool call piece is not an object")
        slot_index = _piece_index(piece, merged, by_id)
        slot = merged.setdefault(slot_index, {"id": None, "name": None, "arguments": []})
        function = piece.get("function") or {}
        if not isinstance(function, dict):
            raise UnusableAnswer("a streamed tool call's function is not an object")
        slot["id"] = slot["id"] or piece.get("id")
        if isinstance(slot["id"], str) and slot["id"]:
            by_id.setdefault(slot["id"], slot_index)
        slot["name"] = slot["name"] or function.get("name")
        if function.get("arguments"):
            slot["arguments"].append(arguments_text(function["arguments"]))
    calls = []
    for position, index in enumerate(sorted(merged)):
        slot = merged[index]
        if not isinstance(slot["name"], str) or not slot["name"]:
            raise UnusableAnswer("a streamed tool call has no function name")
        calls.append(ToolCall(_call_id(slot["id"], position), slot["name"], joined(slot["arguments"])))
    return calls


def _piece_index(piece: dict[str, Any], merged: dict[int, Any], by_id: dict[str, int]) -> int:
    index = piece.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    # Without an index: the call of the same id, a new call for a new id, else the last call.
    call_id = piece.get("id")
    if isinstance(call_id, str) and call_id:
        return by_id[call_id] if call_id in by_id else max(merged, default=-1) + 1
    return max(merged, default=0)
