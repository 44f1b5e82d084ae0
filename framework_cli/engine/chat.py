"""The transport that carries fw's conversation to a model: requests built and answers read
by the provider's dialect (framework_cli/dialects: chat completions or Anthropic's Messages
API), sent and read here, the same way for both.

`ChatClient.complete` sends the conversation and the tools, and reads the answer whether it
comes as one JSON document or as a server-sent event stream (whatever was asked for: some
servers ignore the `stream` flag). A failure is `FwError("unavailable")` with `reason: model`
(the provider failed, refused or could not be reached) or `reason: model_answer` (it answered,
but with something fw cannot use: a lone UTF-16 surrogate, a broken tool call), with the key
scrubbed from anything the server echoed back.

The timeout bounds each answer as a whole, retries included, however slowly it arrives: the
exchange is read on the event loop, against one deadline, and waiting holds no thread. A 408,
409, 429 or 5xx answer, or a connection dropped once made, is tried again
up to twice, after `Retry-After` or a short backoff, as long as the deadline allows.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from email.utils import parsedate_to_datetime
from typing import Any

from ..dialects import dialect_for
from ..dialects.base import Dialect, HttpRequest, Reply, ServerError, StreamedAnswer, UnreadableAnswer, UnusableAnswer
from ..errors import FwError, lone_surrogate_at
from ..home import secrets
from ..http_client import SseReader, UnreadableStream, async_http_client

SNIPPET_CHARS = 200  # of an error body shown to the user: enough to read the server's reason
_STREAMED = "text/event-stream"
MAX_TRIES = 3  # the first request and two retries
BACKOFF_SECONDS = (0.5, 1.0)  # before the second and the third try, unless Retry-After says otherwise
RETRIED_STATUSES = frozenset({408, 409, 429})  # and every 5xx
EMPTY_IS_AN_ANSWER = frozenset({"length", "content_filter"})  # reported through finish_reason
MODEL, MODEL_ANSWER = "model", "model_answer"  # the reasons of `unavailable`

OnEvent = Callable[[dict[str, Any]], None]


class _Retryable(Exception):
    """One try failed in a way that is worth another try."""

    def __init__(self, message: str, hint: str, status: int | None, wait: float | None = None) -> None:
        super().__init__(message)
        self.message, self.hint, self.status, self.wait = message, hint, status, wait


class _Late(Exception):
    """The deadline passed before the answer was whole."""


class ChatClient:
    """A model behind its provider's API: base_url (ending in /v1), key and model id, spoken in
    the provider's dialect (default: chat completions)."""

    _made = 0

    def __init__(
        self, base_url: str, api_key: str, model_id: str, *, timeout: float = 60.0, stream: bool = False,
        dialect: Dialect | None = None, max_tokens: int | None = None, provider: str = "NAME",
    ) -> None:
        secrets.remember(api_key)
        self.provider = provider  # its name, for the hints
        self.dialect = dialect or dialect_for(None)
        self.base_url = base_url
        self.model_id = model_id
        self.timeout = timeout
        self.stream = stream
        self.max_tokens = max_tokens
        self._api_key = api_key
        self.url = self._chat_request([], None).url  # where answers come from, as messages name it
        ChatClient._made += 1
        self._shard = ChatClient._made  # runs at once spread over the loop's clients (http_client.SHARDS)

    def _chat_request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> HttpRequest:
        return self.dialect.chat_request(self.base_url, self._api_key, self.model_id, messages, tools,
                                         stream=self.stream, max_tokens=self.max_tokens)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, on_event: OnEvent | None = None
    ) -> Reply:
        """One model call: the reply's text and the tool calls it asks for. `on_event` hears
        the text as it streams in (`{"type": "text", "text"}`) and each retry (`{"type": "retry"}`).
        Waiting for the answer holds no thread: the exchange is read on the event loop."""
        emit = on_event or (lambda event: None)
        request = self._chat_request(messages, tools)
        content = _encoded(request.body or {})
        deadline = time.monotonic() + self.timeout
        tries = 0
        while True:
            tries += 1
            try:
                return await asyncio.wait_for(self._try(request, content, deadline, emit), max(deadline - time.monotonic(), 0.001))
            except _Retryable as failed:
                wait = failed.wait if failed.wait is not None else BACKOFF_SECONDS[min(tries, len(BACKOFF_SECONDS)) - 1]
                if tries >= MAX_TRIES or time.monotonic() + wait >= deadline:
                    raise self._failure(f"{failed.message} ({_tries(tries)}{_past_deadline(failed, tries)})",
                                        failed.hint, failed.status, tries) from None
                emit({"type": "retry", "try": tries + 1, "of": MAX_TRIES, "wait": wait, "why": self._scrub(failed.message)})
                await asyncio.sleep(wait)
            except (_Late, asyncio.TimeoutError, TimeoutError):
                raise self._failure(f"{self.url} did not answer in time (the whole answer within {self.timeout:g} s, "
                                    f"{_tries(tries)})",
                                    "the model may be overloaded; try again with a longer --timeout, or check the provider's base_url",
                                    None, tries) from None
            except FwError as exc:
                exc.extra.setdefault("tries", tries)
                raise

    def _request(self, client: Any, request: HttpRequest, content: bytes, deadline: float) -> Any:
        import httpx

        timeout = httpx.Timeout(max(deadline - time.monotonic(), 0.001))
        try:
            return client.build_request(request.method, request.url, content=content, headers=request.headers, timeout=timeout)
        except UnicodeError:
            raise self._failure("the provider's key holds characters an HTTP header cannot carry",
                                f"store the key again with `fw resource write provider {self.provider} --api-key-stdin`") from None
        except httpx.InvalidURL:
            raise self._failure(f"{self.url} is not a URL fw can send to", "check the provider's base_url") from None

    async def _try(self, request: HttpRequest, content: bytes, deadline: float, emit: OnEvent) -> Reply:
        """One request and its answer, read whole (the caller bounds it by the deadline)."""
        import httpx

        client = async_http_client("https" if request.url.startswith("https:") else "http", self._shard)
        try:
            response = await client.send(self._request(client, request, content, deadline), stream=True)
            try:
                status = response.status_code
                if not 200 <= status < 300:
                    self._refuse_status(status, response.headers, await response.aread())
                return await self._read_reply(response, response.headers.get("content-type", ""), emit)
            finally:
                await response.aclose()
        except httpx.TimeoutException:
            raise _Late() from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            # The class name only: an exception's text may quote a request header.
            raise _Retryable(f"the connection to {self.url} was dropped ({type(exc).__name__})",
                             "the model server closed the connection; try again, or check it is running", None) from None
        except httpx.HTTPError as exc:
            if "CERTIFICATE_VERIFY_FAILED" in str(exc):  # the TLS library's words: no request header in them
                raise self._failure(f"could not reach {self.url}: its TLS certificate could not be verified",
                                    "check the base_url's host (the certificate must name it) and that the certificate has not "
                                    "expired; for a server of your own, set SSL_CERT_FILE to a file that holds its certificate "
                                    "(or its CA's)") from None
            # a connection not made: the system's words (no request was sent, so none of its headers)
            why = (str(exc) or type(exc).__name__) if isinstance(exc, httpx.ConnectError) else type(exc).__name__
            raise self._failure(f"could not reach {self.url}: {why}",
                                "check the provider's base_url (its host and port), that the server is running, and the network") from None

    def _refuse_status(self, status: int, headers: Any, body: bytes) -> None:
        message = f"{self.url} answered {status}: {self._snippet(body.decode('utf-8', 'replace'))}"
        if status in RETRIED_STATUSES or status >= 500:
            raise _Retryable(message, _hint_for_status(status, self.provider), status, retry_after(headers))
        raise self._failure(message, _hint_for_status(status, self.provider), status)

    async def _read_reply(self, response: Any, content_type: str, emit: OnEvent) -> Reply:
        try:
            if content_type.split(";")[0].strip().lower() == _STREAMED:
                on_text = (lambda text: emit({"type": "text", "text": text}))
                reply = await read_stream(response.aiter_bytes(), self.dialect.streamed_answer(on_text))
            else:
                reply = self.dialect.reply_from_answer(_json(await response.aread()))
        except ServerError as exc:
            raise self._failure(f"{self.url} answered with an error: {self._snippet(exc.detail)}",
                                _hint_for_error_object(exc.error, self.provider), 200) from None
        except UnusableAnswer as exc:
            raise self._unusable(f"the model {self.model_id!r} gave an answer fw cannot use: {exc}") from None
        except (UnreadableAnswer, UnreadableStream) as exc:
            raise self._failure(f"{self.url} gave an answer fw cannot read: {exc}", self.dialect.unreadable_hint,
                                200) from None
        if not reply.content and not reply.tool_calls and not reply.refusal and reply.finish_reason not in EMPTY_IS_AN_ANSWER:
            raise self._unusable(f"the model {self.model_id!r} gave an empty answer")
        at = lone_surrogate_at({"content": reply.content, "refusal": reply.refusal}, "")
        if at is not None:
            raise self._unusable(f"the model {self.model_id!r} answered with a lone UTF-16 surrogate in its {at}, "
                                 "which is not text")
        return reply

    def _unusable(self, message: str) -> FwError:
        return self._failure(message, "the model answered, but not with anything fw can use: try again, "
                             "or another model", 200, reason=MODEL_ANSWER)

    def _scrub(self, text: str) -> str:
        """Remove the key (even one shorter than redact's minimum) and every known secret."""
        return secrets.redact_with(text, self._api_key)

    def _snippet(self, body: str) -> str:
        # Scrub the whole body before cutting: a key that straddles the cut would survive a
        # cut-then-scrub, and so would one brought near the start by collapsing white space.
        text = " ".join(self._scrub(body).split())
        return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS] + "..."

    def _failure(self, message: str, hint: str, status: int | None = None, tries: int | None = None, *,
                 reason: str = MODEL) -> FwError:
        extra: dict[str, Any] = {"reason": reason, "status": status}
        if tries is not None:
            extra["tries"] = tries
        return FwError("unavailable", self._scrub(message), hint, **extra)


def _encoded(body: dict[str, Any]) -> bytes:
    try:
        return json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate somewhere: the escaped form is still valid JSON
        return json.dumps(body).encode()


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise UnreadableAnswer("not JSON") from None


async def read_stream(body: AsyncIterator[bytes], answer: StreamedAnswer) -> Reply:
    """A streamed answer read as its bytes arrive, event by event, until the dialect says it is whole."""
    reader = SseReader()
    async for data in body:
        for event in reader.feed(data):
            answer.add(event)
            if answer.done:
                return answer.reply()
    for event in reader.finish():
        answer.add(event)
        if answer.done:
            break
    return answer.reply()


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


def _hint_for_status(status: int, provider: str = "NAME") -> str:
    if status in (401, 403):
        return f"check the provider's key: `fw resource write provider {provider} --api-key-stdin`"
    if status == 404:
        return "check the provider's base_url (usually ending in /v1) and the model's model_id"
    if status == 429:
        return "the provider is rate limiting: wait, then try again"
    if status >= 500:
        return "the provider failed: try again later"
    return "check the provider's base_url and the model's model_id"


def _hint_for_error_object(error: Any, provider: str = "NAME") -> str:
    """A hint from what the error object says of itself (its code, type or status)."""
    fields = error if isinstance(error, dict) else {}
    for key in ("status", "code"):
        value = fields.get(key)
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit() and len(value) == 3):
            return _hint_for_status(int(value), provider)
    words = " ".join(str(fields.get(k) or "") for k in ("type", "code")).lower()
    if any(w in words for w in ("auth", "api_key", "permission", "key")):
        return _hint_for_status(401, provider)
    if any(w in words for w in ("rate", "quota", "limit_exceeded")):
        return _hint_for_status(429)
    if "overloaded" in words:
        return _hint_for_status(529)
    if "context" in words or "length" in words:
        return "the conversation is longer than the model accepts: use a model with a larger context, or a lower --max-rounds"
    if "not_found" in words or "model" in words:
        return _hint_for_status(404)
    return "the provider reported this error: see its message; try again, or check the model's model_id"
