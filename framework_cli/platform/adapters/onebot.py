"""The `onebot` adapter: OneBot v11, the protocol of NapCat, Lagrange.OneBot, LLOneBot and
go-cqhttp, reached either way it is usually deployed.

- HTTP: a bot with a `url` sends each action as `POST {url}/{action}` with its access token
  as a Bearer token; `get_status` is the online check.
- Reverse WebSocket: the implementation connects to `fw bot serve` (`/onebot/v11/ws`). A bot
  without a `url` sends its actions on that socket as `{"action", "params", "echo"}` and reads
  the frame with the same `echo`. Only the process that holds the socket can send on it; the
  others see whether it is connected through `state.db` (`onebot_links`).

Like every adapter it only translates: a semantic API call into a OneBot action and its answer
back, and a OneBot report into the contract's event (`read_report`). A failed action (an HTTP
error, `retcode` other than 0, `status: failed`, a socket that drops) is `unavailable` with
the action and the platform's own message, the token scrubbed from it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import socket as socket_module
import threading
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from ...domain.bots import BOT_SECRETS
from ...domain.catalogue import APIS
from ...errors import FwError
from ...home import secrets
from ...home.store import Home
from ...http_client import http_client
from ...state.store import StateStore, now_iso
from .local import DEFAULT_MUTE_SECONDS

ACTION_TIMEOUT = 30.0  # seconds an action waits for its answer, over HTTP or on the socket
STATUS_TIMEOUT = 5.0  # the online check over HTTP
LINK_STALE_SECONDS = 60  # a socket row not refreshed for this long was left by a process that died
SNIPPET_CHARS = 200
WEBSOCKET_PATH = "/onebot/v11/ws"


def make(home: Home, bot_name: str, bot: dict[str, Any]) -> OneBotAdapter:
    return OneBotAdapter(home, bot_name, bot)


def bot_secrets(home: Home, bot_name: str) -> dict[str, Any]:
    """The bot's stored access token and signature secret (either may be missing)."""
    return secrets.load(home, BOT_SECRETS, bot_name)


class OneBotAdapter:
    name = "onebot"
    declared_apis = APIS  # PLATFORM.md maps every API of the catalogue to a OneBot action

    def __init__(self, home: Home, bot_name: str, bot: dict[str, Any]) -> None:
        self.home = home
        self.bot = bot_name
        self.url: str | None = bot.get("url")
        self._token: str | None = bot_secrets(home, bot_name).get("access_token")

    # -- the connection ---------------------------------------------------------------------
    @property
    def connection(self) -> str:
        """`http`, `socket` (some process holds a live socket for it), or `not connected`."""
        if self.url:
            return "http"
        return "socket" if LINKS.current(self.bot) or link_state(self.home, self.bot) else "not connected"

    @property
    def offline_hint(self) -> str:
        if self.url:
            return f"check that the OneBot implementation at {self.url} is running and logged in (`fw bot show {self.bot}`)"
        return f"connect the implementation's reverse WebSocket to `fw bot serve {self.bot}` ({WEBSOCKET_PATH})"

    def online(self) -> bool:
        if self.url:
            try:
                status = self._http("get_status", {}, STATUS_TIMEOUT)
            except FwError:
                return False
            return _status_online(status)
        link = LINKS.current(self.bot)
        if link is not None:
            return link.online
        row = link_state(self.home, self.bot)
        return bool(row and row["online"])

    # -- API calls ----------------------------------------------------------------------------
    def call(self, api: str, params: dict[str, Any]) -> dict[str, Any]:
        if api not in ACTIONS:
            raise FwError("unavailable", f"the onebot adapter has no API {api!r}", "", reason="adapter_api_unsupported")
        action, payload = ACTIONS[api](params)
        data = self._send(action, payload)
        return RESULTS.get(api, _plain_result)(params, data)

    def _send(self, action: str, payload: dict[str, Any]) -> Any:
        if self.url:
            return self._http(action, payload, ACTION_TIMEOUT)
        link = LINKS.current(self.bot)
        if link is None:
            held = link_state(self.home, self.bot)
            why = (f"its socket is held by another fw process ({held['owner']}); only the runs of that `fw bot serve` can act on it"
                   if held else "no OneBot implementation is connected to its reverse WebSocket")
            raise FwError("unavailable", f"bot {self.bot!r} cannot send {action}: {why}", self.offline_hint,
                          reason="adapter_offline", action=action)
        return self._answer_data(action, link.request(action, payload, ACTION_TIMEOUT, self._failure))

    def _http(self, action: str, payload: dict[str, Any], timeout: float) -> Any:
        import httpx  # lazy: start-up speed

        assert self.url is not None
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        http = http_client("https" if self.url.startswith("https:") else "http")  # kept-alive, one TLS context
        try:
            response = http.post(f"{self.url.rstrip('/')}/{action}", json=payload, headers=headers, timeout=timeout)
        except httpx.TimeoutException:
            raise self._failure(action, f"no answer within {timeout:g} s") from None
        except httpx.HTTPError as exc:  # the class name only: an exception's text may quote a header
            raise self._failure(action, f"{self.url} could not be reached ({type(exc).__name__})") from None
        except UnicodeError:
            raise self._failure(action, "the access token holds characters an HTTP header cannot carry") from None
        if not 200 <= response.status_code < 300:
            raise self._failure(action, f"HTTP {response.status_code}: {self._snippet(response.text)}")
        try:
            answer = response.json()
        except ValueError:
            raise self._failure(action, "the answer is not JSON") from None
        return self._answer_data(action, answer)

    def _answer_data(self, action: str, answer: Any) -> Any:
        """The `data` of a OneBot answer, or `unavailable` with the platform's own message."""
        if not isinstance(answer, dict):
            raise self._failure(action, "the answer is not a JSON object")
        retcode = answer.get("retcode", 0)
        if retcode != 0 or answer.get("status") == "failed":
            said = answer.get("wording") or answer.get("message") or answer.get("msg") or "no message"
            raise self._failure(action, f"retcode {retcode}: {self._snippet(str(said))}")
        return answer.get("data")

    def _failure(self, action: str, detail: str) -> FwError:
        text = self._scrub(f"OneBot action {action} of bot {self.bot!r} failed: {detail}")
        return FwError("unavailable", text, "check the OneBot implementation (is it running and logged in? is the access token right?)",
                       reason="bot", action=action)

    def _snippet(self, text: str) -> str:
        """The start of what the platform said: scrubbed whole first, then cut, so that a
        token that straddles the cut leaves no piece behind."""
        text = " ".join(self._scrub(text).split())
        return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS] + "..."

    def _scrub(self, text: str) -> str:
        """The token out of anything the platform said, even one too short for `redact`."""
        return secrets.redact_with(text, self._token)

    def ingest(self, event: dict[str, Any]) -> None:
        """The platform itself keeps its users, groups and messages: nothing to record."""


def _status_online(status: Any) -> bool:
    if not isinstance(status, dict):
        return status is None  # an implementation that answers ok with no data is up
    return bool(status.get("online", status.get("good", True)))


# -- semantic API -> OneBot action ---------------------------------------------------------------
_NUMBER = re.compile(r"-?\d{1,19}")


def _id(value: Any) -> Any:
    """OneBot numbers its ids; fw carries them as strings."""
    return int(value) if isinstance(value, str) and _NUMBER.fullmatch(value) else value


def _text_message(text: str) -> list[dict[str, Any]]:
    """A message as one text segment: never parsed for CQ codes, so text stays text."""
    return [{"type": "text", "data": {"text": text}}]


def _send_message(p: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if p["target_type"] == "group":
        return "send_group_msg", {"group_id": _id(p["target_id"]), "message": _text_message(p["text"])}
    return "send_private_msg", {"user_id": _id(p["target_id"]), "message": _text_message(p["text"])}


def _member(p: dict[str, Any]) -> dict[str, Any]:
    return {"group_id": _id(p["group_id"]), "user_id": _id(p["user_id"])}


def _friend_request(p: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    params = {"flag": p["request_id"], "approve": p["approve"]}
    if p.get("remark"):
        params["remark"] = p["remark"]
    return "set_friend_add_request", params


ACTIONS: dict[str, Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]] = {
    "send_message": _send_message,
    "get_message": lambda p: ("get_msg", {"message_id": _id(p["message_id"])}),
    "delete_message": lambda p: ("delete_msg", {"message_id": _id(p["message_id"])}),
    "get_group_info": lambda p: ("get_group_info", {"group_id": _id(p["group_id"])}),
    "get_group_list": lambda p: ("get_group_list", {}),
    "get_group_member_list": lambda p: ("get_group_member_list", {"group_id": _id(p["group_id"])}),
    "get_group_member_info": lambda p: ("get_group_member_info", _member(p)),
    "set_group_name": lambda p: ("set_group_name", {"group_id": _id(p["group_id"]), "group_name": p["name"]}),
    "mute_member": lambda p: ("set_group_ban", {**_member(p), "duration": p.get("duration") or DEFAULT_MUTE_SECONDS}),
    "unmute_member": lambda p: ("set_group_ban", {**_member(p), "duration": 0}),
    "kick_member": lambda p: ("set_group_kick", _member(p)),
    "leave_group": lambda p: ("set_group_leave", {"group_id": _id(p["group_id"])}),
    "get_user_info": lambda p: ("get_stranger_info", {"user_id": _id(p["user_id"])}),
    "get_friend_list": lambda p: ("get_friend_list", {}),
    "approve_friend_request": _friend_request,
    "approve_group_invite": lambda p: ("set_group_add_request", {"flag": p["request_id"], "sub_type": "invite", "approve": p["approve"]}),
}
assert set(ACTIONS) == set(APIS)


# -- OneBot answer -> the API's result (ids as strings, as everywhere in fw) ----------------------
def _str(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _dict(data: Any) -> dict[str, Any]:
    return data if isinstance(data, dict) else {}


def _list(data: Any) -> list[dict[str, Any]]:
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


def _group_doc(g: dict[str, Any]) -> dict[str, Any]:
    return {"group_id": _str(g.get("group_id")), "name": g.get("group_name"), "member_count": g.get("member_count")}


def _person_doc(u: dict[str, Any]) -> dict[str, Any]:
    doc = {"user_id": _str(u.get("user_id")), "name": u.get("card") or u.get("nickname")}
    for key in ("role", "remark"):
        if u.get(key):
            doc[key] = u[key]
    return doc


def _message_doc(p: dict[str, Any], data: Any) -> dict[str, Any]:
    m = _dict(data)
    sender = _dict(m.get("sender"))
    return {"message": {"message_id": _str(m.get("message_id", p["message_id"])), "chat_type": p["chat_type"], "chat_id": p["chat_id"],
                        "sender": _person_doc(sender) if sender else {}, "text": plain_text(m.get("message", "")), "time": m.get("time")}}


def _plain_result(p: dict[str, Any], data: Any) -> dict[str, Any]:
    return {"data": data}


RESULTS: dict[str, Callable[[dict[str, Any], Any], dict[str, Any]]] = {
    "send_message": lambda p, d: {"message_id": _str(_dict(d).get("message_id")), "target_type": p["target_type"], "target_id": p["target_id"]},
    "get_message": _message_doc,
    "delete_message": lambda p, d: {"deleted": True, "message_id": p["message_id"]},
    "get_group_info": lambda p, d: {"group": _group_doc(_dict(d))},
    "get_group_list": lambda p, d: {"groups": [_group_doc(g) for g in _list(d)]},
    "get_group_member_list": lambda p, d: {"group_id": p["group_id"], "members": [_person_doc(u) for u in _list(d)]},
    "get_group_member_info": lambda p, d: {"group_id": p["group_id"], "member": _person_doc(_dict(d))},
    "set_group_name": lambda p, d: {"group": {"group_id": p["group_id"], "name": p["name"]}},
    "mute_member": lambda p, d: {"muted": True, "group_id": p["group_id"], "user_id": p["user_id"],
                                 "duration": p.get("duration") or DEFAULT_MUTE_SECONDS},
    "unmute_member": lambda p, d: {"muted": False, "group_id": p["group_id"], "user_id": p["user_id"]},
    "kick_member": lambda p, d: {"kicked": True, "group_id": p["group_id"], "user_id": p["user_id"]},
    "leave_group": lambda p, d: {"left": True, "group_id": p["group_id"]},
    "get_user_info": lambda p, d: {"user": _person_doc(_dict(d))},
    "get_friend_list": lambda p, d: {"friends": [_person_doc(u) for u in _list(d)]},
    "approve_friend_request": lambda p, d: {"request_id": p["request_id"], "approved": p["approve"]},
    "approve_group_invite": lambda p, d: {"request_id": p["request_id"], "approved": p["approve"]},
}


# -- OneBot reports -> events ---------------------------------------------------------------------
@dataclass
class Report:
    """What a report is to fw: an `event` to handle, a `meta` event (the online state), or
    `ignored` with the reason."""

    kind: str
    event: dict[str, Any] | None = None
    online: bool | None = None
    note: str = ""


_CQ_CODE = re.compile(r"\[CQ:[^\]]*\]")
_CQ_ESCAPES = (("&#91;", "["), ("&#93;", "]"), ("&#44;", ","), ("&amp;", "&"))


def plain_text(message: Any) -> str:
    """The plain text of a message: its text segments, or a CQ-code string without its codes."""
    if isinstance(message, str):
        text = _CQ_CODE.sub("", message)
        for code, char in _CQ_ESCAPES:
            text = text.replace(code, char)
        return text.strip()
    if isinstance(message, list):
        parts = [_dict(seg.get("data")).get("text") for seg in message if isinstance(seg, dict) and seg.get("type") == "text"]
        return "".join(part for part in parts if isinstance(part, str)).strip()
    raise ValueError("message is neither segments nor a string")


def _ident(report: dict[str, Any], key: str) -> str:
    value = report.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise ValueError(f"{key} is missing")
    return str(value)


def _actor(report: dict[str, Any]) -> dict[str, Any]:
    actor = {"id": _ident(report, "user_id")}
    sender = _dict(report.get("sender"))
    name = sender.get("card") or sender.get("nickname")
    if isinstance(name, str) and name:
        actor["name"] = name
    return actor


def _message_event(report: dict[str, Any]) -> dict[str, Any] | str:
    kind = report.get("message_type")
    if kind not in ("private", "group"):
        return f"message_type {kind!r} is not one fw handles"
    if "self_id" in report and report.get("user_id") == report.get("self_id"):
        return "a message the bot itself sent"
    event: dict[str, Any] = {"type": "message.received", "actor": _actor(report),
                             "message": {"id": _ident(report, "message_id"), "text": plain_text(report.get("message", ""))}}
    if kind == "group":
        event["group"] = {"id": _ident(report, "group_id")}
    return event


def _request_event(report: dict[str, Any]) -> dict[str, Any] | str:
    kind, sub = report.get("request_type"), report.get("sub_type")
    if kind == "friend":
        return {"type": "friend.request_received", "actor": _actor(report), "request_id": _ident(report, "flag")}
    if kind == "group" and sub == "invite":
        return {"type": "bot.invited_to_group", "actor": _actor(report), "group": {"id": _ident(report, "group_id")},
                "request_id": _ident(report, "flag")}
    return f"request {kind}/{sub} is not one fw handles"


def _notice_event(report: dict[str, Any]) -> dict[str, Any] | str:
    types = {"group_increase": "group.member_joined", "group_decrease": "group.member_left"}
    kind = report.get("notice_type")
    if kind not in types:
        return f"notice {kind!r} is not one fw handles"
    return {"type": types[kind], "actor": _actor(report), "group": {"id": _ident(report, "group_id")}}


def _meta(report: dict[str, Any]) -> Report:
    kind = report.get("meta_event_type")
    if kind == "lifecycle":
        return Report("meta", online=report.get("sub_type") != "disable", note=f"lifecycle {report.get('sub_type')}")
    if kind == "heartbeat":
        return Report("meta", online=_status_online(report.get("status")), note="heartbeat")
    return Report("ignored", note=f"meta event {kind!r} is not one fw reads")


READERS = {"message": _message_event, "request": _request_event, "notice": _notice_event}


def read_report(report: Any) -> Report:
    """A OneBot v11 report as fw reads it; never raises."""
    if not isinstance(report, dict):
        return Report("ignored", note="the report is not a JSON object")
    post_type = report.get("post_type")
    if post_type == "meta_event":
        return _meta(report)
    reader = READERS.get(post_type)  # type: ignore[arg-type]
    if reader is None:
        return Report("ignored", note=f"post_type {post_type!r} is not one fw handles")
    try:
        found = reader(report)
    except ValueError as exc:
        return Report("ignored", note=f"a {post_type} report fw cannot read: {exc}")
    if isinstance(found, str):
        return Report("ignored", note=found)
    return Report("event", event=found)


def signature_ok(secret: str, body: bytes, header: str | None) -> bool:
    """`X-Signature: sha1=<HMAC-SHA1 of the body under the secret>`, compared in constant time."""
    expected = "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
    return header is not None and hmac.compare_digest(expected.encode(), header.strip().encode())


def bearer_ok(token: str | None, header: str | None) -> bool:
    """The access token as `Authorization: Bearer <token>`; a bot without a token takes none."""
    if not token or not header:
        return False
    scheme, _, given = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


# -- reverse WebSocket links ----------------------------------------------------------------------
class SocketDropped(Exception):
    pass


class SocketLink:
    """One connected socket of a bot, in the process that holds it. `send` puts a text frame
    on the socket from any thread; answers come back through `answer`, matched by echo."""

    def __init__(self, bot: str, send: Callable[[str], None], self_id: str | None = None) -> None:
        self.bot = bot
        self.self_id = self_id
        self.online = True  # connected; a lifecycle or heartbeat event may say otherwise
        self._send = send
        self._pending: dict[str, Future[Any]] = {}
        self._lock = threading.Lock()
        self.closed = False

    def request(self, action: str, params: dict[str, Any], timeout: float, failure: Callable[[str, str], FwError]) -> Any:
        """Send one action and wait (bounded) for the frame with its echo."""
        echo = uuid.uuid4().hex
        answer: Future[Any] = Future()
        with self._lock:
            if self.closed:
                raise failure(action, "the socket closed")
            self._pending[echo] = answer
        try:
            try:
                self._send(json.dumps({"action": action, "params": params, "echo": echo}, ensure_ascii=False))
                return answer.result(timeout)
            except FutureTimeout:
                raise failure(action, f"no answer on the socket within {timeout:g} s") from None
            except SocketDropped:
                raise failure(action, "the socket closed before the action was answered") from None
            except FwError:
                raise
            except Exception as exc:
                raise failure(action, f"the socket failed ({type(exc).__name__})") from None
        finally:
            with self._lock:
                self._pending.pop(echo, None)

    def answer(self, frame: dict[str, Any]) -> bool:
        """Hand an answer frame to the action waiting for its echo; False when none waits."""
        with self._lock:
            waiting = self._pending.get(str(frame.get("echo")))
        if waiting is None or waiting.done():
            return False
        waiting.set_result(frame)
        return True

    def close(self) -> None:
        with self._lock:
            self.closed = True
            waiting = list(self._pending.values())
        for answer in waiting:
            if not answer.done():
                answer.set_exception(SocketDropped())


class SocketLinks:
    """The sockets this process holds, by bot: actions go on the one connected last."""

    def __init__(self) -> None:
        self._links: dict[str, list[SocketLink]] = {}
        self._lock = threading.Lock()

    def attach(self, link: SocketLink) -> None:
        with self._lock:
            self._links.setdefault(link.bot, []).append(link)

    def detach(self, link: SocketLink) -> bool:
        """Forget a link; whether the bot still has another here."""
        link.close()
        with self._lock:
            held = self._links.get(link.bot, [])
            if link in held:
                held.remove(link)
            return bool(held)

    def current(self, bot: str) -> SocketLink | None:
        with self._lock:
            held = self._links.get(bot) or []
            return held[-1] if held else None

    def bots(self) -> list[str]:
        with self._lock:
            return [bot for bot, held in self._links.items() if held]


LINKS = SocketLinks()
OWNER = f"{socket_module.gethostname()}:{os.getpid()}"  # this process, as other processes see it


def _cutoff() -> str:
    moment = datetime.now(timezone.utc) - timedelta(seconds=LINK_STALE_SECONDS)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def link_state(home: Home, bot: str) -> dict[str, Any] | None:
    """The freshest live socket row of the bot, from any process, or None."""
    with StateStore.open(home) as store:
        return store.one("SELECT owner, online, self_id, connected_at, seen_at FROM onebot_links "
                         "WHERE bot = ? AND seen_at > ? ORDER BY seen_at DESC LIMIT 1", (bot, _cutoff()))


def record_link(home: Home, bot: str, *, online: bool | None = None, self_id: str | None = None) -> None:
    """This process holds a socket of the bot (and, when given, its online state now)."""
    now = now_iso()
    with StateStore.open(home) as store, store.transaction():
        row = store.one("SELECT online, self_id FROM onebot_links WHERE bot = ? AND owner = ?", (bot, OWNER))
        if row is None:
            store.insert("onebot_links", {"bot": bot, "owner": OWNER, "online": int(online is not False), "self_id": self_id,
                                          "connected_at": now, "seen_at": now})
            return
        store.execute("UPDATE onebot_links SET online = ?, self_id = ?, seen_at = ? WHERE bot = ? AND owner = ?",
                      (int(row["online"] if online is None else online), self_id or row["self_id"], now, bot, OWNER))


def forget_link(home: Home, bot: str) -> None:
    """This process holds no socket of the bot any more."""
    with StateStore.open(home) as store, store.transaction():
        store.execute("DELETE FROM onebot_links WHERE bot = ? AND owner = ?", (bot, OWNER))
