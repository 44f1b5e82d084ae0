"""Events: what a chat platform reports (a message, a friend request, ...), checked strictly,
and what an event lets its tools act on.

An event is `{"type", "actor": {"id", "name"?}, "group": {"id"}?, "message": {"id", "text"}?,
"request_id"?}`; ids are strings (OneBot's numbers are carried as text). A run started for an
event keeps it frozen in its record: an event tool acts only on the ids found there.
"""

from __future__ import annotations

import json
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

    class GroupRef(Strict):
        id: Id

    class MessageRef(Strict):
        id: Id
        text: str

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
            if self.type.startswith("group.") and self.group is None:
                raise ValueError(f"group: a {self.type} event names its group")
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


EVENT_HINT = ('an event is {"type", "actor": {"id", "name"?}, "group": {"id"}?, "message": {"id", "text"}?, '
              '"request_id"?}; ids are strings')


def target_ids(target: str | None, event: dict[str, Any]) -> dict[str, Any] | None:
    """The ids an event tool is frozen to, as the adapter API's parameters; None when the
    event does not carry them."""
    actor = event["actor"]["id"]
    group = (event.get("group") or {}).get("id")
    if target == REPLY_TARGET:
        return {"target_type": "group", "target_id": group} if group else {"target_type": "person", "target_id": actor}
    if target == CURRENT_MESSAGE:
        message = (event.get("message") or {}).get("id")
        if message is None:
            return None
        chat = {"chat_type": "group", "chat_id": group} if group else {"chat_type": "person", "chat_id": actor}
        return {**chat, "message_id": message}
    if target == ACTOR:
        return {"user_id": actor}
    if target == GROUP:
        return {"group_id": group} if group else None
    if target == GROUP_AND_ACTOR:
        return {"group_id": group, "user_id": actor} if group else None
    if target == REQUEST:
        request = event.get("request_id")
        return {"request_id": request} if request else None
    return None


def describe_event(event: dict[str, Any]) -> str:
    """The input a model reads for an event: a message's text as it is, otherwise a short
    description with the event itself."""
    if event["type"] == "message.received":
        return event["message"]["text"]
    actor = event["actor"]
    who = f"{actor.get('name') or actor['id']} (id {actor['id']})"
    what = {
        "friend.request_received": f"{who} asks to be the bot's friend.",
        "bot.invited_to_group": f"{who} invites the bot to a group.",
        "group.member_joined": f"{who} joined a group.",
        "group.member_left": f"{who} left a group.",
    }[event["type"]]
    return f"Event {event['type']}: {what}\n{json.dumps(event, ensure_ascii=False)}"
