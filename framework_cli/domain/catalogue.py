"""The fixed catalogue of chat-platform tools (seed B, `PLATFORM.md`): 10 event tools and 14
platform tools, each a fixed name, adapter API, risk, strict JSON Schema and, for an event
tool, the event types it fits and the target it is frozen to.

There is no raw passthrough: no `call_platform_api`, no tool that takes an action name. An
API a platform offers beyond these must first become a tool here, with its own name, schema,
risk and rule. This module is plain data, cheap to import.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from ..errors import FwError
from ..suggest import did_you_mean, hint_with
from .tool_types import object_schema

EVENT_PREFIX = "event_"

EVENT_TYPES = (
    "message.received",
    "friend.request_received",
    "bot.invited_to_group",
    "group.member_joined",
    "group.member_left",
    "bot.joined_group",
    "bot.removed_from_group",
)

# The semantic APIs an adapter may declare, in catalogue order.
APIS = (
    "send_message",
    "get_message",
    "delete_message",
    "get_group_info",
    "get_group_list",
    "get_group_member_list",
    "get_group_member_info",
    "set_group_name",
    "mute_member",
    "unmute_member",
    "kick_member",
    "leave_group",
    "get_user_info",
    "get_friend_list",
    "approve_friend_request",
    "approve_group_invite",
)

# The targets an event tool is frozen to, and what each needs of the event.
REPLY_TARGET = "reply_target"  # the group the event came from, else the person
CURRENT_MESSAGE = "current_message"  # the reply target's chat and the message id
ACTOR = "actor"
GROUP = "group"
GROUP_AND_ACTOR = "group_and_actor"
REQUEST = "request"  # the event's own request_id, never an id the host made up

ID = {"type": "string", "minLength": 1}
TEXT = {"type": "string", "minLength": 1}
DURATION = {"type": "integer", "minimum": 0, "description": "seconds; 0 is the platform's default"}
CHAT_TYPE = {"type": "string", "enum": ["person", "private", "group"]}


@dataclass(frozen=True)
class PlatformTool:
    name: str
    api: str
    risk: str  # read, write, dangerous
    description: str
    input_schema: dict[str, Any]
    patterns: tuple[str, ...] = ()  # event tools: the event types they fit (fnmatch, case-sensitive)
    target: str | None = None  # event tools: what they are frozen to

    @property
    def is_event_tool(self) -> bool:
        return self.name.startswith(EVENT_PREFIX)

    def fits(self, event_type: str) -> bool:
        return any(fnmatchcase(event_type, pattern) for pattern in self.patterns)


MEMBER_EVENTS = ("message.*", "group.member_*")

EVENT_TOOLS = (
    PlatformTool("event_reply", "send_message", "write",
                 "Reply in the conversation the event came from (its group, or the person). Your answer text is not sent unless you call this.",
                 object_schema(["text"], text=TEXT),
                 ("message.*", "friend.*", "group.*", "feedback.*", "interaction.submitted"), REPLY_TARGET),
    PlatformTool("event_delete_message", "delete_message", "dangerous", "Delete the message this event is about.",
                 object_schema([]), ("message.received", "message.edited"), CURRENT_MESSAGE),
    PlatformTool("event_get_actor", "get_user_info", "read", "Look up the person who caused this event.",
                 object_schema([]), ("*",), ACTOR),
    PlatformTool("event_get_group", "get_group_info", "read", "Look up the group this event happened in.",
                 object_schema([]), ("message.*", "group.*", "bot.invited_to_group", "bot.removed_from_group", "bot.muted", "bot.unmuted"), GROUP),
    PlatformTool("event_get_group_member", "get_group_member_info", "read", "Look up the event's person as a member of the event's group.",
                 object_schema([]), ("message.*", "group.*"), GROUP_AND_ACTOR),
    PlatformTool("event_mute_member", "mute_member", "dangerous", "Mute the event's person in the event's group for a while.",
                 object_schema([], duration=DURATION), MEMBER_EVENTS, GROUP_AND_ACTOR),
    PlatformTool("event_unmute_member", "unmute_member", "dangerous", "Lift the mute of the event's person in the event's group.",
                 object_schema([]), MEMBER_EVENTS, GROUP_AND_ACTOR),
    PlatformTool("event_kick_member", "kick_member", "dangerous", "Remove the event's person from the event's group.",
                 object_schema([]), MEMBER_EVENTS, GROUP_AND_ACTOR),
    PlatformTool("event_respond_friend_request", "approve_friend_request", "dangerous",
                 "Accept or refuse the friend request this event carries.",
                 object_schema(["approve"], approve={"type": "boolean"}, remark={"type": "string"}),
                 ("friend.request_received",), REQUEST),
    PlatformTool("event_respond_group_invite", "approve_group_invite", "dangerous",
                 "Accept or refuse the invitation to a group this event carries.",
                 object_schema(["approve"], approve={"type": "boolean"}), ("bot.invited_to_group",), REQUEST),
)

PLATFORM_TOOLS = (
    PlatformTool("platform_send_message", "send_message", "write", "Send a message to a person or a group.",
                 object_schema(["target_type", "target_id", "text"], target_type={"type": "string", "enum": ["person", "group"]},
                         target_id=ID, text=TEXT)),
    PlatformTool("platform_get_message", "get_message", "read", "Read one message of a chat.",
                 object_schema(["chat_type", "chat_id", "message_id"], chat_type=CHAT_TYPE, chat_id=ID, message_id=ID)),
    PlatformTool("platform_delete_message", "delete_message", "dangerous", "Delete one message of a chat.",
                 object_schema(["chat_type", "chat_id", "message_id"], chat_type=CHAT_TYPE, chat_id=ID, message_id=ID)),
    PlatformTool("platform_get_group_info", "get_group_info", "read", "Look up a group.", object_schema(["group_id"], group_id=ID)),
    PlatformTool("platform_get_group_list", "get_group_list", "read", "List the groups the bot is in.", object_schema([])),
    PlatformTool("platform_get_group_member_list", "get_group_member_list", "read", "List the members of a group.",
                 object_schema(["group_id"], group_id=ID)),
    PlatformTool("platform_get_group_member_info", "get_group_member_info", "read", "Look up one member of a group.",
                 object_schema(["group_id", "user_id"], group_id=ID, user_id=ID)),
    PlatformTool("platform_set_group_name", "set_group_name", "dangerous", "Rename a group.",
                 object_schema(["group_id", "name"], group_id=ID, name=TEXT)),
    PlatformTool("platform_mute_member", "mute_member", "dangerous", "Mute a member of a group for a while.",
                 object_schema(["group_id", "user_id"], group_id=ID, user_id=ID, duration=DURATION)),
    PlatformTool("platform_unmute_member", "unmute_member", "dangerous", "Lift the mute of a member of a group.",
                 object_schema(["group_id", "user_id"], group_id=ID, user_id=ID)),
    PlatformTool("platform_kick_member", "kick_member", "dangerous", "Remove a member from a group.",
                 object_schema(["group_id", "user_id"], group_id=ID, user_id=ID)),
    PlatformTool("platform_leave_group", "leave_group", "dangerous", "Make the bot leave a group.", object_schema(["group_id"], group_id=ID)),
    PlatformTool("platform_get_user_info", "get_user_info", "read", "Look up a person.", object_schema(["user_id"], user_id=ID)),
    PlatformTool("platform_get_friend_list", "get_friend_list", "read", "List the bot's friends.", object_schema([])),
)

CATALOGUE: dict[str, PlatformTool] = {tool.name: tool for tool in EVENT_TOOLS + PLATFORM_TOOLS}
assert {tool.api for tool in CATALOGUE.values()} == set(APIS)


def selects(patterns: list[str] | None, event_type: str) -> bool:
    """Whether an agent's `events` select an event type."""
    return any(fnmatchcase(event_type, pattern) for pattern in patterns or ())


def describe_tool(tool: PlatformTool) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": tool.name, "api": tool.api, "risk": tool.risk, "description": tool.description,
                           "input_schema": tool.input_schema}
    if tool.is_event_tool:
        doc.update(event_patterns=list(tool.patterns), target=tool.target,
                   produced_event_types=[t for t in EVENT_TYPES if tool.fits(t)],
                   unproduced_patterns=[p for p in tool.patterns if not any(fnmatchcase(t, p) for t in EVENT_TYPES)])
    return doc


def catalogue() -> dict[str, Any]:
    """`fw tool catalogue`: every tool, event tools apart from platform tools."""
    return {
        "event_tools": [describe_tool(t) for t in EVENT_TOOLS],
        "platform_tools": [describe_tool(t) for t in PLATFORM_TOOLS],
        "apis": list(APIS),
        "event_types": list(EVENT_TYPES),  # the types fw produces: the only ones an event of fw can have
    }


def check_agent_fields(definition: dict[str, Any], agent: str = "AGENT") -> None:
    """A write through fw names only event types that exist and platform tools of the
    catalogue (a file written by hand still loads; the projection reports what it names)."""

    for pattern in definition.get("events") or []:
        if not any(fnmatchcase(event_type, pattern) for event_type in EVENT_TYPES):
            suggestion = did_you_mean(pattern, EVENT_TYPES)
            raise FwError("invalid", f"events: {pattern!r} selects no event type",
                          hint_with(suggestion, f"use event types or patterns of: {', '.join(EVENT_TYPES)}"), field="events", **suggestion)
    for name in definition.get("allowed_platform_tools") or []:
        tool = CATALOGUE.get(name)
        if tool is not None and tool.is_event_tool:
            raise FwError("invalid", f"allowed_platform_tools: {name!r} is an event tool, offered by the events the agent selects",
                          f"list only platform_ tools here; it is offered on the events it fits: `fw agent edit {agent} --add-event {shlex.quote(tool.patterns[0])}`",
                          field="allowed_platform_tools")
        if tool is None:
            suggestion = did_you_mean(name, [t.name for t in PLATFORM_TOOLS])
            raise FwError("invalid", f"allowed_platform_tools: {name!r} is not a platform tool of the catalogue",
                          hint_with(suggestion, "see the platform tools with `fw tool catalogue`"), field="allowed_platform_tools", **suggestion)
