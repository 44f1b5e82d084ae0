"""The streamable HTTP transport of MCP: each JSON-RPC request is a POST, answered by one JSON
message or by an event stream that carries it, with the session id the handshake gave; the
answers are read as `mcp_links.Link` reads a stdio server's (one bad tool or line never loses
the server)."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from ..errors import FwError
from ..home.secrets import redact
from ..http_client import SseReader, UnreadableStream, bare_tls_context
from .mcp_documents import MESSAGE_CHARS
from .mcp_links import MAX_MESSAGE_BYTES, PROTOCOL_VERSION, Link, LinkError, ServerSpec


class _SessionGone(LinkError):
    """The server answered 404 to a request of fw's session: it has forgotten the session."""


@contextlib.asynccontextmanager
async def http_link(spec: ServerSpec) -> AsyncIterator[_HttpLink]:
    """A link to a server over MCP's streamable HTTP transport, from its handshake to the end
    of its session (a DELETE, as the transport asks; a server may refuse it)."""
    import anyio
    import httpx

    if not spec.url:
        raise FwError("invalid", "an http MCP server needs a url", "set the mcp's url")
    # A server may hold a stream open while a tool works: the call's own limits bound it.
    timeout = httpx.Timeout(30.0, read=None)
    verify: Any = True if spec.url.startswith("https:") else bare_tls_context()  # plain http loads no CA bundle
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, verify=verify) as http:
        link = _HttpLink(http, spec.url, spec.headers)
        try:
            await link.initialize()
            yield link
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                await link.end_session()


class _HttpLink(Link):
    """JSON-RPC over streamable HTTP, spoken directly (not through the SDK, whose import takes
    over a second and whose client drops a whole tool list for one malformed tool): each
    request is a POST, answered by one JSON message or by an event stream that carries the
    answer (and perhaps requests from the server, which are refused, and notifications). The
    session id the server gives at the handshake goes on every later request."""

    def __init__(self, http: Any, url: str, headers: dict[str, str]) -> None:
        import anyio

        self.http, self.url, self.headers = http, url, dict(headers)
        self._ids = itertools.count(1)
        self._progress = {}
        self.session: str | None = None
        self.version: str | None = None
        self._restart = anyio.Lock()

    def agreed(self, result: dict[str, Any]) -> None:
        """The protocol version the server answered goes on every later request."""
        version = result.get("protocolVersion")
        self.version = version if isinstance(version, str) and _visible_ascii(version) and len(version) < 40 else PROTOCOL_VERSION

    async def request(self, method: str, params: dict[str, Any], call: Any = None) -> dict[str, Any]:
        """One request; when the server has forgotten fw's session (404, a restarted server),
        a new session is started, as the transport asks, and the request sent once more (a
        404 means the server did nothing with it)."""
        session = self.session
        try:
            answer = await self._send_request(method, params, call)
        except _SessionGone:
            await self._start_again(session)
            answer = await self._send_request(method, params, call)
        return self.result_of(answer, method)

    async def _send_request(self, method: str, params: dict[str, Any], call: Any) -> dict[str, Any]:
        request_id = next(self._ids)
        try:
            params = self.with_progress(request_id, params, call)
            message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            return await self._post(message, request_id)
        finally:
            self._progress.pop(request_id, None)

    async def _start_again(self, lost: str | None) -> None:
        async with self._restart:
            if self.session == lost:  # not yet started again by a call that found it gone first
                self.session = self.version = None
                await self.initialize()

    async def notify(self, message: dict[str, Any]) -> None:
        await self._post(message, None)

    def _request_headers(self) -> dict[str, str]:
        headers = {**self.headers, "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        return headers

    async def _post(self, message: dict[str, Any], wanted: int | None) -> dict[str, Any]:
        """Send one message; the answer whose id is `wanted` (None: a notification or an answer
        of fw's own, which the server only acknowledges)."""
        import httpx

        body = json.dumps(message, ensure_ascii=False).encode("utf-8")
        try:
            async with self.http.stream("POST", self.url, content=body, headers=self._request_headers()) as response:
                if message.get("method") == "initialize":
                    self.session = _session_id(response.headers.get("mcp-session-id"))
                if not 200 <= response.status_code < 300:
                    why = await _http_refusal(response, self.session is not None)
                    gone = response.status_code == 404 and self.session is not None and message.get("method") != "initialize"
                    raise (_SessionGone if gone else LinkError)(why)
                if wanted is None:
                    return {}
                kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if kind == "application/json":
                    found = await self._take(await _read_capped(response), wanted)
                elif kind == "text/event-stream":
                    found = await self._from_stream(response, wanted)
                else:
                    raise LinkError(f"the server answered with {kind or 'no content type'}, neither JSON nor an event stream")
        except httpx.TimeoutException:
            raise LinkError(f"{self.url} did not answer in time") from None
        except httpx.HTTPError as exc:  # the class name only: an exception's text may quote a header
            raise LinkError(f"{self.url} could not be reached ({type(exc).__name__})") from None
        except UnreadableStream as exc:
            raise LinkError(f"the server's event stream cannot be read: {exc}") from None
        except UnicodeError:
            raise LinkError("a header holds characters an HTTP header cannot carry") from None
        if found is None:
            raise LinkError(f"the server's answer to {message.get('method')} did not come")
        return found

    async def _from_stream(self, response: Any, wanted: int) -> dict[str, Any] | None:
        reader, read = SseReader(), 0
        async for chunk in response.aiter_bytes():
            read += len(chunk)
            if read > MAX_MESSAGE_BYTES:
                raise LinkError("the server sent an event stream over 64 MiB")
            for event in reader.feed(chunk):
                found = await self._take(event, wanted)
                if found is not None:
                    return found
        for event in reader.finish():
            found = await self._take(event, wanted)
            if found is not None:
                return found
        return None

    async def _take(self, data: Any, wanted: int) -> dict[str, Any] | None:
        """The answer `wanted` among the messages of one body or event; requests from the
        server are refused on the way; text that is not JSON is passed over, as on stdio."""
        try:
            message = json.loads(data)
        except ValueError:
            return None
        found = None
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict):
                continue
            if "method" in item and "id" in item:
                with contextlib.suppress(LinkError):
                    await self._post(self.refusal(item), None)
            elif "method" in item:
                self.notice(item)
            elif item.get("id") == wanted and ("result" in item or "error" in item):
                found = item
        return found

    async def end_session(self) -> None:
        if not self.session:
            return
        with contextlib.suppress(Exception):
            await self.http.delete(self.url, headers=self._request_headers())


def _session_id(value: str | None) -> str | None:
    """A session id as the transport allows one (visible ASCII); anything else is not kept."""
    return value if value and len(value) <= 1024 and _visible_ascii(value) else None


def _visible_ascii(text: str) -> bool:
    """What an HTTP header value may carry as it is."""
    return all(0x21 <= ord(ch) <= 0x7E for ch in text)


async def _read_capped(response: Any) -> bytes:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > MAX_MESSAGE_BYTES:
            raise LinkError("the server sent a message over 64 MiB")
    return bytes(data)


async def _http_refusal(response: Any, in_session: bool) -> str:
    """Why a POST was refused: its status, and the start of what the server said. The start
    of what was read is redacted before it is cut, and cut before its white space is
    collapsed, so that a secret it echoes leaves no piece behind, even one that straddles
    the end of what was read (far past the part shown)."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= 65536:
            break
    shown = MESSAGE_CHARS // 2
    text = redact(data.decode("utf-8", "replace"))
    text = " ".join(text[:shown].split()) + ("..." if len(text) > shown else "")
    status = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    if response.status_code == 404 and in_session:
        return f"the server ended fw's session ({status})"
    return f"{status}: {text}" if text else status
