"""OneBot v11 reports read as fw's events: what NapCat, Lagrange.OneBot, LLOneBot and go-cqhttp
post (over HTTP or as frames of the reverse WebSocket), in both message forms (an array of
segments, or a string of CQ codes).

Whether the bot was addressed is decided once, here, as NoneBot2's adapter decides it: an `at`
segment (or `[CQ:at,qq=...]`) naming the bot's own id, a reply to a message the bot sent, or
any private message. The bot's own `at` leaves the text; other mentions stay as `@name`; media
become `attachments` and a placeholder (`[image]`) in the text. Messages that must start
nothing (the bot's own, `message_sent`, QQ's system user 80000000) are `ignored` with the
reason; ids are compared as strings, whatever type the implementation sends them in.

Each event carries a de-duplication `key` (CONTRACT section 12): the message id, a request's
flag, or a hash of a notice's fields.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIN_BEAT_SECONDS, MAX_BEAT_SECONDS = 1.0, 86400.0  # a heartbeat interval outside these is taken as the nearer bound
SYSTEM_USER = "80000000"  # QQ's own notices come as messages from this user
MEDIA = ("image", "file", "record", "video")


@dataclass
class Report:
    """What a report is to fw: an `event` to handle, a `meta` event (the online state, a
    heartbeat's interval), or `ignored` with the reason. `self_id` is the bot's own id as
    the report gives it; `key` tells a repeated report from a new one."""

    kind: str
    event: dict[str, Any] | None = None
    online: bool | None = None
    note: str = ""
    self_id: str | None = None
    key: str | None = None
    heartbeat_seconds: float | None = None


# -- messages: segments and CQ codes ----------------------------------------------------------
_CQ = re.compile(r"\[CQ:([A-Za-z0-9_.-]+)((?:,[^\]]*)?)\]")
_TEXT_ESCAPES = (("&#91;", "["), ("&#93;", "]"), ("&amp;", "&"))
_VALUE_ESCAPES = (("&#44;", ","), ("&#91;", "["), ("&#93;", "]"), ("&amp;", "&"))


def _unescape(text: str, escapes: tuple[tuple[str, str], ...]) -> str:
    for code, char in escapes:
        text = text.replace(code, char)
    return text


def cq_segments(message: str) -> list[dict[str, Any]]:
    """A CQ-code string as the segments it stands for: `a[CQ:at,qq=1]b` is text, at, text."""
    segments: list[dict[str, Any]] = []
    at = 0
    for code in _CQ.finditer(message):
        if code.start() > at:
            segments.append({"type": "text", "data": {"text": _unescape(message[at:code.start()], _TEXT_ESCAPES)}})
        data = {}
        for pair in code.group(2).split(",")[1:]:
            key, _, value = pair.partition("=")
            data[key] = _unescape(value, _VALUE_ESCAPES)
        segments.append({"type": code.group(1), "data": data})
        at = code.end()
    if at < len(message):
        segments.append({"type": "text", "data": {"text": _unescape(message[at:], _TEXT_ESCAPES)}})
    return segments


def segments_of(message: Any) -> list[dict[str, Any]]:
    """A message in either form as segments; ValueError for anything else."""
    if isinstance(message, str):
        return cq_segments(message)
    if isinstance(message, list):
        return [seg for seg in message if isinstance(seg, dict)]
    raise ValueError("message is neither segments nor a string")


def _data(segment: dict[str, Any]) -> dict[str, Any]:
    data = segment.get("data")
    return data if isinstance(data, dict) else {}


def plain_text(message: Any) -> str:
    """The plain text of a message: its text segments only, codes left out."""
    return "".join(str(_data(s).get("text") or "") for s in segments_of(message) if s.get("type") == "text").strip()


@dataclass
class ReadMessage:
    text: str
    mentions_bot: bool
    attachments: list[dict[str, Any]]


def read_message(message: Any, self_id: str | None, said_by_bot: Callable[[str], bool]) -> ReadMessage:
    """The text a model reads, whether the bot was addressed, and what media came with it."""
    parts: list[str] = []
    mentioned = trim = False
    attachments: list[dict[str, Any]] = []
    for segment in segments_of(message):
        kind, data = segment.get("type"), _data(segment)
        if kind == "text":
            text = str(data.get("text") or "")
            parts.append(text.removeprefix(" ") if trim else text)
            trim = False
        elif kind == "at":
            target = _string(data.get("qq"))
            if self_id is not None and target == self_id:
                mentioned = trim = True  # the bot's own at leaves the text, and the space after it
            elif target == "all":
                parts.append("@all")
            elif target:
                name = data.get("name")
                parts.append(f"@{name if isinstance(name, str) and name else target}")
        elif kind == "reply":
            replied = _string(data.get("id"))
            if replied and said_by_bot(replied):
                mentioned = True
        elif kind in MEDIA:
            item: dict[str, Any] = {"type": kind}
            for key, field in (("url", "url"), ("name", "file"), ("name", "name")):
                value = data.get(field)
                if isinstance(value, str) and value and key not in item:
                    item[key] = value[:2048]
            attachments.append(item)
            parts.append(f"[{kind}]")
    return ReadMessage("".join(parts).strip(), mentioned, attachments)


def _string(value: Any) -> str | None:
    """An id as fw carries it: OneBot sends numbers, some implementations strings."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, str)):
        text = str(value).strip()
        return text or None
    return None


def _ident(report: dict[str, Any], key: str) -> str:
    value = _string(report.get(key))
    if value is None:
        raise ValueError(f"{key} is missing")
    return value


def _actor(report: dict[str, Any]) -> dict[str, Any]:
    anonymous = report.get("anonymous")
    if report.get("sub_type") == "anonymous" and isinstance(anonymous, dict):
        actor: dict[str, Any] = {"id": f"anonymous:{_ident(anonymous, 'id')}", "anonymous": True}
        if isinstance(anonymous.get("name"), str) and anonymous["name"]:
            actor["name"] = anonymous["name"]
        return actor
    actor = {"id": _ident(report, "user_id")}
    sender = report.get("sender") if isinstance(report.get("sender"), dict) else {}
    name = sender.get("card") or sender.get("nickname")
    if isinstance(name, str) and name:
        actor["name"] = name
    return actor


# -- reports ----------------------------------------------------------------------------------
SaidByBot = Callable[[str], bool]


def _message_event(report: dict[str, Any], self_id: str | None, said_by_bot: SaidByBot) -> dict[str, Any] | str:
    kind = report.get("message_type")
    if kind not in ("private", "group"):
        return f"message_type {kind!r} is not one fw handles"
    user = _string(report.get("user_id"))
    if self_id is not None and user == self_id:
        return "a message the bot itself sent"
    anonymous = report.get("sub_type") == "anonymous" and isinstance(report.get("anonymous"), dict)
    if user == SYSTEM_USER and not anonymous:  # go-cqhttp gives anonymous senders this user_id too
        return "a notice of QQ's system user 80000000"
    read = read_message(report.get("message", ""), self_id, said_by_bot)
    message: dict[str, Any] = {"id": _ident(report, "message_id"), "text": read.text, "mentions_bot": read.mentions_bot or kind == "private"}
    if read.attachments:
        message["attachments"] = read.attachments
    event: dict[str, Any] = {"type": "message.received", "actor": _actor(report), "message": message}
    if kind == "group":
        event["group"] = {"id": _ident(report, "group_id")}
    else:
        sender = report.get("sender") if isinstance(report.get("sender"), dict) else {}
        temp_group = _string(report.get("group_id")) or _string(sender.get("group_id"))
        if report.get("sub_type") == "group" and temp_group:
            message["temp_group_id"] = temp_group  # a temporary chat started from a group: still private
    return event


def _request_event(report: dict[str, Any], self_id: str | None, said_by_bot: SaidByBot) -> dict[str, Any] | str:
    kind, sub = report.get("request_type"), report.get("sub_type")
    if kind == "friend":
        return {"type": "friend.request_received", "actor": _actor(report), "request_id": _ident(report, "flag")}
    if kind == "group" and sub == "invite":
        return {"type": "bot.invited_to_group", "actor": _actor(report), "group": {"id": _ident(report, "group_id")},
                "request_id": _ident(report, "flag")}
    return f"request {kind}/{sub} is not one fw handles"


def _notice_event(report: dict[str, Any], self_id: str | None, said_by_bot: SaidByBot) -> dict[str, Any] | str:
    kind = report.get("notice_type")
    if kind not in ("group_increase", "group_decrease"):
        return f"notice {kind!r} is not one fw handles"
    group = {"id": _ident(report, "group_id")}
    is_bot = self_id is not None and _string(report.get("user_id")) == self_id
    if kind == "group_decrease" and (report.get("sub_type") == "kick_me" or is_bot):
        operator = _string(report.get("operator_id"))
        actor = {"id": operator} if operator and operator != "0" else {"id": self_id or _ident(report, "user_id")}
        return {"type": "bot.removed_from_group", "actor": actor, "group": group}
    if kind == "group_increase" and is_bot:
        operator = _string(report.get("operator_id"))
        return {"type": "bot.joined_group", "actor": {"id": operator} if operator and operator != "0" else {"id": self_id},
                "group": group}
    return {"type": "group.member_joined" if kind == "group_increase" else "group.member_left", "actor": _actor(report), "group": group}


def _meta(report: dict[str, Any]) -> Report:
    kind = report.get("meta_event_type")
    if kind == "lifecycle":
        return Report("meta", online=report.get("sub_type") != "disable", note=f"lifecycle {report.get('sub_type')}")
    if kind == "heartbeat":
        interval = report.get("interval")
        seconds = interval / 1000 if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval > 0 else None
        if seconds is not None and not MIN_BEAT_SECONDS <= seconds <= MAX_BEAT_SECONDS:
            seconds = min(max(seconds, MIN_BEAT_SECONDS), MAX_BEAT_SECONDS)  # nonsense (a day, a microsecond) is bounded
        return Report("meta", online=status_online(report.get("status")), note="heartbeat", heartbeat_seconds=seconds)
    return Report("ignored", note=f"meta event {kind!r} is not one fw reads")


def status_online(status: Any) -> bool:
    if not isinstance(status, dict):
        return status is None  # an implementation that answers ok with no data is up
    return bool(status.get("online", status.get("good", True)))


READERS = {"message": _message_event, "request": _request_event, "notice": _notice_event}


def dedup_key(report: dict[str, Any]) -> str | None:
    """What tells a repeated report from a new one: a message's id, a request's flag, or a
    hash of a notice's fields (CONTRACT section 12)."""
    post_type = report.get("post_type")
    if post_type == "message":
        value = _string(report.get("message_id"))
        return f"message:{value}" if value else None
    if post_type == "request":
        value = _string(report.get("flag"))
        return f"request:{value}" if value else None
    if post_type == "notice":
        canonical = json.dumps(report, sort_keys=True, ensure_ascii=False, default=str)
        return "notice:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]
    return None


def read_report(report: Any, self_id: str | None = None, said_by_bot: SaidByBot = lambda message_id: False) -> Report:
    """A OneBot v11 report as fw reads it, for the bot whose own id is `self_id` (the report's
    own `self_id` when not known); never raises."""
    if not isinstance(report, dict):
        return Report("ignored", note="the report is not a JSON object")
    given = _string(report.get("self_id"))
    me = self_id or given
    post_type = report.get("post_type")
    if post_type == "meta_event":
        meta = _meta(report)
        meta.self_id = given
        return meta
    if post_type == "message_sent":
        return Report("ignored", note="a message the bot itself sent (message_sent)", self_id=given)
    reader = READERS.get(post_type)  # type: ignore[arg-type]
    if reader is None:
        return Report("ignored", note=f"post_type {post_type!r} is not one fw handles", self_id=given)
    try:
        found = reader(report, me, said_by_bot)
    except ValueError as exc:
        return Report("ignored", note=f"a {post_type} report fw cannot read: {exc}", self_id=given)
    if isinstance(found, str):
        return Report("ignored", note=found, self_id=given)
    return Report("event", event=found, self_id=given, key=dedup_key(report))
