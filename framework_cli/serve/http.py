"""Serving a Starlette app with uvicorn on HOST:PORT, for every network door of fw, and the
rules every door keeps against a hostile client (CONTRACT section 11).

- `parse_listen` reads `--listen HOST:PORT` (`[::1]:PORT` for IPv6; port 0 picks a free one).
- `bind` opens the socket first, so a port in use is a clear error before anything starts,
  and the real port is known before the first line is printed.
- `serve` wraps the app in a Host-header check when it listens on loopback (a web page
  elsewhere cannot reach it through a DNS name that points at 127.0.0.1: 400 for a request,
  403 for a WebSocket handshake), runs it until
  Ctrl-C or SIGTERM, and then lets the exception through (`interrupted`, exit 130) after
  the app's own shutdown has run.
- `DoorLimits` are the rules: a body over `max_body` is 413 before it is read (a WebSocket
  message over it closes the socket); a client that sends no whole request head within
  `head_seconds` is dropped, and so is one whose body is not whole within `body_seconds` of its
  head (a body trickled a byte at a time cannot hold a connection); past `max_connections` open at once a new connection is closed
  as soon as it is accepted; a client's misbehaviour is noted in one line, at most once a
  second (`RefusalLog`), never with a traceback.
- `parse_json` reads JSON no deeper than 64 levels (`JSON_DEPTH`).

uvicorn and Starlette are imported only here, on the paths that serve.
"""

from __future__ import annotations

import ipaddress
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import FwError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
MAX_BODY = 1024 * 1024  # bytes of a request body, by default
MAX_CONNECTIONS = 512  # connections open at once, by default
HEAD_SECONDS = 10.0  # for a client to send a whole request head
BODY_SECONDS = 30.0  # for a client to send a whole request body, once its head is in
JSON_DEPTH = 64  # how deeply a JSON document may nest
Say = Callable[[str, str], None]  # (what was refused: "client", "report", ..., why)


class RefusalLog:
    """Notes refused clients in one line each, at most once a second: a flood of bad clients
    prints one line a second (with how many were left unsaid), not one line each."""

    def __init__(self, say: Say | None = None, every: float = 1.0) -> None:
        self._say = say or _stderr_line
        self._every = every
        self._last = 0.0
        self._unsaid = 0
        self._lock = threading.Lock()

    def __call__(self, why: str, what: str = "client") -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last < self._every:
                self._unsaid += 1
                return
            unsaid, self._unsaid, self._last = self._unsaid, 0, now
        more = f" (and {unsaid} more refused since the last line)" if unsaid else ""
        try:
            self._say(what, f"{why}{more}")
        except Exception:  # a closed terminal must not take the door down
            pass


def _stderr_line(what: str, why: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} refused a {what}: {why}", file=sys.stderr, flush=True)


@dataclass
class DoorLimits:
    """What one door accepts (CONTRACT section 11); `refused` notes each refusal."""

    max_body: int = MAX_BODY
    max_connections: int = MAX_CONNECTIONS
    head_seconds: float = HEAD_SECONDS
    body_seconds: float = BODY_SECONDS
    refused: RefusalLog = field(default_factory=RefusalLog)


def check_limits(max_body: int | None, max_connections: int | None) -> tuple[int, int]:
    """`--max-body` and `--max-connections` as given, or their defaults; `invalid` when not
    whole numbers in range."""
    body = MAX_BODY if max_body is None else max_body
    connections = MAX_CONNECTIONS if max_connections is None else max_connections
    if isinstance(body, bool) or not isinstance(body, int) or not 1024 <= body <= 1024 ** 3:
        raise FwError("invalid", "--max-body is a number of bytes from 1024 to 1073741824", f"e.g. --max-body {MAX_BODY}",
                      field="max_body")
    if isinstance(connections, bool) or not isinstance(connections, int) or not 1 <= connections <= 100_000:
        raise FwError("invalid", "--max-connections is a whole number from 1 to 100000", f"e.g. --max-connections {MAX_CONNECTIONS}",
                      field="max_connections")
    return body, connections


def parse_json(raw: bytes | str, depth: int = JSON_DEPTH) -> Any:
    """A JSON document, at most `depth` levels deep; ValueError for text that is not JSON or
    nests deeper (a document thousands of levels deep is refused, not a crash)."""
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise ValueError(f"nested deeper than {depth} levels") from None
    if _deeper_than(doc, depth):
        raise ValueError(f"nested deeper than {depth} levels")
    return doc


def _deeper_than(doc: Any, depth: int) -> bool:
    todo = [(doc, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if level > depth:
            return True
        todo.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return False


def parse_listen(listen: str, option: str = "--listen") -> tuple[str, int]:
    """`HOST:PORT` (or `[IPv6]:PORT`) as (host, port); `invalid` otherwise."""
    hint = f"give {option} HOST:PORT, e.g. {option} 127.0.0.1:8080"
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise FwError("invalid", f"{option} {listen!r} is not HOST:PORT", hint, field="listen")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c.isspace() for c in host) or "[" in host or "]" in host:
        raise FwError("invalid", f"{option} {listen!r} names no host", hint, field="listen")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; `in_use` or `invalid` when it cannot be had. Made
    with its protocol named (IPPROTO_TCP), which asyncio needs to see to send each answer at
    once (TCP_NODELAY) on the connections it accepts: without it, every request after the
    first on a kept-alive connection waited about 40 ms for its answer (Nagle's rule meeting
    the client's delayed ACK)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPV6_V6ONLY"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((host, port))
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
    except PermissionError:
        raise FwError("denied", f"listening on {host}:{port} is not permitted", "use a port above 1023") from None
    except OSError as exc:
        if exc.errno in (98, 48):  # EADDRINUSE on Linux, macOS
            raise FwError("in_use", f"{host}:{port} is already in use", "stop what listens there, or pick another port with --listen") from None
        raise FwError("invalid", f"cannot listen on {host}:{port}: {exc.strerror}", "give --listen a local address, e.g. 127.0.0.1:8080",
                      field="listen") from None
    sock.setblocking(False)
    return sock


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def serve(app: Any, sock: socket.socket, *, on_started: Callable[[], None] | None = None, limits: DoorLimits | None = None,
          before_shutdown: Callable[[], Awaitable[None]] | None = None) -> None:
    """Run `app` on the bound socket, under `limits`, until Ctrl-C or SIGTERM; then
    `before_shutdown` is awaited while the connections are still open (a bot server ends its
    runs in flight there, so that none of them goes on against a connection being closed),
    the connections are closed, the app's lifespan shutdown runs, and KeyboardInterrupt is
    raised here."""
    import uvicorn

    limits = limits or DoorLimits()
    if is_loopback(sock.getsockname()[0]):
        app = LoopbackHostOnly(app)
    app = BodyLimit(app, limits)
    _quiet_loop_errors(limits.refused)
    _more_open_files(limits.max_connections)
    config = uvicorn.Config(app, log_config=None, log_level="critical", access_log=False, lifespan="on",
                            ws="websockets-sansio", timeout_graceful_shutdown=5, server_header=False,
                            http=guarded_protocol(limits), ws_max_size=limits.max_body)
    server = uvicorn.Server(config)
    if on_started is not None:
        started = server.startup

        async def startup(sockets: Any = None) -> None:
            await started(sockets=sockets)
            if not server.should_exit:
                on_started()

        server.startup = startup  # type: ignore[method-assign]
    if before_shutdown is not None:
        stopping = server.shutdown

        async def shutdown(sockets: Any = None) -> None:
            await before_shutdown()
            await stopping(sockets=sockets)

        server.shutdown = shutdown  # type: ignore[method-assign]
    # uvicorn re-raises the signal that stopped it once it has shut down: SIGTERM then comes
    # back as KeyboardInterrupt too, so every way of stopping ends as `interrupted`. The
    # command line's own handler (which also notes the interruption) is kept where it is set.
    previous = signal.getsignal(signal.SIGTERM)
    ours = not callable(previous)
    if ours:
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.run(sockets=[sock])
    finally:
        if ours:  # the command line's handler, kept, may have set SIGTERM aside for the unwinding
            signal.signal(signal.SIGTERM, previous)
        sock.close()


def guarded_protocol(limits: DoorLimits) -> type:
    """uvicorn's HTTP protocol, keeping `limits` on each connection: at `max_connections` open
    at once, the connection idle longest (no request head yet) is closed to make room, and when
    none is idle the new one is closed as soon as it is accepted; one that sends no whole
    request head within `head_seconds` of connecting (or of starting its next request) is
    dropped, and so is one whose request body is not whole within `body_seconds` of its head.
    Upgraded to a WebSocket, a connection is the WebSocket protocol's, which pings it."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedProtocol(H11Protocol):
        _head_timer: Any = None
        _body_timer: Any = None
        _waiting_since = 0.0

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            if len(self.connections) >= limits.max_connections and not self._evict_idle():
                self.transport, self.flow = transport, None
                limits.refused(f"more than {limits.max_connections} connections are open (--max-connections)")
                transport.abort()
                return
            super().connection_made(transport)
            self._arm_head_timer()

        def _evict_idle(self) -> bool:
            """At the cap, the connection that has waited longest without sending its request
            head makes room (idle sockets cannot keep a real client out); none such: False."""
            waiting = [c for c in self.connections if isinstance(c, GuardedProtocol) and c._head_timer is not None]
            if not waiting:
                return False
            oldest = min(waiting, key=lambda c: c._waiting_since)
            limits.refused(f"more than {limits.max_connections} connections are open (--max-connections): "
                           "the one idle longest was closed")
            oldest._disarm_head_timer()
            oldest.connections.discard(oldest)
            oldest.transport.abort()
            return True

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_timer()
            self._disarm_body_timer()
            if self.flow is None:  # closed at once when it came: it was never counted
                return
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            waiting_for_head = self.cycle is None or self.cycle.response_complete
            if waiting_for_head and self._head_timer is None and not self.transport.is_closing():
                self._arm_head_timer()  # the start of a next request on a kept-alive connection
            super().data_received(data)
            if (self.cycle is not None and not self.cycle.response_complete) or self.transport.is_closing():
                self._disarm_head_timer()  # its head is whole (or it is gone)
            body_coming = (self.cycle is not None and self.cycle.more_body and not self.cycle.response_complete
                           and not self.transport.is_closing())  # answered early (a 413): no body is waited for
            if body_coming and self._body_timer is None:
                self._body_timer = self.loop.call_later(limits.body_seconds, self._body_too_slow)
            elif not body_coming:
                self._disarm_body_timer()

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._disarm_head_timer()
            super().handle_websocket_upgrade(event)

        def _arm_head_timer(self) -> None:
            self._disarm_head_timer()
            self._waiting_since = self.loop.time()
            self._head_timer = self.loop.call_later(limits.head_seconds, self._head_too_slow)

        def _disarm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _disarm_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _body_too_slow(self) -> None:
            self._body_timer = None
            if not self.transport.is_closing() and self.cycle is not None and self.cycle.more_body:
                limits.refused(f"no whole request body within {limits.body_seconds:g} s of its head")
                self.transport.abort()

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                limits.refused(f"no whole request head within {limits.head_seconds:g} s")
                self.transport.abort()

    return GuardedProtocol


class BodyLimit:
    """413 for a request whose body is longer than `max_body`: at once, unread, when its
    Content-Length says so; a body of unknown length is read up to the limit first and
    handed on whole only when it fits."""

    def __init__(self, app: Any, limits: DoorLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            if not length.strip().isdigit():
                await self._refuse(scope, receive, send, 400, "a Content-Length that is not a number")
            elif int(length) > self.limits.max_body:
                await self._refuse(scope, receive, send, 413, f"a body of {int(length)} bytes, over --max-body {self.limits.max_body}")
            else:
                await self.app(scope, receive, send)
            return
        if b"chunked" not in headers.get(b"transfer-encoding", b"").lower():
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            body += message.get("body", b"")
            if len(body) > self.limits.max_body:
                await self._refuse(scope, receive, send, 413, f"a body over --max-body {self.limits.max_body}")
                return
            if not message.get("more_body"):
                break
        await self.app(scope, _replay(bytes(body), receive), send)

    async def _refuse(self, scope: Any, receive: Any, send: Any, status: int, why: str) -> None:
        from starlette.responses import PlainTextResponse

        self.limits.refused(why)
        text = "Request body too large" if status == 413 else "Bad request"
        await PlainTextResponse(text, status_code=status, headers={"connection": "close"})(scope, receive, send)


class JsonDepthLimit:
    """400 for a JSON request body nested deeper than JSON_DEPTH, before the app parses it
    (a parser that recurses would fail on it with an error of its own)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
        if scope["type"] != "http" or b"json" not in headers.get(b"content-type", b"").lower():
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:  # bounded: BodyLimit stands before every door
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            parse_json(bytes(body))
        except ValueError as exc:
            if "deeper" in str(exc):
                from starlette.responses import PlainTextResponse

                await PlainTextResponse(f"Bad request: JSON {exc}", status_code=400)(scope, receive, send)
                return
        await self.app(scope, _replay(bytes(body), receive), send)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _quiet_loop_errors(refused: RefusalLog) -> None:
    """asyncio logs what goes wrong under a door (an accept that fails for lack of file
    descriptors, a connection reset) with a traceback each; a flood of bad clients must not
    flood the terminal: each becomes one rate-limited line."""
    import logging

    class OneLine(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines = record.getMessage().splitlines() or ["an error under the door"]
            refused(lines[0][:200])

    logger = logging.getLogger("asyncio")
    logger.handlers[:] = [OneLine(logging.WARNING)]  # this door's: one door serves in a process at a time
    logger.propagate = False


def _more_open_files(connections: int) -> None:
    """Room for the connections a door keeps, and some: the soft limit of open files raised
    towards the hard one (a door that runs out of descriptors cannot even refuse)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = connections * 2 + 256
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
    except (ImportError, ValueError, OSError):
        pass


def host_name(header: str) -> str:
    """The host of a Host header, without its port (`[::1]:8080` -> `::1`)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class LoopbackHostOnly:
    """Refuses (400) an HTTP request or WebSocket handshake whose Host header is not a
    loopback name: a page on some other site cannot reach a loopback server through a DNS
    name that it points at 127.0.0.1."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers") or [])
            if host_name(headers.get(b"host", b"").decode("latin-1")) not in LOOPBACK_NAMES:
                if scope["type"] == "websocket":  # closed before it is accepted: the handshake gets 403
                    await send({"type": "websocket.close", "code": 1008})
                    return
                from starlette.responses import PlainTextResponse

                await PlainTextResponse("Invalid host header", status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
