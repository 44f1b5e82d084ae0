"""The process's HTTP clients, one for each scheme, shared by everything fw asks over HTTP
(the model's chat completions, a OneBot implementation's HTTP API). A floor of its own at
the bottom, beside `errors`: it imports nothing of fw.

A client made for each request would build a TLS context and load the CA bundle every time
(40 to 50 ms), even for plain http://, and would open a new connection too. A shared one keeps
its connections alive between requests; httpx's client is safe to use from many threads.
"""

from __future__ import annotations

import threading
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
            import ssl

            import httpx

            verify: Any = True if scheme == "https" else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            client = _clients[scheme] = httpx.Client(verify=verify, follow_redirects=False, **_transport(verify))
        return client


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
