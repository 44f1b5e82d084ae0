"""Serving the page: bind the socket first (so the printed URL names the real port, also
for port 0), print the sign-in URL, then serve until Ctrl-C, under the doors' common rules
(`serve/http.py`: body limit, head timeout, connection cap, no tracebacks)."""

from __future__ import annotations

from collections.abc import Callable

from ...home.store import Home
from ..http import DoorLimits, bind, parse_listen, url_host
from ..http import serve as serve_door
from .app import LOOPBACK_HOSTS, create_app
from .signin import SignIn

DEFAULT_LISTEN = "127.0.0.1:8765"
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def allowed_hosts(host: str) -> list[str]:
    """The Host headers the page answers: loopback names and the host it listens on. Bound
    to every address, it answers any name (the sign-in cookie still guards every page)."""
    if host in WILDCARD_HOSTS:
        return ["*"]
    return list(dict.fromkeys([*LOOPBACK_HOSTS, host]))


def serve(home: Home, listen: str, say: Callable[[str], None], limits: DoorLimits | None = None) -> None:
    """Serve the page for `home` until interrupted; `say` prints the sign-in URL first.
    Stopped by Ctrl-C or SIGTERM, it returns (no run is ever in flight here)."""
    host, port = parse_listen(listen)
    sock = bind(host, port)
    signin = SignIn()
    app = create_app(home, signin=signin, allowed_hosts=allowed_hosts(host))
    try:  # a signal the moment the address is printed stops it cleanly too
        say(f"fw web: http://{url_host(host)}:{sock.getsockname()[1]}/?token={signin.token}")
        serve_door(app, sock, limits=limits)
    except KeyboardInterrupt:
        sock.close()
        return
