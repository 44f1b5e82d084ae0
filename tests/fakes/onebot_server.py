"""A fake OneBot v11 implementation, for tests: its HTTP API on 127.0.0.1, and a reverse
WebSocket client that connects to `fw bot serve` as NapCat does.

    with OneBotServer(token="t0k3n") as ob:
        ob.url          # http://127.0.0.1:PORT, the bot's --url
        ob.actions      # [{"action", "params", "authorization"}], in order
        ob.online = False                       # get_status says so
        ob.answers["send_group_msg"] = {...}    # this answer instead of the usual one

Every action is answered as a real implementation answers: `{"status": "ok", "retcode": 0,
"data": ..., "message": "", "wording": "", "echo": ...}`; a wrong Bearer token gets HTTP 403
with `status: failed`, as NapCat does.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SELF_ID = 10001


def ok(data: Any = None, echo: Any = None) -> dict[str, Any]:
    return {"status": "ok", "retcode": 0, "data": data, "message": "", "wording": "", "echo": echo}


def failed(retcode: int, message: str, echo: Any = None) -> dict[str, Any]:
    return {"status": "failed", "retcode": retcode, "data": None, "message": message, "wording": message, "echo": echo}


class Platform:
    """What the implementation answers, shared by its HTTP API and its socket client."""

    def __init__(self) -> None:
        self.actions: list[dict[str, Any]] = []
        self.online = True
        self.answers: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(5001)
        self._lock = threading.Lock()

    def act(self, action: str, params: Any, authorization: str | None = None, echo: Any = None,
            connection: Any = None) -> dict[str, Any]:
        with self._lock:
            self.actions.append({"action": action, "params": params, "authorization": authorization, "connection": connection})
            if action in self.answers:
                return {**self.answers[action], "echo": echo}
            if action == "get_status":
                return ok({"online": self.online, "good": self.online}, echo)
            if action in ("send_group_msg", "send_private_msg"):
                return ok({"message_id": next(self._ids)}, echo)
            return ok(None, echo)

    def sent(self, action: str) -> list[dict[str, Any]]:
        with self._lock:
            return [a for a in self.actions if a["action"] == action]


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class OneBotServer(Platform):
    def __init__(self, token: str | None = None) -> None:
        super().__init__()
        self.token = token
        self._server = _Quiet(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> OneBotServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _handler(platform: OneBotServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as real servers answer: headers and body without waiting for an ACK

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            authorization = self.headers.get("Authorization")
            if platform.token and authorization != f"Bearer {platform.token}":
                self._send(403, failed(1403, "token verify failed"))
                return
            try:
                params = json.loads(raw or b"{}")
            except ValueError:
                params = None
            self._send(200, platform.act(self.path.strip("/"), params, authorization, connection=self.client_address))

        def _send(self, status: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


# -- reports, as an implementation posts them -------------------------------------------------------
def group_message(text: str, *, user: int = 20002, group: int = 30003, message_id: int = 777, as_segments: bool = True,
                  at_bot: bool = True) -> dict[str, Any]:
    """A group message as NapCat posts it: segments (an `at` of the bot, then the text) or a
    CQ-code string (`[CQ:at,qq=SELF_ID] text`)."""
    if as_segments:
        message: Any = ([{"type": "at", "data": {"qq": str(SELF_ID)}}] if at_bot else []) + [{"type": "text", "data": {"text": f" {text}"}}]
    else:
        message = f"[CQ:at,qq={SELF_ID}] {text}" if at_bot else text
    return {"time": 1700000000, "self_id": SELF_ID, "post_type": "message", "message_type": "group", "sub_type": "normal",
            "message_id": message_id, "group_id": group, "user_id": user, "message": message, "raw_message": text, "font": 0,
            "sender": {"user_id": user, "nickname": "Alice", "card": ""}}


def lifecycle(sub_type: str = "connect") -> dict[str, Any]:
    return {"time": 1700000000, "self_id": SELF_ID, "post_type": "meta_event", "meta_event_type": "lifecycle", "sub_type": sub_type}


def heartbeat(online: bool = True) -> dict[str, Any]:
    return {"time": 1700000000, "self_id": SELF_ID, "post_type": "meta_event", "meta_event_type": "heartbeat",
            "status": {"online": online, "good": online}, "interval": 30000}


def signed(secret: str, body: bytes) -> str:
    return "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
