"""The one place that speaks the OpenAI-compatible chat completions API.

`ChatClient.complete` sends the conversation and the tools, and reads the answer whether it
comes as one JSON document or as a server-sent event stream (whatever was asked for: some
servers ignore the `stream` flag). Every failure is `FwError("unavailable", reason="model")`
with the key scrubbed from anything the server echoed back.

The timeout bounds each answer as a whole, retries included, however slowly it arrives: the
exchange is read on a thread of its own and the caller waits for its pieces against one
deadline. A 408, 409, 429 or 5xx answer, or a connection dropped once made, is tried again
up to twice, after `Retry-After` or a short backoff, as long as the deadline allows.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from ..errors import FwError
from ..home import secrets
from ..http_client import SseReader, UnreadableStream, http_client

SNIPPET_CHARS = 200  # of an error body shown to the user: enough to read the server's reason
_STREAMED = "text/event-stream"
MAX_TRIES = 3  # the first request and two retries
BACKOFF_SECONDS = (0.5, 1.0)  # before the second and the third try, unless Retry-After says otherwise
RETRIED_STATUSES = frozenset({408, 409, 429})  # and every 5xx
EMPTY_IS_AN_ANSWER = frozenset({"length", "content_filter"})  # reported through finish_reason

OnEvent = Callable[[dict[str, Any]], None]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, as the model wrote it; the loop parses it


@dataclass
class Reply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    refusal: str | None = None  # the model declined: this text is its answer


class UnreadableAnswer(Exception):
    """The server answered 2xx with something that is not a chat completion."""


class ServerError(Exception):
    """The server answered 2xx (or mid-stream) with an error object instead of a completion."""

    def __init__(self, error: Any) -> None:
        super().__init__("an error object")
        self.error = error

    @property
    def detail(self) -> str:
        error = self.error
        detail = error.get("message") if isinstance(error, dict) else error
        return str(detail if detail not in (None, "") else json.dumps(error, ensure_ascii=False))


class _Retryable(Exception):
    """One try failed in a way that is worth another try."""

    def __init__(self, message: str, hint: str, status: int | None, wait: float | None = None) -> None:
        super().__init__(message)
        self.message, self.hint, self.status, self.wait = message, hint, status, wait


class _Late(Exception):
    """The deadline passed before the answer was whole."""


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


class _Exchange:
    """One POST, sent and read on a thread of its own; the caller takes its pieces (the status
    and headers, then the body's bytes) against a deadline, so a server that trickles its
    answer cannot hold the caller past it. A thread given up on stops at its next piece, or at
    httpx's own timeout (the time that was left when the request was sent)."""

    def __init__(self, request: Any, deadline: float) -> None:
        self.deadline = deadline
        self._pieces: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._abandoned = False
        threading.Thread(target=self._read, args=(request,), daemon=True, name="fw-model-answer").start()

    def _read(self, request: Any) -> None:
        try:
            client = http_client(request.url.scheme)
            response = client.send(request, stream=True)
            try:
                self._pieces.put(("head", response))
                for data in response.iter_bytes():
                    if self._abandoned:
                        return
                    self._pieces.put(("data", data))
            finally:
                response.close()
            self._pieces.put(("end", None))
        except BaseException as exc:  # handed to the caller, who decides what it means
            self._pieces.put(("error", exc))

    def _next(self) -> tuple[str, Any]:
        remaining = self.deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise queue.Empty
            kind, value = self._pieces.get(timeout=remaining)
        except queue.Empty:
            self.abandon()
            raise _Late() from None
        if kind == "error":
            raise value
        return kind, value

    def head(self) -> Any:
        return self._next()[1]

    def body(self) -> Iterator[bytes]:
        while True:
            kind, value = self._next()
            if kind == "end":
                return
            yield value

    def abandon(self) -> None:
        self._abandoned = True


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

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, on_event: OnEvent | None = None
    ) -> Reply:
        """One model call: the reply's text and the tool calls it asks for. `on_event` hears
        the text as it streams in (`{"type": "text", "text"}`) and each retry (`{"type": "retry"}`)."""
        emit = on_event or (lambda event: None)
        content = _encoded(self._request_body(messages, tools))
        deadline = time.monotonic() + self.timeout
        tries = 0
        while True:
            tries += 1
            try:
                return self._try(content, deadline, emit)
            except _Retryable as failed:
                wait = failed.wait if failed.wait is not None else BACKOFF_SECONDS[min(tries, len(BACKOFF_SECONDS)) - 1]
                if tries >= MAX_TRIES or time.monotonic() + wait >= deadline:
                    raise self._failure(f"{failed.message} ({_tries(tries)}{_past_deadline(failed, tries)})",
                                        failed.hint, failed.status, tries) from None
                emit({"type": "retry", "try": tries + 1, "of": MAX_TRIES, "wait": wait, "why": self._scrub(failed.message)})
                time.sleep(wait)
            except _Late:
                raise self._failure(f"{self.url} did not answer in time (the whole answer within {self.timeout:g} s, "
                                    f"{_tries(tries)})",
                                    "the model may be overloaded; try again with a longer --timeout, or check the provider's base_url",
                                    None, tries) from None
            except FwError as exc:
                exc.extra.setdefault("tries", tries)
                raise

    def _request_body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_id, "messages": messages}
        if tools:
            body["tools"] = [wire_tool(t) for t in tools]
        if self.stream:
            body["stream"] = True
        return body

    def _request(self, content: bytes, deadline: float) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {self._api_key}", "Content-Type": "application/json"}
        timeout = httpx.Timeout(max(deadline - time.monotonic(), 0.001))
        try:
            return http_client("https" if self.url.startswith("https:") else "http").build_request(
                "POST", self.url, content=content, headers=headers, timeout=timeout)
        except UnicodeError:
            raise self._failure("the provider's key holds characters an HTTP header cannot carry",
                                "store the key again with `fw resource write provider NAME --api-key-stdin`") from None
        except httpx.InvalidURL:
            raise self._failure(f"{self.url} is not a URL fw can send to", "check the provider's base_url") from None

    def _try(self, content: bytes, deadline: float, emit: OnEvent) -> Reply:
        """One request and its answer, read whole before the deadline."""
        import httpx

        exchange = _Exchange(self._request(content, deadline), deadline)
        try:
            try:
                response = exchange.head()
                status = response.status_code
                if not 200 <= status < 300:
                    self._refuse_status(status, response.headers, b"".join(exchange.body()))
                reply = self._read_reply(exchange, response.headers.get("content-type", ""), emit)
            except httpx.TimeoutException:
                raise _Late() from None
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                # The class name only: an exception's text may quote a request header.
                raise _Retryable(f"the connection to {self.url} was dropped ({type(exc).__name__})",
                                 "the model server closed the connection; try again, or check it is running", None) from None
            except httpx.HTTPError as exc:
                raise self._failure(f"could not reach {self.url}: {type(exc).__name__}",
                                    "check the provider's base_url and the network") from None
        finally:
            exchange.abandon()
        return reply

    def _refuse_status(self, status: int, headers: Any, body: bytes) -> None:
        message = f"{self.url} answered {status}: {self._snippet(body.decode('utf-8', 'replace'))}"
        if status in RETRIED_STATUSES or status >= 500:
            raise _Retryable(message, _hint_for_status(status), status, retry_after(headers))
        raise self._failure(message, _hint_for_status(status), status)

    def _read_reply(self, exchange: _Exchange, content_type: str, emit: OnEvent) -> Reply:
        try:
            if content_type.split(";")[0].strip().lower() == _STREAMED:
                reply = read_stream(exchange.body(), emit)
            else:
                reply = reply_from_completion(_json(b"".join(exchange.body())))
        except ServerError as exc:
            raise self._failure(f"{self.url} answered with an error: {self._snippet(exc.detail)}",
                                _hint_for_error_object(exc.error), 200) from None
        except (UnreadableAnswer, UnreadableStream) as exc:
            raise self._failure(f"{self.url} gave an answer fw cannot read: {exc}",
                                "is base_url an OpenAI-compatible API (usually ending in /v1)?", 200) from None
        if not reply.content and not reply.tool_calls and not reply.refusal and reply.finish_reason not in EMPTY_IS_AN_ANSWER:
            raise self._failure(f"the model {self.model_id!r} gave an empty answer",
                                "try again, or check the model's model_id", 200)
        return reply

    def _scrub(self, text: str) -> str:
        """Remove the key (even one shorter than redact's minimum) and every known secret."""
        return secrets.redact_with(text, self._api_key)

    def _snippet(self, body: str) -> str:
        # Scrub the whole body before cutting: a key that straddles the cut would survive a
        # cut-then-scrub, and so would one brought near the start by collapsing white space.
        text = " ".join(self._scrub(body).split())
        return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS] + "..."

    def _failure(self, message: str, hint: str, status: int | None = None, tries: int | None = None) -> FwError:
        extra: dict[str, Any] = {"reason": "model", "status": status}
        if tries is not None:
            extra["tries"] = tries
        return FwError("unavailable", self._scrub(message), hint, **extra)


def _encoded(body: dict[str, Any]) -> bytes:
    try:
        return json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate somewhere: the escaped form is still valid JSON
        return json.dumps(body).encode()


def _tries(tries: int) -> str:
    return f"{tries} tr{'y' if tries == 1 else 'ies'}"


def _past_deadline(failed: _Retryable, tries: int) -> str:
    if tries < MAX_TRIES and failed.wait is not None:
        return f"; it asked to wait {failed.wait:g} s, past the answer's timeout"
    return ""


def retry_after(headers: Any) -> float | None:
    """Seconds to wait before the next try, from `retry-after-ms` or `Retry-After` (seconds
    or an HTTP date); None when the server says nothing usable."""
    try:
        if headers.get("retry-after-ms"):
            return max(float(headers["retry-after-ms"]) / 1000, 0.0)
        value = (headers.get("retry-after") or "").strip()
        if not value:
            return None
        if value.replace(".", "", 1).isdigit():
            return float(value)
        return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (ValueError, TypeError, OverflowError):
        return None


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


def _hint_for_error_object(error: Any) -> str:
    """A hint from what the error object says of itself (its code, type or status)."""
    fields = error if isinstance(error, dict) else {}
    for key in ("status", "code"):
        value = fields.get(key)
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit() and len(value) == 3):
            return _hint_for_status(int(value))
    words = " ".join(str(fields.get(k) or "") for k in ("type", "code")).lower()
    if any(w in words for w in ("auth", "api_key", "permission", "key")):
        return _hint_for_status(401)
    if any(w in words for w in ("rate", "quota", "limit_exceeded")):
        return _hint_for_status(429)
    if "context" in words or "length" in words:
        return "the conversation is longer than the model accepts: use a model with a larger context, or a lower --max-rounds"
    if "not_found" in words or "model" in words:
        return _hint_for_status(404)
    return "the provider reported this error: see its message; try again, or check the model's model_id"


# -- reading answers -----------------------------------------------------------------------
def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise UnreadableAnswer("not JSON") from None


def reply_from_completion(payload: Any) -> Reply:
    choice = _first_choice(payload)
    message = choice.get("message")
    if not isinstance(message, dict):
        raise UnreadableAnswer("its first choice has no message")
    wire_calls = message.get("tool_calls") or []
    if not isinstance(wire_calls, list):
        raise UnreadableAnswer("tool_calls is not a list")
    calls = [_tool_call(position, wire) for position, wire in enumerate(wire_calls)]
    refusal = message.get("refusal")
    return Reply(_text(message.get("content")), calls, _finish_reason(choice), refusal if isinstance(refusal, str) and refusal else None)


def _first_choice(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise UnreadableAnswer("not a JSON object")
    _raise_for_error_object(payload)
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UnreadableAnswer("no choices")
    return choices[0]


def _raise_for_error_object(payload: dict[str, Any]) -> None:
    """Some servers answer 200 (or mid-stream) with {"error": ...} instead of an error status.
    The client redacts the server's message, then cuts it."""
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


def joined(pieces: list[str]) -> str:
    """Streamed text pieces as one text. A character outside the BMP that a server sent as a
    surrogate pair split over two chunks becomes the one character it is."""
    text = "".join(pieces)
    if any("\ud800" <= ch <= "\udbff" for ch in text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
    return text


# -- streamed answers ----------------------------------------------------------------------
class StreamedReply:
    """The pieces of a streamed answer as they come: the content deltas (heard by `on_text`
    as they arrive), the refusal, the tool-call pieces and the last finish_reason."""

    def __init__(self, on_text: Callable[[str], None] | None = None) -> None:
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.pieces: list[Any] = []
        self.finish_reason: str | None = None
        self.chunks = 0
        self.done = False
        self._on_text = on_text
        self._high: str = ""  # a high surrogate waiting for its pair in the next piece

    def add(self, data: str) -> None:
        if data.strip() == "[DONE]":
            self.done = True
            return
        for choice in _choices(_chunk(data)):
            self.chunks += 1
            self.finish_reason = _finish_reason(choice) or self.finish_reason
            delta = choice.get("delta", choice.get("message")) or {}
            if not isinstance(delta, dict):
                raise UnreadableAnswer("a streamed delta is not an object")
            text_piece = _text(delta.get("content"))
            if text_piece:
                self.content.append(text_piece)
                self._heard(text_piece)
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            wire_pieces = delta.get("tool_calls") or []
            if not isinstance(wire_pieces, list):
                raise UnreadableAnswer("a streamed tool_calls is not a list")
            self.pieces.extend(wire_pieces)

    def _heard(self, piece: str) -> None:
        if self._on_text is None:
            return
        piece, self._high = joined([self._high, piece]), ""
        if piece and "\ud800" <= piece[-1] <= "\udbff":
            piece, self._high = piece[:-1], piece[-1]
        if piece:
            self._on_text(piece)

    def reply(self) -> Reply:
        if not self.chunks:
            raise UnreadableAnswer("the stream held no choices")
        return Reply(joined(self.content) if self.content else None, merge_tool_call_pieces(self.pieces),
                     self.finish_reason, joined(self.refusal) or None)


def read_stream(body: Iterator[bytes], emit: OnEvent | None = None) -> Reply:
    """A streamed answer read as its bytes arrive; each text piece is emitted as it comes."""
    on_text = (lambda text: emit({"type": "text", "text": text})) if emit else None
    reader, reply = SseReader(), StreamedReply(on_text)
    for data in body:
        for event in reader.feed(data):
            reply.add(event)
            if reply.done:
                return reply.reply()
    for event in reader.finish():
        reply.add(event)
        if reply.done:
            break
    return reply.reply()


def _chunk(data: str) -> dict[str, Any]:
    try:
        chunk = json.loads(data)
    except ValueError:
        raise UnreadableAnswer("a streamed chunk is not JSON") from None
    if not isinstance(chunk, dict):
        raise UnreadableAnswer("a streamed chunk is not a JSON object")
    _raise_for_error_object(chunk)
    return chunk


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
            raise UnreadableAnswer("a streamed tool call piece is not an object")
        slot_index = _piece_index(piece, merged, by_id)
        slot = merged.setdefault(slot_index, {"id": None, "name": None, "arguments": []})
        function = piece.get("function") or {}
        if not isinstance(function, dict):
            raise UnreadableAnswer("a streamed tool call's function is not an object")
        slot["id"] = slot["id"] or piece.get("id")
        if isinstance(slot["id"], str) and slot["id"]:
            by_id.setdefault(slot["id"], slot_index)
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


def _piece_index(piece: dict[str, Any], merged: dict[int, Any], by_id: dict[str, int]) -> int:
    index = piece.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    # Without an index: the call of the same id, a new call for a new id, else the last call.
    call_id = piece.get("id")
    if isinstance(call_id, str) and call_id:
        return by_id[call_id] if call_id in by_id else max(merged, default=-1) + 1
    return max(merged, default=0)
