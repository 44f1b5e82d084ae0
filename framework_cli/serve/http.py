"""Serving a Starlette app with uvicorn on HOST:PORT, for every network door of fw.

- `parse_listen` reads `--listen HOST:PORT` (`[::1]:PORT` for IPv6; port 0 picks a free one).
- `bind` opens the socket first, so a port in use is a clear error before anything starts,
  and the real port is known before the first line is printed.
- `serve` wraps the app in a Host-header check when it listens on loopback (a web page
  elsewhere cannot reach it through a DNS name that points at 127.0.0.1: 400 for a request,
  403 for a WebSocket handshake), runs it until
  Ctrl-C or SIGTERM, and then lets the exception through (`interrupted`, exit 130) after
  the app's own shutdown has run.

uvicorn and Starlette are imported only here, on the paths that serve.
"""

from __future__ import annotations

import ipaddress
import signal
import socket
from collections.abc import Callable
from typing import Any

from ..errors import FwError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


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


def serve(app: Any, sock: socket.socket, *, on_started: Callable[[], None] | None = None) -> None:
    """Run `app` on the bound socket until Ctrl-C or SIGTERM; then the app's lifespan
    shutdown runs and KeyboardInterrupt is raised here."""
    import uvicorn

    if is_loopback(sock.getsockname()[0]):
        app = LoopbackHostOnly(app)
    config = uvicorn.Config(app, log_config=None, log_level="critical", access_log=False, lifespan="on",
                            ws="websockets-sansio", timeout_graceful_shutdown=5, server_header=False)
    server = uvicorn.Server(config)
    if on_started is not None:
        started = server.startup

        async def startup(sockets: Any = None) -> None:
            await started(sockets=sockets)
            if not server.should_exit:
                on_started()

        server.startup = startup  # type: ignore[method-assign]
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
