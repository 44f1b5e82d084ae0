"""Signing in to the page: a one-time token in the printed URL becomes a cookie, and every
other request without that cookie is refused before it reaches a page.

The sessions and their CSRF tokens live in this process only: stopping `fw web` signs
every browser out, and the next start prints a new URL.
"""

from __future__ import annotations

import hmac
import secrets as pysecrets
import threading
from typing import Any
from urllib.parse import parse_qs

COOKIE = "fw_web_session"
SIGN_IN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in to fw web</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; line-height: 1.5">
<main>
<h1>Sign in to fw web</h1>
<p role="alert">{why}</p>
<p>Open the address that <code>fw web</code> printed as its first line
(<code>fw web: http://HOST:PORT/?token=TOKEN</code>). Each address signs in one browser, once;
to sign in another browser, or after <code>fw web</code> restarted, start <code>fw web</code>
again and open the address it prints.</p>
</main></body></html>
"""


class SignIn:
    """The one-time token and the sessions it opened."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token or pysecrets.token_urlsafe(24)
        self._used = False
        self._sessions: dict[str, str] = {}  # session id -> its CSRF token
        self._lock = threading.Lock()

    def redeem(self, token: str) -> str | None:
        """A new session id for the right token, the first time only."""
        with self._lock:
            if self._used or not hmac.compare_digest(token.encode(), self.token.encode()):
                return None
            self._used = True
            session = pysecrets.token_urlsafe(32)
            self._sessions[session] = pysecrets.token_urlsafe(32)
            return session

    def csrf_of(self, session: str | None) -> str | None:
        """The CSRF token of a signed-in session, or None."""
        if not session:
            return None
        with self._lock:
            for known, csrf in self._sessions.items():
                if hmac.compare_digest(known.encode(), session.encode()):
                    return csrf
        return None


def cookie_of(scope: dict[str, Any]) -> str | None:
    for key, value in scope.get("headers", []):
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                name, _, content = part.strip().partition("=")
                if name == COOKIE:
                    return content
    return None


class SignInMiddleware:
    """`GET /?token=T` signs a browser in (a cookie, then a redirect to the same page without
    the token); any other request without the cookie gets 401 and changes nothing. A signed-in
    request carries its session's CSRF token in `scope["state"]["csrf"]`."""

    def __init__(self, app: Any, signin: SignIn) -> None:
        self.app = app
        self.signin = signin

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csrf = self.signin.csrf_of(cookie_of(scope))
        token = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
        if token and scope["path"] == "/" and scope["method"] == "GET":
            session = self.signin.redeem(token[0])
            if session is not None:
                await _respond(send, 303, b"", [(b"location", b"/"), (b"set-cookie", _cookie(session))])
                return
        if csrf is None:
            why = "That sign-in address was already used, or is not the one fw web printed." if token else "You are not signed in."
            await _respond(send, 401, SIGN_IN_PAGE.format(why=why).encode(), [(b"content-type", b"text/html; charset=utf-8")])
            return
        scope.setdefault("state", {})["csrf"] = csrf
        await self.app(scope, receive, send)


def _cookie(session: str) -> bytes:
    return f"{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/".encode()


async def _respond(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store"),
               (b"referrer-policy", b"no-referrer")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
