"""Serving the page: bind the socket first (so the printed URL names the real port, also
for port 0), print the sign-in URL, then let uvicorn serve until Ctrl-C."""

from __future__ import annotations

import socket
from collections.abc import Callable

from ...errors import FwError
from ...home.store import Home
from .app import LOOPBACK_HOSTS, create_app
from .signin import SignIn

DEFAULT_LISTEN = "127.0.0.1:8765"
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (an IPv6 host in brackets) as (host, port)."""
    host, sep, port = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not port.isdigit() or int(port) > 65535 or (not host and host not in WILDCARD_HOSTS):
        raise FwError("invalid", f"--listen {listen!r} is not HOST:PORT", f"e.g. --listen {DEFAULT_LISTEN} (port 0 picks a free one)")
    return host, int(port)


def allowed_hosts(host: str) -> list[str]:
    """The Host headers the page answers: loopback names and the host it listens on. Bound
    to every address, it answers any name (the sign-in cookie still guards every page)."""
    if host in WILDCARD_HOSTS:
        return ["*"]
    return list(dict.fromkeys([*LOOPBACK_HOSTS, host]))


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise FwError("unavailable", f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                      "pick another address or port with --listen HOST:PORT", reason="listen") from None
    return sock


def serve(home: Home, listen: str, say: Callable[[str], None]) -> None:
    """Serve the page for `home` until interrupted; `say` prints the sign-in URL first."""
    import uvicorn

    host, port = parse_listen(listen)
    sock = bind(host, port)
    signin = SignIn()
    app = create_app(home, signin=signin, allowed_hosts=allowed_hosts(host))
    shown_host = f"[{host}]" if ":" in host else (host or "0.0.0.0")
    say(f"fw web: http://{shown_host}:{sock.getsockname()[1]}/?token={signin.token}")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", server_header=False)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
