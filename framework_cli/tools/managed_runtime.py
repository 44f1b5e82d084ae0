"""The managed-runtime tools every managed run gets without a mount: its sessions, messages
and memory (CONTRACT section 7), and the session administration added to
`resource_management` (`harness_session_list`, `harness_session_end`).

Membership is checked on every call from the run's identity; no mount bypasses it. Memory
belongs to the run's identity. A run tied to a session that has ended may not act at all.
"""

from __future__ import annotations

from typing import Any

from ..domain.tool_types import NAME, Caller, Tool, object_schema
from ..errors import FwError
from ..home.store import Home
from ..runtime import sessions
from .registry import MANAGED_RUNTIME, RUN_CALL_CHECKS, register

RM = "resource_management"
KEY = {"type": "string", "minLength": 1, "maxLength": 200}


def _identity(caller: Caller) -> str:
    if caller.is_manager or caller.run is None or caller.run.get("mode") != "managed":
        raise FwError("denied", "sessions, messages and memory are for managed runs", "start a managed run: `fw run start --principal P`")
    return caller.run["identity"]


def _own_sessions(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    listed = sessions.session_list(home, member=_identity(caller))["sessions"]
    return {"sessions": [{k: s[k] for k in ("name", "title", "members", "status")} for s in listed]}


def _create_session(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    me = _identity(caller)
    return sessions.session_create(home, a["name"], [me, *a["members"]], a.get("title"), created_by=me)


def _send(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    run = caller.run or {}
    hop = int(run.get("hop", 0)) + 1  # an agent's message: one hop past the message that started its run
    doc = sessions.message_post(home, a["session"], _identity(caller), a["text"], hop=hop, run_id=run.get("run_id"))
    return {"message": doc["message"]}


def _list_messages(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    doc = sessions.message_list(home, a["session"], a.get("limit"), reader=_identity(caller))
    return {"messages": doc["messages"]}


def _harness_sessions(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    listed = sessions.session_list(home)["sessions"]
    return {"sessions": [{k: s[k] for k in ("name", "title", "members", "status", "messages")} for s in listed]}


register(
    Tool("session_list", MANAGED_RUNTIME, "read", "List the sessions you are a member of.", object_schema([]), _own_sessions),
    Tool("session_create", MANAGED_RUNTIME, "write",
         "Create a session with these members (principal names); you become a member too.",
         object_schema(["name", "members"], name=NAME, members={"type": "array", "items": NAME}, title={"type": "string", "maxLength": 200}),
         _create_session),
    Tool("message_send", MANAGED_RUNTIME, "write",
         "Post a message to a session you are a member of. @name mentions a member, who may then answer.",
         object_schema(["session", "text"], session=NAME, text={"type": "string", "minLength": 1, "maxLength": 65536}), _send),
    Tool("message_list", MANAGED_RUNTIME, "read", "Read the messages of a session you are a member of, oldest first.",
         object_schema(["session"], session=NAME, limit={"type": "integer", "minimum": 1}), _list_messages),
    Tool("memory_write", MANAGED_RUNTIME, "write", "Remember a value (any JSON) under a key, for your later runs.",
         object_schema(["key", "value"], key=KEY, value={}), lambda h, c, a: sessions.memory_write(h, _identity(c), a["key"], a["value"])),
    Tool("memory_read", MANAGED_RUNTIME, "read", "Read what you remembered under a key.",
         object_schema(["key"], key=KEY), lambda h, c, a: sessions.memory_read(h, _identity(c), a["key"])),
    Tool("memory_list", MANAGED_RUNTIME, "read", "List the keys you remembered, optionally those starting with a prefix.",
         object_schema([], prefix={"type": "string"}), lambda h, c, a: {"keys": sessions.memory_list(h, _identity(c), a.get("prefix"))["keys"]}),
    Tool("memory_delete", MANAGED_RUNTIME, "write", "Forget what you remembered under a key.",
         object_schema(["key"], key=KEY), lambda h, c, a: sessions.memory_delete(h, _identity(c), a["key"])),
    Tool("harness_session_list", RM, "read",
         "List every session: name, title, members, status and message count (no message content).",
         object_schema([]), _harness_sessions),
    Tool("harness_session_end", RM, "dangerous",
         "End a session: no further message may be posted, and no run tied to it may act.",
         object_schema(["session"], session=NAME), lambda h, c, a: sessions.session_end(h, a["session"])),
)


def _session_still_open(home: Home, run: dict[str, Any], name: str, args: dict[str, Any]) -> None:
    """A run tied to a session acts only while the session is open."""
    session = run.get("session")
    if session and not sessions.session_is_open(home, session):
        raise FwError("session_ended", f"session {session!r} has ended; run {run['run_id']} may not act", "nothing was changed")


RUN_CALL_CHECKS.append(_session_still_open)
