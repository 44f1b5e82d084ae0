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

        verify: Any = tls_context() if scheme == "https" else shared_bare_tls_context()
        client = _async_clients[key] = httpx.AsyncClient(verify=verify, follow_redirects=False, **_async_transport(verify),
                                                         limits=_async_limits())
    return client


def _async_limits() -> Any:
    """No bound on a client's connections (a loop's runs bound themselves); 64 kept alive."""
    import httpx

    return httpx.Limits(max_connections=None, max_keepalive_connections=64)


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
    """A transport whose connections speak asyncio itself (see `AsyncioBackend`); where the
    environment names a proxy, httpx's own, which reads it from there."""
    import httpcore
    import httpx

    if _proxied():
        return {}
    limits = _async_limits()
    transport = httpx.AsyncHTTPTransport(verify=verify, limits=limits)
    if hasattr(transport, "_pool"):  # httpx keeps its pool there; an httpx that does not keeps its own backend
        transport._pool = httpcore.AsyncConnectionPool(ssl_context=verify, max_connections=limits.max_connections,
                                                       max_keepalive_connections=limits.max_keepalive_connections,
                                                       keepalive_expiry=limits.keepalive_expiry, network_backend=AsyncioBackend())
    return {"transport": transport}


_proxies: list[bool] = []


def _proxied() -> bool:
    """Whether the environment names a proxy (read once: it is read from every variable)."""
    if not _proxies:
        import urllib.request

        _proxies.append(any(scheme != "no" for scheme in urllib.request.getproxies()))  # NO_PROXY alone names none
    return _proxies[0]


# -- an asyncio network backend for httpcore ----------------------------------------------------
# httpcore reaches the network through anyio by default: a cancel scope, a task group for each
# connection and a checkpoint for each read and write, about a millisecond of the event loop
# for each request, which hundreds of runs at once pay in turn. These talk to asyncio's own
# transports instead: a read waits on a future, a timeout is a timer. httpcore's interface:
# `AsyncNetworkBackend` and `AsyncNetworkStream` (connect, read, write, start_tls, extra info).
READ_HIGH_WATER = 256 * 1024  # bytes read ahead of the reader before the socket is paused
# httpcore writes a request's head, then its body: kept until it reads (or until this much waits),
# they leave together, one system call (one TLS record, one packet) a request instead of two
WRITE_COALESCE = 64 * 1024


class AsyncioStream:
    """One connection: an asyncio protocol that keeps what arrives until httpcore reads it."""

    def __init__(self) -> None:
        import asyncio

        self._loop = asyncio.get_running_loop()
        self._transport: Any = None
        self._buffer = bytearray()
        self._eof = False
        self._lost: BaseException | None = None
        self._waiter: Any = None  # a read waiting for bytes
        self._drained: Any = None  # a write waiting for the transport to take more
        self._reading_paused = False
        self._unsent = bytearray()  # written, kept until the next read (WRITE_COALESCE)

    # the protocol side (asyncio calls these)
    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) > READ_HIGH_WATER and not self._reading_paused:
            self._reading_paused = True
            self._reading(pause=True)
        self._wake()

    def _reading(self, *, pause: bool) -> None:
        """Pause or resume the socket's reading; a connection lost meanwhile has nothing to
        pause (and Python 3.10's TLS transport then fails on its own lost one)."""
        if self._lost is not None or self._eof:
            return
        try:
            self._transport.pause_reading() if pause else self._transport.resume_reading()
        except (AttributeError, RuntimeError):
            pass

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # close the transport: nothing more is sent on an HTTP connection the server ended

    def connection_lost(self, exc: BaseException | None) -> None:
        self._eof, self._lost = True, exc
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self, future: Any, timeout: float | None) -> None:
        timer = None if timeout is None else self._loop.call_later(timeout, _expire, future)
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()

    # the stream side (httpcore calls these)
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        import httpcore

        if self._unsent:
            try:
                await self._send(timeout)
            except httpcore.WriteError:
                pass  # the server closed early: read what it answered, as httpcore does after a failed write
        if not self._buffer and not self._eof:
            self._waiter = self._loop.create_future()
            try:
                await self._wait(self._waiter, timeout)
            except TimeoutError:
                raise httpcore.ReadTimeout("timed out reading") from None
            finally:
                self._waiter = None
        if self._buffer:
            data = bytes(self._buffer[:max_bytes])
            del self._buffer[:max_bytes]
            if self._reading_paused and len(self._buffer) <= READ_HIGH_WATER // 4:
                self._reading_paused = False
                self._reading(pause=False)
            return data
        if self._lost is not None:
            raise httpcore.ReadError(f"the connection was lost ({type(self._lost).__name__})")
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        import httpcore

        if not buffer:
            return
        if self._lost is not None or self._transport is None or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._unsent += buffer
        if len(self._unsent) >= WRITE_COALESCE:
            await self._send(timeout)

    async def _send(self, timeout: float | None) -> None:
        """Hand what was written to the transport; wait while it holds too much."""
        import httpcore

        data = bytes(self._unsent)
        self._unsent.clear()
        if self._lost is not None or self._transport is None or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(data)
        if self._drained is not None:
            try:
                await self._wait(self._drained, timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout("timed out writing") from None
            if self._lost is not None:
                raise httpcore.WriteError("the connection was lost while writing")

    async def aclose(self) -> None:
        self._unsent.clear()
        if self._transport is not None:
            self._transport.close()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> AsyncioStream:
        import asyncio
        import ssl

        import httpcore

        if self._eof or self._lost is not None or self._transport.is_closing():
            # the server closed it at once: asyncio's handshake would wait for ever on a transport already gone
            self._transport.close()
            raise httpcore.ConnectError("the server closed the connection before the TLS handshake")
        plain = self._transport
        try:
            secured = await asyncio.wait_for(self._loop.start_tls(plain, self, ssl_context, server_hostname=server_hostname), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            plain.close()
            raise httpcore.ConnectTimeout("timed out in the TLS handshake") from None
        except (OSError, ssl.SSLError) as exc:
            plain.close()
            raise httpcore.ConnectError(str(exc)) from None
        if secured is None:  # asyncio gives none when the connection was lost as the handshake ended
            plain.close()
            raise httpcore.ConnectError("the server closed the connection during the TLS handshake")
        self._transport = secured
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle kept-alive connection the server closed, or sent something on
            # what the loop has read, or what waits in the socket (a close the loop has not seen yet)
            return self._eof or bool(self._buffer) or _socket_readable(self._transport)
        names = {"client_addr": "sockname", "server_addr": "peername"}
        return self._transport.get_extra_info(names.get(info, info)) if self._transport is not None else None


def why_not_connected(exc: OSError) -> str:
    """Why a connection could not be made, in words fw may print (the system's, never a request's)."""
    import errno
    import socket

    if isinstance(exc, socket.gaierror):
        return "its host name could not be resolved"
    reasons = {errno.ECONNREFUSED: "the connection was refused (nothing listens there)",
               errno.EHOSTUNREACH: "the host is unreachable", errno.ENETUNREACH: "the network is unreachable",
               errno.ETIMEDOUT: "the connection timed out", errno.ECONNRESET: "the connection was reset"}
    return reasons.get(exc.errno or 0) or (exc.strerror or type(exc).__name__).lower()


def _is_address(host: str) -> bool:
    """Whether `host` is an IPv4 or IPv6 address rather than a name."""
    import socket

    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host.strip("[]"))
        except (OSError, ValueError):
            continue
        return True
    return False


def _socket_readable(transport: Any) -> bool:
    """Whether a transport's socket has something to read now, without waiting (httpcore asks
    before it reuses a kept-alive connection); a socket gone or closed counts as readable."""
    import select

    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def _expire(future: Any) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class AsyncioBackend:
    """httpcore's network backend, on asyncio's transports."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Any = None) -> AsyncioStream:
        import asyncio

        import httpcore

        loop = asyncio.get_running_loop()
        # Happy eyeballs only for a name, which may have several addresses: for an address
        # Python 3.11 still races it alone (a task and a wait each, on the loop, per connection).
        delay = None if _is_address(host) else 0.25
        try:
            _, stream = await asyncio.wait_for(loop.create_connection(AsyncioStream, host, port, happy_eyeballs_delay=delay,
                                                                      local_addr=(local_address, 0) if local_address else None),
                                               timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise httpcore.ConnectTimeout(f"timed out connecting to {host}:{port}") from None
        except OSError as exc:
            raise httpcore.ConnectError(why_not_connected(exc)) from None
        for option in socket_options or ():
            stream.get_extra_info("socket").setsockopt(*option)
        return stream

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> AsyncioStream:
        import asyncio

        import httpcore

        loop = asyncio.get_running_loop()
        try:
            _, stream = await asyncio.wait_for(loop.create_unix_connection(AsyncioStream, path), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise httpcore.ConnectTimeout(f"timed out connecting to {path}") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from None
        return stream

    async def sleep(self, seconds: float) -> None:
        import asyncio

        await asyncio.sleep(seconds)


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
    """What a serving process's first runs would otherwise pay for on its event loop: httpx,
    httpcore and h11 imported, and the asyncio backend of anyio that httpcore's locks load on
    their first use; the TLS context made (called on a worker thread as the engine starts)."""
    import importlib

    import httpcore  # noqa: F401
    import httpx  # noqa: F401

    for name in ("h11", "anyio._backends._asyncio"):
        try:
            importlib.import_module(name)
        except ImportError:  # another anyio, another layout: its first lock imports what it needs
            pass
    tls_context()


_bare_tls: list[Any] = []


def shared_bare_tls_context() -> Any:
    """One bare TLS context for the process's plain-HTTP async clients (making one costs about
    a millisecond, and a loop makes up to SHARDS clients)."""
    if not _bare_tls:
        with _clients_lock:
            if not _bare_tls:
                _bare_tls.append(bare_tls_context())
    return _bare_tls[0]


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

    import httpx

    if _proxied():
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
