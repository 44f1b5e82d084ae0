"""Events: what a chat platform reports (a message, a friend request, ...), checked strictly,
and what an event lets its tools act on.

An event is `{"type", "actor": {"id", "name"?, "anonymous"?}, "group": {"id"}?, "message":
{"id", "text", "mentions_bot"?, "attachments"?, "temp_group_id"?}?, "request_id"?}`; ids are
strings (OneBot's numbers are carried as text). A run started for an event keeps it frozen in
its record: an event tool acts only on the ids found there, and never on an anonymous sender.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..domain.catalogue import ACTOR, CURRENT_MESSAGE, EVENT_TYPES, GROUP, GROUP_AND_ACTOR, REPLY_TARGET, REQUEST
from ..errors import FwError

MAX_ID = 128


def _model() -> Any:
    """The pydantic model of an event, built on first use (pydantic is slow to import)."""
    global _EVENT
    if _EVENT is None:
        _EVENT = _build_model()
    return _EVENT


_EVENT: Any = None


def _build_model() -> Any:
    from typing import Annotated, Literal, Optional

    from pydantic import Field, model_validator

    from ..home.models import Strict  # lazy: start-up speed

    Id = Annotated[str, Field(min_length=1, max_length=MAX_ID)]

    class Actor(Strict):
        id: Id
        name: Optional[str] = None
        anonymous: Optional[bool] = None

    class GroupRef(Strict):
        id: Id

    class Attachment(Strict):
        type: Literal["image", "file", "record", "video"]
        url: Optional[Annotated[str, Field(max_length=2048)]] = None
        name: Optional[Annotated[str, Field(max_length=2048)]] = None

    class MessageRef(Strict):
        id: Id
        text: str
        mentions_bot: Optional[bool] = None
        attachments: Optional[list[Attachment]] = None
        temp_group_id: Optional[Id] = None

    class Event(Strict):
        type: Literal[EVENT_TYPES]  # type: ignore[valid-type]
        actor: Actor
        group: Optional[GroupRef] = None
        message: Optional[MessageRef] = None
        request_id: Optional[Id] = None

        @model_validator(mode="after")
        def _what_the_type_needs(self) -> Event:
            if self.type == "message.received" and self.message is None:
                raise ValueError("message: a message.received event carries its message")
            if self.type.startswith("group.") or self.type in ("bot.removed_from_group", "bot.joined_group"):
                if self.group is None:
                    raise ValueError(f"group: a {self.type} event names its group")
            if self.message is not None and self.message.temp_group_id is not None and self.group is not None:
                raise ValueError("message.temp_group_id: a temporary chat is private: it has no group")
            return self

    return Event


def validate_event(data: Any) -> dict[str, Any]:
    """The event as plain data; `invalid` naming the field at fault."""
    from pydantic import ValidationError

    from ..home.models import describe_error  # lazy: start-up speed

    if not isinstance(data, dict):
        raise FwError("invalid", "the event must be a JSON object", EVENT_HINT, field="(event)")
    try:
        event = _model().model_validate(data)
    except ValidationError as exc:
        where, message = describe_error(exc)
        if not where and ": " in message:  # a rule across fields names its field first
            where = message.split(": ", 1)[0]
        if where == "type":
            message = f"type must be one of: {', '.join(EVENT_TYPES)}"
        raise FwError("invalid", f"event: {message}", EVENT_HINT, field=where or "(event)") from None
    return event.model_dump(mode="json", exclude_none=True)


EVENT_HINT = ('an event is {"type", "actor": {"id", "name"?}, "group": {"id"}?, "message": {"id", "text", "mentions_bot"?}?, '
              '"request_id"?}; ids are strings')


def mentions_bot(event: dict[str, Any], bot_name: str, self_id: str | None = None) -> bool:
    """Whether a message event addresses the bot: as the adapter decided it (`mentions_bot`),
    else, for an event written by hand or on the local platform, a private message always
    does and a group message when its text holds `@<bot name>` (or `@<its own id>`)."""
    message = event.get("message") or {}
    given = message.get("mentions_bot")
    if isinstance(given, bool):
        return given
    if not event.get("group"):
        return True
    names = [bot_name, *([self_id] if self_id else [])]
    text = message.get("text") or ""
    return any(re.search(rf"(?<![\w@])@{re.escape(name)}(?![\w-])", text) for name in names)


def target_ids(target: str | None, event: dict[str, Any]) -> dict[str, Any] | None:
    """The ids an event tool is frozen to, as the adapter API's parameters; None when the
    event does not carry them."""
    actor = None if event["actor"].get("anonymous") else event["actor"]["id"]  # nothing acts on an anonymous sender
    group = (event.get("group") or {}).get("id")
    message = event.get("message") or {}
    if target == REPLY_TARGET:
        if group:  # a reply in a group quotes the message it answers
            return {"target_type": "group", "target_id": group, **({"reply_to": message["id"]} if message.get("id") else {})}
        if actor is None:
            return None
        return {"target_type": "person", "target_id": actor, **({"temp_group_id": message["temp_group_id"]} if message.get("temp_group_id") else {})}
    if target == CURRENT_MESSAGE:
        message_id = message.get("id")
        if message_id is None or (not group and actor is None):
            return None
        chat = {"chat_type": "group", "chat_id": group} if group else {"chat_type": "person", "chat_id": actor}
        return {**chat, "message_id": message_id}
    if target == ACTOR:
        return {"user_id": actor} if actor is not None else None
    if target == GROUP:
        return {"group_id": group} if group else None
    if target == GROUP_AND_ACTOR:
        return {"group_id": group, "user_id": actor} if group and actor is not None else None
    if target == REQUEST:
        request = event.get("request_id")
        return {"request_id": request} if request else None
    return None


def describe_event(event: dict[str, Any]) -> str:
    """The input a model reads for an event: a message's text as it is, otherwise a short
    description with the event itself."""
    if event["type"] == "message.received":
        text = event["message"]["text"]
        return text if text.strip() else "(a message with no text)"
    actor = event["actor"]
    who = f"{actor.get('name') or actor['id']} (id {actor['id']})"
    what = {
        "friend.request_received": f"{who} asks to be the bot's friend.",
        "bot.invited_to_group": f"{who} invites the bot to a group.",
        "group.member_joined": f"{who} joined a group.",
        "group.member_left": f"{who} left a group.",
        "bot.joined_group": "The bot joined a group.",
        "bot.removed_from_group": f"The bot left a group, or was removed from it (by {who}).",
    }[event["type"]]
    return f"Event {event['type']}: {what}\n{json.dumps(event, ensure_ascii=False)}"
