"""The `onebot` adapter: OneBot v11, the protocol of NapCat, Lagrange.OneBot, LLOneBot and
go-cqhttp, reached either way it is usually deployed.

- HTTP: a bot with a `url` sends each action as `POST {url}/{action}` with its access token
  as a Bearer token; `get_status` is the online check, unless `fw bot serve` receives the
  bot's heartbeats (`onebot_status`): then three missed intervals make it offline.
- Reverse WebSocket: the implementation connects to `fw bot serve` (`/onebot/v11/ws`). A bot
  without a `url` sends its actions on that socket as `{"action", "params", "echo"}` and reads
  the frame with the same `echo`. Only the process that holds the socket can send on it; the
  others see whether it is connected through the store (`onebot_state.py`), and send their
  actions through that process's outbox (`onebot_relay.py`).

Like every adapter it only translates: a semantic API call into a OneBot action and its answer
back (a report into an event is `onebot_reports.py`'s). A failed action (an HTTP
error, `retcode` other than 0, `status: failed`, a socket that drops) is `unavailable` with
the action and the platform's own message, the token scrubbed from it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import uuid
from collections.abc import Awaitable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable

from ...domain.bots import BOT_SECRETS
from ...domain.catalogue import APIS
from ...errors import FwError
from ...home import secrets
from ...home.store import Home
from ...http_client import async_http_client, http_client
from ...state.store import StateStore
from .local import DEFAULT_MUTE_SECONDS
from .onebot_relay import RelayedLink, owner_of
from .onebot_reports import plain_text, status_online
from .onebot_state import OWNER, heartbeat_state, link_state, record_sent

ACTION_TIMEOUT = 30.0  # seconds an action waits for its answer, over HTTP or on the socket
STATUS_TIMEOUT = 5.0  # the online check over HTTP
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
        """Online now: by its heartbeats while `fw bot serve` receives them (three missed
        intervals and it is offline, at once, without asking); otherwise as the platform
        answers `get_status` (HTTP) or as its socket stands."""
        beats = heartbeat_state(self.home, self.bot)
        if not self.url and not (LINKS.current(self.bot) or link_state(self.home, self.bot)):
            return False  # no socket: nothing can reach it, whatever it said last
        if beats is not None:
            return beats
        if self.url:
            try:
                status = self._http("get_status", {}, STATUS_TIMEOUT)
            except FwError:
                return False
            return status_online(status)
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
        result = RESULTS.get(api, _plain_result)(params, data)
        if api == "send_message" and result.get("message_id"):
            record_sent(self.home, self.bot, result["message_id"])  # a reply to it addresses the bot
        return result

    async def acall(self, api: str, params: dict[str, Any], run_sync: Any) -> dict[str, Any]:
        """`call` from an event loop: the action is sent and its answer awaited holding no
        thread (a hung implementation stalls only the runs that wait for it)."""
        if api not in ACTIONS:
            raise FwError("unavailable", f"the onebot adapter has no API {api!r}", "", reason="adapter_api_unsupported")
        action, payload = ACTIONS[api](params)
        if self.url:
            data = await self._ahttp(action, payload, ACTION_TIMEOUT)
        else:
            data = self._answer_data(action, await self._link(action).arequest(action, payload, ACTION_TIMEOUT, self._failure))
        result = RESULTS.get(api, _plain_result)(params, data)
        if api == "send_message" and result.get("message_id"):
            await run_sync(record_sent, self.home, self.bot, result["message_id"])
        return result

    def _send(self, action: str, payload: dict[str, Any]) -> Any:
        if self.url:
            return self._http(action, payload, ACTION_TIMEOUT)
        return self._answer_data(action, self._link(action).request(action, payload, ACTION_TIMEOUT, self._failure))

    def _link(self, action: str) -> SocketLink | RelayedLink:
        """The bot's socket: held here, or held by another fw process (on this host or, with
        PostgreSQL, another), whose outbox relays the action."""
        link = LINKS.current(self.bot)
        if link is not None:
            return link
        held = link_state(self.home, self.bot)
        if held is not None:
            with StateStore.open(self.home) as store:
                owner = owner_of(store, self.bot)
            if owner is not None and owner["owner"] == held["owner"]:
                return RelayedLink(self.home, self.bot, owner["owner"], OWNER)
        why = (f"its socket is held by another fw process ({held['owner']}) that relays no actions"
               if held else "no OneBot implementation is connected to its reverse WebSocket")
        raise FwError("unavailable", f"bot {self.bot!r} cannot send {action}: {why}", self.offline_hint,
                      reason="adapter_offline", action=action)

    def _http(self, action: str, payload: dict[str, Any], timeout: float) -> Any:
        import httpx  # lazy: start-up speed

        assert self.url is not None
        http = http_client("https" if self.url.startswith("https:") else "http")  # kept-alive, one TLS context
        try:
            response = http.post(f"{self.url.rstrip('/')}/{action}", json=payload, headers=self._headers(), timeout=timeout)
        except httpx.TimeoutException:
            raise self._failure(action, f"no answer within {timeout:g} s") from None
        except httpx.HTTPError as exc:  # the class name only: an exception's text may quote a header
            raise self._failure(action, f"{self.url} could not be reached ({type(exc).__name__})") from None
        except UnicodeError:
            raise self._failure(action, "the access token holds characters an HTTP header cannot carry") from None
        return self._http_answer(action, response)

    async def _ahttp(self, action: str, payload: dict[str, Any], timeout: float) -> Any:
        import httpx  # lazy: start-up speed

        assert self.url is not None
        http = async_http_client("https" if self.url.startswith("https:") else "http")
        try:
            response = await http.post(f"{self.url.rstrip('/')}/{action}", json=payload, headers=self._headers(), timeout=timeout)
        except httpx.TimeoutException:
            raise self._failure(action, f"no answer within {timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise self._failure(action, f"{self.url} could not be reached ({type(exc).__name__})") from None
        except UnicodeError:
            raise self._failure(action, "the access token holds characters an HTTP header cannot carry") from None
        return self._http_answer(action, response)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _http_answer(self, action: str, response: Any) -> Any:
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

    def login_id(self) -> str | None:
        """The bot's own id, as `get_login_info` answers it; None when it says none."""
        data = self._http("get_login_info", {}, STATUS_TIMEOUT) if self.url else self._send("get_login_info", {})
        return _login_user(data)

    async def alogin_id(self) -> str | None:
        """`login_id` of an HTTP bot from an event loop (on the connection its actions use)."""
        return _login_user(await self._ahttp("get_login_info", {}, STATUS_TIMEOUT))


def _login_user(data: Any) -> str | None:
    user = data.get("user_id") if isinstance(data, dict) else None
    return str(user) if isinstance(user, (int, str)) and not isinstance(user, bool) and str(user).isdigit() else None


# -- semantic API -> OneBot action ---------------------------------------------------------------
_NUMBER = re.compile(r"-?\d{1,19}")


def _id(value: Any) -> Any:
    """OneBot numbers its ids; fw carries them as strings."""
    return int(value) if isinstance(value, str) and _NUMBER.fullmatch(value) else value


def _text_message(text: str) -> list[dict[str, Any]]:
    """A message as one text segment: never parsed for CQ codes, so text stays text."""
    return [{"type": "text", "data": {"text": text}}]


def _send_message(p: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A group message quotes the message it answers (`reply_to`, an event's reply); a private
    one in a temporary chat carries the group it came from (`temp_group_id`)."""
    message = _text_message(p["text"])
    if p.get("reply_to"):
        message = [{"type": "reply", "data": {"id": str(p["reply_to"])}}, *message]
    if p["target_type"] == "group":
        return "send_group_msg", {"group_id": _id(p["target_id"]), "message": message}
    params = {"user_id": _id(p["target_id"]), "message": message}
    if p.get("temp_group_id"):
        params["group_id"] = _id(p["temp_group_id"])
    return "send_private_msg", params


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


def signature_ok(secret: str, body: bytes, header: str | None) -> bool:
    """`X-Signature: sha1=<HMAC-SHA1 of the body under the secret>`, compared in constant time."""
    expected = "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
    return header is not None and hmac.compare_digest(expected.encode(), header.strip().encode())


def bearer_ok(token: str | None, header: str | None) -> bool:
    """The access token as `Authorization: Bearer <token>`; a bot without a token takes none."""
    given = handshake_token(header, None)
    return bool(token and given) and hmac.compare_digest(given.encode(), token.encode())  # type: ignore[union-attr]


def handshake_token(header: str | None, query_token: str | None) -> str | None:
    """The access token a socket's handshake carries, in any form implementations send:
    `Authorization: Bearer <t>` (NapCat, Lagrange), `Authorization: Token <t>` (go-cqhttp) or
    `?access_token=<t>` (older clients)."""
    if header:
        scheme, _, given = header.strip().partition(" ")
        if scheme.lower() in ("bearer", "token") and given.strip():
            return given.strip()
    return query_token or None


# -- reverse WebSocket links ----------------------------------------------------------------------
class SocketDropped(Exception):
    pass


def _running_loop() -> Any:
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class SocketLink:
    """One connected socket of a bot, in the process that holds it. `send` puts a text frame
    on the socket from any thread; answers come back through `answer`, matched by echo."""

    def __init__(self, bot: str, send: Callable[[str], None], self_id: str | None = None,
                 asend: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.bot = bot
        self.self_id = self_id
        self.online = True  # connected; a lifecycle or heartbeat event may say otherwise
        self._send = send
        self._asend = asend  # on the loop that holds the socket
        self._loop = _running_loop()
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

    async def arequest(self, action: str, params: dict[str, Any], timeout: float, failure: Callable[[str, str], FwError]) -> Any:
        """`request` from an event loop: on the socket's own loop it waits holding no thread."""
        import asyncio

        if self._asend is None or _running_loop() is not self._loop:
            return await asyncio.to_thread(self.request, action, params, timeout, failure)
        echo = uuid.uuid4().hex
        answer: Future[Any] = Future()
        with self._lock:
            if self.closed:
                raise failure(action, "the socket closed")
            self._pending[echo] = answer
        try:
            try:
                await self._asend(json.dumps({"action": action, "params": params, "echo": echo}, ensure_ascii=False))
                return await asyncio.wait_for(asyncio.wrap_future(answer), timeout)
            except (TimeoutError, asyncio.TimeoutError):
                raise failure(action, f"no answer on the socket within {timeout:g} s") from None
            except SocketDropped:
                raise failure(action, "the socket closed before the action was answered") from None
            except (FwError, asyncio.CancelledError):
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
def token_matches(token: str, given: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())
