"""What every dialect shares: fw's conversation, a model's reply, and the request a dialect asks
to be sent. Plain data and pure functions: no I/O, nothing of fw imported, so the transport
that sends the requests (threads today, an event loop tomorrow) is the caller's business.

fw's conversation is a list of messages in the chat completions shape, whatever the API:

    {"role": "system" | "user", "content": TEXT}
    {"role": "assistant", "content": TEXT | None, "tool_calls"?: [{"id", "type": "function",
     "function": {"name", "arguments" (JSON text)}}], ...}
    {"role": "tool", "tool_call_id", "content": TEXT}

An assistant message may carry more fields (`Reply.kept`): what the dialect that made it must
send back with it within the same loop (DeepSeek's `reasoning_content`, Anthropic's content
blocks with their thinking). They are never stored: a conversation kept for later holds
`STORED_FIELDS` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

STORED_FIELDS = ("role", "content", "tool_calls", "tool_call_id")  # what a kept conversation holds of a message

OnText = Callable[[str], None]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, as the model wrote it; the loop parses it


@dataclass
class Reply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None  # chat completions' words: stop, length, tool_calls, content_filter, ...
    refusal: str | None = None  # the model declined: this text is its answer
    kept: dict[str, Any] = field(default_factory=dict)  # sent back on the assistant message (see above)


@dataclass(frozen=True)
class HttpRequest:
    """What a dialect asks the transport to send: the body is JSON (None: no body)."""

    method: str
    url: str
    headers: dict[str, str]
    body: dict[str, Any] | None = None


class UnreadableAnswer(Exception):
    """The server answered 2xx with something that is not an answer of its API at all (not
    JSON, no choices, an empty stream): most likely base_url points elsewhere."""


class UnusableAnswer(UnreadableAnswer):
    """An answer of the API that fw cannot use: a tool call without a name, arguments that are
    neither text nor an object, content that is not text, an empty answer. The model's
    failure, not the caller's."""


class ServerError(Exception):
    """The server answered 2xx (or mid-stream) with an error object instead of an answer."""

    def __init__(self, error: Any) -> None:
        super().__init__("an error object")
        self.error = error

    @property
    def detail(self) -> str:
        import json

        error = self.error
        detail = error.get("message") if isinstance(error, dict) else error
        return str(detail if detail not in (None, "") else json.dumps(error, ensure_ascii=False))


class StreamedAnswer(Protocol):
    """A streamed answer read event by event (the data of each server-sent event)."""

    done: bool

    def add(self, data: str) -> None: ...

    def reply(self) -> Reply: ...


class Dialect(Protocol):
    """One API's wire format: requests built and answers read, nothing sent."""

    api: str
    unreadable_hint: str  # what to check when an answer is not one of this API's

    def chat_request(self, base_url: str, api_key: str, model_id: str, conversation: list[dict[str, Any]],
                     tools: list[dict[str, Any]] | None, *, stream: bool, max_tokens: int | None) -> HttpRequest: ...

    def reply_from_answer(self, payload: Any) -> Reply: ...

    def streamed_answer(self, on_text: OnText | None) -> StreamedAnswer: ...

    def models_request(self, base_url: str, api_key: str) -> HttpRequest: ...

    def model_ids(self, payload: Any) -> list[str]: ...


def conversation_tool_call(call: ToolCall) -> dict[str, Any]:
    """A tool call as fw's conversation holds it (the chat completions shape)."""
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def stored_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as a kept conversation holds it: no reasoning, no dialect's extra fields."""
    return {key: message[key] for key in STORED_FIELDS if key in message}


def joined(pieces: list[str]) -> str:
    """Streamed text pieces as one text. A character outside the BMP that a server sent as a
    surrogate pair split over two pieces becomes the one character it is."""
    text = "".join(pieces)
    if any("\ud800" <= ch <= "\udbff" for ch in text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
    return text


class HeldSurrogate:
    """Text pieces passed on as they stream in, holding back a high surrogate at a piece's end
    until its pair arrives with the next piece."""

    def __init__(self, on_text: OnText | None) -> None:
        self._on_text = on_text
        self._high = ""

    def __call__(self, piece: str) -> None:
        if self._on_text is None:
            return
        piece, self._high = joined([self._high, piece]), ""
        if piece and "\ud800" <= piece[-1] <= "\udbff":
            piece, self._high = piece[:-1], piece[-1]
        if piece:
            self._on_text(piece)


def json_object(data: str, what: str) -> dict[str, Any]:
    """One streamed event's data as a JSON object."""
    import json

    try:
        value = json.loads(data)
    except ValueError:
        raise UnreadableAnswer(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise UnreadableAnswer(f"{what} is not a JSON object")
    return value


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as JSON text: some servers send the object itself."""
    import json

    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, (dict, list)):
        return json.dumps(arguments, ensure_ascii=False)
    raise UnusableAnswer("a tool call's arguments are neither text nor an object")
