"""The process's HTTP clients, one for each scheme, shared by everything fw asks over HTTP
(the model's chat completions, a OneBot implementation's HTTP API), and the reader of
server-sent events (a streamed model answer, an MCP server's answer over streamable HTTP).
A floor of its own at the bottom, beside `errors`: it imports nothing of fw.

A client made for each request would build a TLS context and load the CA bundle every time
(40 to 50 ms), even for plain http://, and would open a new connection too. A shared one keeps
its connections alive between requests; httpx's client is safe to use from many threads.
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Iterator
from typing import Any

_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def http_client(scheme: str) -> Any:
    """The process's HTTP client for `scheme`, made on first use and kept. Plain HTTP gets a
    client with a bare TLS context it never uses, so it skips loading the CA bundle. Each
    request gives its own timeout."""
    with _clients_lock:
        client = _clients.get(scheme)
        if client is None:
            import httpx

            verify: Any = True if scheme == "https" else bare_tls_context()
            client = _clients[scheme] = httpx.Client(verify=verify, follow_redirects=False, **_transport(verify))
        return client


_async_clients: dict[tuple[int, str, int], Any] = {}  # (id of the event loop, scheme, shard) -> its client
# Clients a loop keeps a scheme: httpcore's pool looks over every connection it holds for each
# request, so 500 kept-alive connections over 16 clients cost 4.9 ms of the loop a request, over
# 128 clients 1.2 ms; a client costs about 30 KiB, made on first use.
SHARDS = 128


def async_http_client(scheme: str, shard: int = 0) -> Any:
    """The running event loop's HTTP client for `scheme` (an AsyncClient belongs to the loop it
    was made in), made on first use; `close_async_clients` closes a loop's at its end. Callers
    that are many at once (the runs of an engine) spread over SHARDS clients by `shard`: each
    client's pool then holds a few connections, kept alive, and picks one fast."""
    import asyncio

    key = (id(asyncio.get_running_loop()), scheme, shard % SHARDS)
    client = _async_clients.get(key)
    if client is None:
        import httpx

        verify: Any = tls_context() if scheme == "https" else bare_tls_context()
        client = _async_clients[key] = httpx.AsyncClient(verify=verify, follow_redirects=False, **_async_transport(verify),
                                                         limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
    return client


async def close_async_clients() -> None:
    """Close the running loop's clients (the end of an engine's loop)."""
    import asyncio

    loop = id(asyncio.get_running_loop())
    for key in [k for k in _async_clients if k[0] == loop]:
        client = _async_clients.pop(key)
        try:
            await client.aclose()
        except Exception:  # a loop that ends closes what it can
            pass


def _async_transport(verify: Any) -> dict[str, Any]:
    import socket
    import urllib.request

    import httpx

    if urllib.request.getproxies():
        return {}
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    return {"transport": httpx.AsyncHTTPTransport(verify=verify, socket_options=nodelay,
                                                  limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))}


_tls: list[Any] = []  # the process's one TLS context that verifies servers: loading the CA bundle costs about 50 ms


def tls_context() -> Any:
    """The TLS context the async clients share (a context serves any number of connections):
    made once, not once for each of an engine's SHARDS clients, each of which held the event
    loop for the time it takes to load the CA bundle."""
    if not _tls:
        import httpx

        with _clients_lock:
            if not _tls:
                _tls.append(httpx.create_ssl_context())
    return _tls[0]


def warm() -> None:
    """What a serving process's first runs would otherwise pay for on its event loop: httpx
    imported and the TLS context made (called on a worker thread before the first run)."""
    import httpx  # noqa: F401

    tls_context()


def bare_tls_context() -> Any:
    """A TLS context that loads no CA bundle (40 ms), for a client that speaks plain http://."""
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _transport(verify: Any) -> dict[str, Any]:
    """A transport that sends a request's headers and body without waiting: httpx writes them
    apart, and on a kept-alive connection Nagle's algorithm would hold the body until the
    server's delayed ACK, some 40 ms a request. Where the environment names a proxy, httpx's
    own transport is kept, since it reads the proxy from there."""
    import socket
    import urllib.request

    import httpx

    if urllib.request.getproxies():
        return {}
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    return {"transport": httpx.HTTPTransport(verify=verify, socket_options=nodelay)}


# -- server-sent events ------------------------------------------------------------------------
class UnreadableStream(ValueError):
    """An event stream that is not UTF-8 text."""


class SseReader:
    """Server-sent events as their bytes arrive: `feed` gives the data of each event completed
    (data lines joined by newlines, as the spec says); lines end with CRLF, LF or CR. A line
    that comes in many pieces (one event of a large MCP answer) is kept as its pieces and
    joined once it ends, so reading it takes time in proportion to its length."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._pieces: list[str] = []  # the line not ended yet
        self._data: list[str] = []

    def feed(self, data: bytes | str) -> list[str]:
        try:
            text = data if isinstance(data, str) else self._decoder.decode(data)
        except UnicodeDecodeError:
            raise UnreadableStream("the stream is not UTF-8 text") from None
        if "\n" not in text and "\r" not in text:
            if text:
                self._pieces.append(text)  # still inside one line
            return []
        text = "".join(self._pieces) + text
        hold = text.endswith("\r")  # perhaps the first half of a CRLF
        if hold:
            text = text[:-1]
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        partial = lines.pop() + ("\r" if hold else "")
        self._pieces = [partial] if partial else []
        return [event for line in lines if (event := self._line(line)) is not None]

    def finish(self) -> list[str]:
        rest = self.feed("\n") if self._pieces else []
        if self._data:
            rest.append("\n".join(self._data))
            self._data = []
        return rest

    def _line(self, line: str) -> str | None:
        if not line:
            if self._data:
                event, self._data = "\n".join(self._data), []
                return event
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None


def sse_data(text: str) -> Iterator[str]:
    """The data of each server-sent event of a whole text."""
    reader = SseReader()
    yield from reader.feed(text)
    yield from reader.finish()
