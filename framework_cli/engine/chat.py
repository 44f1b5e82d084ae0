"""The one place that speaks the OpenAI-compatible chat completions API.

`ChatClient.complete` sends the conversation and the tools, and reads the answer whether it
comes as one JSON document or as a server-sent event stream (whatever was asked for: some
servers ignore the `stream` flag). Every failure is `FwError("unavailable", reason="model")`
with the key scrubbed from anything the server echoed back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import FwError
from ..home import secrets

SNIPPET_CHARS = 200  # of an error body shown to the user: enough to read the server's reason
_STREAMED = "text/event-stream"


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, as the model wrote it; the loop parses it


@dataclass
class Reply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)


class UnreadableAnswer(Exception):
    """The server answered 2xx with something that is not a chat completion."""


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


def wire_tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


class ChatClient:
    """A model behind an OpenAI-compatible API: base_url (ending in /v1), key and model id."""

    def __init__(
        self, base_url: str, api_key: str, model_id: str, *, timeout: float = 60.0, stream: bool = False
    ) -> None:
        secrets.remember(api_key)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model_id = model_id
        self.timeout = timeout
        self.stream = stream
        self._api_key = api_key

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply:
        """One model call: the reply's text and the tool calls it asks for."""
        response = self._post(self._request_body(messages, tools))
        if not 200 <= response.status_code < 300:
            raise self._failure(f"{self.url} answered {response.status_code}: {self._snippet(response.text)}",
                                _hint_for_status(response.status_code), response.status_code)
        try:
            reply = read_answer(response.text, response.headers.get("content-type", ""))
        except UnreadableAnswer as exc:
            raise self._failure(f"{self.url} gave an answer fw cannot read: {exc}",
                                "is base_url an OpenAI-compatible API (usually ending in /v1)?",
                                response.status_code) from None
        if not reply.content and not reply.tool_calls:
            raise self._failure(f"the model {self.model_id!r} gave an empty answer",
                                "try again, or check the model's model_id", response.status_code)
        return reply

    def _request_body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_id, "messages": messages}
        if tools:
            body["tools"] = [wire_tool(t) for t in tools]
        if self.stream:
            body["stream"] = True
        return body

    def _post(self, body: dict[str, Any]) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {self._api_key}"}
        try:
            with httpx.Client(timeout=self.timeout, follow_redirects=False) as http:
                return http.post(self.url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            # The class name only: an exception's text may quote a request header.
            raise self._failure(f"{self.url} did not answer in time ({type(exc).__name__}, {self.timeout:g} s)",
                                "the model may be overloaded; try again, or check the provider's base_url") from None
        except httpx.HTTPError as exc:
            raise self._failure(f"could not reach {self.url}: {type(exc).__name__}",
                                "check the provider's base_url and the network") from None
        except UnicodeError:
            raise self._failure("the provider's key holds characters an HTTP header cannot carry",
                                "store the key again with `fw resource write provider NAME --api-key-stdin`") from None

    def _scrub(self, text: str) -> str:
        """Remove the key (even one shorter than redact's minimum) and every known secret."""
        if self._api_key:
            text = text.replace(self._api_key, secrets.REDACTED)
        return secrets.redact(text)

    def _snippet(self, body: str) -> str:
        # Scrub the whole body before cutting: a key that straddles the cut would survive a
        # cut-then-scrub, and so would one brought near the start by collapsing white space.
        text = " ".join(self._scrub(body).split())
        return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS] + "..."

    def _failure(self, message: str, hint: str, status: int | None = None) -> FwError:
        return FwError("unavailable", self._scrub(message), hint, reason="model", status=status)


def _hint_for_status(status: int) -> str:
    if status in (401, 403):
        return "check the provider's key: `fw resource write provider NAME --api-key-stdin`"
    if status == 404:
        return "check the provider's base_url (usually ending in /v1) and the model's model_id"
    if status == 429:
        return "the provider is rate limiting: wait, then try again"
    if status >= 500:
        return "the provider failed: try again later"
    return "check the provider's base_url and the model's model_id"


# -- reading answers -----------------------------------------------------------------------
def read_answer(text: str, content_type: str) -> Reply:
    """A reply from the response body, streamed or not, decided by the Content-Type."""
    if content_type.split(";")[0].strip().lower() == _STREAMED:
        return reply_from_stream(text)
    try:
        payload = json.loads(text)
    except ValueError:
        raise UnreadableAnswer("not JSON") from None
    return reply_from_completion(payload)


def reply_from_completion(payload: Any) -> Reply:
    message = _first_choice(payload).get("message")
    if not isinstance(message, dict):
        raise UnreadableAnswer("its first choice has no message")
    wire_calls = message.get("tool_calls") or []
    if not isinstance(wire_calls, list):
        raise UnreadableAnswer("tool_calls is not a list")
    calls = [_tool_call(position, wire) for position, wire in enumerate(wire_calls)]
    return Reply(_text(message.get("content")), calls)


def _first_choice(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise UnreadableAnswer("not a JSON object")
    _raise_for_error_object(payload)
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UnreadableAnswer("no choices")
    return choices[0]


def _raise_for_error_object(payload: dict[str, Any]) -> None:
    """Some servers answer 200 with {"error": ...} instead of an error status."""
    error = payload.get("error")
    if error:
        detail = error.get("message") if isinstance(error, dict) else error
        # redact, then cut: a key that straddles the cut would survive a cut-then-redact
        text = " ".join(secrets.redact(str(detail)).split())
        raise UnreadableAnswer(f"an error: {text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS] + '...'}")


def _text(content: Any) -> str | None:
    """The message text: a string, or (some servers) a list of text parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type", "text") == "text")
    raise UnreadableAnswer("content is neither text nor a list of text parts")


def _tool_call(position: int, wire: Any) -> ToolCall:
    function = wire.get("function") if isinstance(wire, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise UnreadableAnswer("a tool call has no function name")
    return ToolCall(_call_id(wire.get("id"), position), function["name"], _arguments_text(function.get("arguments")))


def _call_id(value: Any, position: int) -> str:
    # The id only pairs a tool result with its call; a server that omits it still gets a stable one.
    return value if isinstance(value, str) and value else f"call_{position}"


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, (dict, list)):  # a few servers send the object itself
        return json.dumps(arguments, ensure_ascii=False)
    raise UnreadableAnswer("a tool call's arguments are neither text nor an object")


# -- streamed answers ----------------------------------------------------------------------
def sse_data(text: str) -> Iterator[str]:
    """The data of each server-sent event (data lines joined by newlines, as the spec says)."""
    lines: list[str] = []
    for line in text.splitlines():
        if not line:
            if lines:
                yield "\n".join(lines)
                lines = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            lines.append(value[1:] if value.startswith(" ") else value)
    if lines:
        yield "\n".join(lines)


def reply_from_stream(text: str) -> Reply:
    """Concatenate the content deltas and merge the tool-call pieces of a streamed answer."""
    content: list[str] = []
    pieces: list[dict[str, Any]] = []
    chunks = 0
    for data in sse_data(text):
        if data.strip() == "[DONE]":
            break
        for delta in _deltas(_chunk(data)):
            chunks += 1
            text_piece = _text(delta.get("content"))
            if text_piece:
                content.append(text_piece)
            wire_pieces = delta.get("tool_calls") or []
            if not isinstance(wire_pieces, list):
                raise UnreadableAnswer("a streamed tool_calls is not a list")
            pieces.extend(wire_pieces)
    if not chunks:
        raise UnreadableAnswer("the stream held no choices")
    return Reply(joined(content) if content else None, merge_tool_call_pieces(pieces))


def joined(pieces: list[str]) -> str:
    """Streamed pieces as one text. Each chunk is JSON decoded alone, so an emoji whose
    surrogate pair was split over two chunks arrives as two lone halves: joined as UTF-16,
    the halves make the character again (a half without its pair stays as it is)."""
    return "".join(pieces).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _chunk(data: str) -> dict[str, Any]:
    try:
        chunk = json.loads(data)
    except ValueError:
        raise UnreadableAnswer("a streamed chunk is not JSON") from None
    if not isinstance(chunk, dict):
        raise UnreadableAnswer("a streamed chunk is not a JSON object")
    _raise_for_error_object(chunk)
    return chunk


def _deltas(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    """The first choice's delta of a chunk; a usage-only chunk has no choices and gives none."""
    choices = chunk.get("choices") or []
    if not isinstance(choices, list):
        raise UnreadableAnswer("a streamed chunk's choices is not a list")
    deltas = []
    for choice in choices:
        if not isinstance(choice, dict):
            raise UnreadableAnswer("a streamed choice is not an object")
        if choice.get("index", 0) == 0:
            delta = choice.get("delta", choice.get("message")) or {}
            if not isinstance(delta, dict):
                raise UnreadableAnswer("a streamed delta is not an object")
            deltas.append(delta)
    return deltas


def merge_tool_call_pieces(pieces: list[Any]) -> list[ToolCall]:
    """Streamed tool calls come in pieces keyed by `index`: the id and name arrive with the
    first piece, the arguments text is spread over all of them."""
    merged: dict[int, dict[str, Any]] = {}
    for piece in pieces:
        if not isinstance(piece, dict):
            raise UnreadableAnswer("a streamed tool call piece is not an object")
        slot = merged.setdefault(_piece_index(piece, merged), {"id": None, "name": None, "arguments": []})
        function = piece.get("function") or {}
        if not isinstance(function, dict):
            raise UnreadableAnswer("a streamed tool call's function is not an object")
        slot["id"] = slot["id"] or piece.get("id")
        slot["name"] = slot["name"] or function.get("name")
        if function.get("arguments"):
            slot["arguments"].append(_arguments_text(function["arguments"]))
    calls = []
    for position, index in enumerate(sorted(merged)):
        slot = merged[index]
        if not isinstance(slot["name"], str) or not slot["name"]:
            raise UnreadableAnswer("a streamed tool call has no function name")
        calls.append(ToolCall(_call_id(slot["id"], position), slot["name"], joined(slot["arguments"])))
    return calls


def _piece_index(piece: dict[str, Any], merged: dict[int, Any]) -> int:
    index = piece.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    # Without an index, a piece with an id opens a new call; one without continues the last.
    if piece.get("id") or not merged:
        return max(merged, default=-1) + 1
    return max(merged)
