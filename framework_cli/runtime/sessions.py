"""Sessions, messages, turns and memory: where managed agents are mentioned and answer.

A session has principals as members. A message creates, in its own transaction, a turn for
each member of kind agent that has a binding, other than its author: under policy
`mentioned` only when the message mentions it, under `all` for every message of a person
(a user or the manager); a message an agent wrote starts turns only for the members it
mentions, whatever their policy, so agents under `all` never answer each other's answers
in a storm. `pending` when the binding is enabled, `backlog` when it is disabled.
`fw dispatch` runs pending turns.

These are the one implementation of each job: the operator commands and the managed-runtime
tools call them alike; what differs (who the author is, membership checks) is a parameter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..domain.deletion import mismatch, parse_confirm
from ..domain.identities import agent_bindings_of, agent_set_enabled, get_principal, no_principal
from ..errors import FwError
from ..home import secrets
from ..home.kinds import check_name
from ..home.store import Home
from ..state.store import STATE_FILE, StateStore, now_iso, state_exists
from ..suggest import did_you_mean, hint_with, plural
from . import lanes, work

MAX_HOP = 8  # a message at this hop or more starts no turn: chains of agents answering agents end
MENTION = re.compile(r"(?<![\w@.])@([a-z0-9][a-z0-9_-]{0,62})")
OPEN, ENDED = "open", "ended"
PENDING, BACKLOG, RUNNING, DONE, FAILED, CANCELLED = "pending", "backlog", "running", "done", "failed", "cancelled"
MAX_MEMORY_VALUE = 64 * 1024


def store_for(home: Home) -> StateStore:
    return StateStore.open(home)


# -- sessions ---------------------------------------------------------------------------------
def _session(store: StateStore, name: str) -> dict[str, Any]:
    check_name(name, "session name")
    row = store.one("SELECT * FROM sessions WHERE name = ?", (name,))
    if row is None:
        suggestion = did_you_mean(name, [r["name"] for r in store.all("SELECT name FROM sessions")])
        raise FwError("not_found", f"no session named {name!r}", hint_with(suggestion, "see them with `fw session list`"), **suggestion)
    return row


def _members(store: StateStore, name: str) -> list[str]:
    return [r["principal"] for r in store.all("SELECT principal FROM members WHERE session = ? ORDER BY joined_at, principal", (name,))]


def present_session(store: StateStore, row: dict[str, Any]) -> dict[str, Any]:
    count = store.one("SELECT count(*) AS n FROM messages WHERE session = ?", (row["name"],))["n"]  # type: ignore[index]
    return {
        "name": row["name"],
        "title": row["title"],
        "members": _members(store, row["name"]),
        "status": row["status"],
        "created_by": row["created_by"],
        "created_at": row["created_at"],
        "ended_at": row["ended_at"],
        "messages": count,
    }


def _require_principal(home: Home, name: str) -> dict[str, Any]:

    check_name(name, "principal name")
    who = get_principal(home, name)
    if who is None:
        raise no_principal(home, name, f"create it first: {create_principal_command(name)}")
    return who


def create_principal_command(name: str) -> str:
    """The command that creates a session member: an agent, as members that answer are."""
    return f"`fw principal create {name} --kind agent` (or --kind user, for a person)"


def require_principal(home: Home, name: str) -> dict[str, Any]:
    """A principal that exists, or `not_found` with the closest name."""
    check_name(name, "principal name")
    who = get_principal(home, name)
    if who is None:
        raise no_principal(home, name, "see them with `fw principal list`")
    return who


def session_create(home: Home, name: str, members: list[str], title: str | None = None, created_by: str = "operator") -> dict[str, Any]:
    check_name(name, "session name")
    secrets.refuse(home, {"name": name, "title": title})
    wanted = list(dict.fromkeys(members))
    for member in wanted:
        _require_principal(home, member)
    with store_for(home) as store, store.transaction():
        if store.one("SELECT name FROM sessions WHERE name = ?", (name,)):
            raise FwError("exists", f"session {name!r} already exists", "pick another name, or see `fw session list`")
        now = now_iso()
        store.insert("sessions", {"name": name, "title": title, "status": OPEN, "created_by": created_by, "created_at": now})
        for member in wanted:
            store.insert("members", {"session": name, "principal": member, "joined_at": now})
        return {"session": present_session(store, _session(store, name))}


def session_list(home: Home, member: str | None = None) -> dict[str, Any]:
    """Every session, or only those `member` belongs to."""
    with store_for(home) as store:
        if member is None:
            rows = store.all("SELECT * FROM sessions ORDER BY created_at, name")
        else:
            rows = store.all(
                "SELECT s.* FROM sessions s JOIN members m ON m.session = s.name WHERE m.principal = ? ORDER BY s.created_at, s.name",
                (member,),
            )
        return {"sessions": [present_session(store, r) for r in rows]}


def session_show(home: Home, name: str) -> dict[str, Any]:
    with store_for(home) as store:
        doc = present_session(store, _session(store, name))
        doc["turns"] = store.all(
            "SELECT id, principal, status, message_id, hop, run_id, error FROM turns WHERE session = ? ORDER BY id", (name,)
        )
        return {"session": doc}


def session_end(home: Home, name: str) -> dict[str, Any]:
    """End a session: no message may be posted to it and no run tied to it may act; its
    pending and backlog turns are cancelled. Ending an ended session changes nothing."""
    with store_for(home) as store, store.transaction():
        row = _session(store, name)
        cancelled = 0
        if row["status"] == OPEN:
            store.execute("UPDATE sessions SET status = ?, ended_at = ? WHERE name = ?", (ENDED, now_iso(), name))
            cancelled = store.execute(
                "UPDATE turns SET status = ?, error = ?, ended_at = ? WHERE session = ? AND status IN (?, ?)",
                (CANCELLED, "session_ended", now_iso(), name, PENDING, BACKLOG),
            ).rowcount
            store.execute(
                "UPDATE tasks SET status = ?, error = ?, ended_at = ? WHERE session = ? AND status IN (?, ?)",
                (CANCELLED, "session_ended", now_iso(), name, PENDING, BACKLOG),
            )
        return {"session": present_session(store, _session(store, name)), "cancelled_turns": cancelled}


def session_add_member(home: Home, name: str, principal: str) -> dict[str, Any]:
    _require_principal(home, principal)
    with store_for(home) as store, store.transaction():
        row = _open_session(store, name)
        if principal not in _members(store, name):
            store.insert("members", {"session": name, "principal": principal, "joined_at": now_iso()})
        return {"session": present_session(store, row)}


def _open_session(store: StateStore, name: str) -> dict[str, Any]:
    row = _session(store, name)
    if row["status"] != OPEN:
        members = ",".join(_members(store, name)) or "P"
        raise FwError("session_ended", f"session {name!r} has ended",
                      f"start a new one with the same members: `fw session create {name}-2 --member {members}` (any new name)")
    return row


def session_is_open(home: Home, name: str) -> bool:
    with store_for(home) as store:
        row = store.one("SELECT status FROM sessions WHERE name = ?", (name,))
    return row is not None and row["status"] == OPEN


# -- messages and turns -----------------------------------------------------------------------
def mentions_in(text: str, members: list[str]) -> list[str]:
    """The members a text mentions with @name, each once, in the order they first appear."""
    found = [m for m in MENTION.findall(text) if m in members]
    return list(dict.fromkeys(found))


def _present_message(row: dict[str, Any], decode: Callable[[str], Any] = json.loads) -> dict[str, Any]:
    return {
        "id": row["id"],
        "session": row["session"],
        "author": row["author"],
        "text": row["text"],
        "mentions": decode(row["mentions"]),
        "hop": row["hop"],
        "created_at": row["created_at"],
    }


def message_post(home: Home, session: str, author: str, text: str, *, hop: int = 0, run_id: str | None = None,
                 answers: Claim | None = None) -> dict[str, Any]:
    """Post a message as a member and create its turns, in one transaction. With `answers`
    (a dispatcher's claim on the turn the message answers) that turn becomes `done` and its
    lane is given back in the same transaction, and only if the claim still holds: a turn is
    answered once, and is `done` exactly when its answer was posted. `not_members`: the
    principals it mentions that are not members of the session (they get no turn)."""
    if not isinstance(text, str) or not text.strip():
        raise FwError("invalid", "a message needs some text", "e.g. fw message post SESSION --as alice 'hello @ops'")
    secrets.refuse(home, {"text": text})
    with store_for(home) as store, store.transaction():
        _open_session(store, session)
        members = _members(store, session)
        _require_author(home, members, author, session)
        audience, agents = agent_bindings_of(home, members)  # inside the transaction: an enable cannot slip between
        if answers is not None:
            _close_claimed_turn(store, answers)
        mentions = mentions_in(text, members)
        message_id = store.insert("messages", {
            "session": session, "author": author, "text": text, "mentions": json.dumps(mentions),
            "hop": hop, "run_id": run_id, "created_at": now_iso(),
        })
        turns = _create_turns(store, session, message_id, author, members, mentions, hop, audience, author in agents)
        message = _present_message(store.one("SELECT * FROM messages WHERE id = ?", (message_id,)))  # type: ignore[arg-type]
    if turns:
        work.changed()
    outsiders = [name for name in dict.fromkeys(MENTION.findall(text))
                 if name not in members and home.exists(f"principals/{name}.yaml")]
    return {"message": message, "turns": turns, **({"not_members": outsiders} if outsiders else {})}


@dataclass(frozen=True)
class Claim:
    """A dispatcher's hold on a running turn or task: its id, the dispatcher, which claim of it
    this is (a turn taken back from a dead dispatcher is claimed anew), and the lane it holds
    with its fence (a holder presumed dead finds the fence raised by the next)."""

    id: int
    owner: str
    attempts: int
    lane: str | None = None
    fence: int | None = None

    def where(self) -> tuple[str, tuple[Any, ...]]:
        """The SQL condition (and its parameters) that the claim still holds: checked by every
        write of the work's results."""
        where, params = "id = ? AND status = ? AND owner = ? AND attempts = ?", (self.id, RUNNING, self.owner, self.attempts)
        if self.lane is None:
            return where, params
        return (f"{where} AND EXISTS (SELECT 1 FROM lanes WHERE lane = ? AND owner = ? AND fence = ?)",
                (*params, self.lane, self.owner, self.fence))

    def give_back_lane(self, store: StateStore) -> None:
        """Free the claim's lane, if it still holds it: in the transaction that records how the
        work ended, so that its principal's next work may start as soon as that is written."""
        if self.lane is not None and self.fence is not None:
            lanes.give_back(store, self.lane, self.owner, self.fence)


def _close_claimed_turn(store: StateStore, claim: Claim) -> None:
    where, params = claim.where()
    if not store.execute(f"UPDATE turns SET status = ?, error = NULL, ended_at = ? WHERE {where}", (DONE, now_iso(), *params)).rowcount:
        raise FwError("conflict", f"turn {claim.id} is no longer held by this dispatcher", "its answer was not posted")
    claim.give_back_lane(store)


def _require_member(members: list[str], principal: str, session: str) -> None:
    if principal not in members:
        raise FwError("denied", f"{principal!r} is not a member of session {session!r}",
                      f"add it first: `fw session add-member {session} {principal}`")


def _require_author(home: Home, members: list[str], author: str, session: str) -> None:
    """The author of a message is a member; one that is not is told apart from a name that
    names no principal (a typo of a member's name, most often)."""
    if author in members:
        return
    suggestion = did_you_mean(author, members)
    check_name(author, "principal name")
    if get_principal(home, author) is None:
        add = f"`fw session add-member {session} {author}`"
        hint = hint_with(suggestion, f"create it first: `fw principal create {author} --kind user`, then add it: {add}")
        raise FwError("not_found", f"no principal named {author!r}", hint, **suggestion)
    raise FwError("denied", f"{author!r} is not a member of session {session!r}",
                  hint_with(suggestion, f"add it first: `fw session add-member {session} {author}`"), **suggestion)


def _create_turns(store: StateStore, session: str, message_id: int, author: str, members: list[str],
                  mentions: list[str], hop: int, audience: dict[str, dict[str, Any]], by_agent: bool) -> list[dict[str, Any]]:
    if hop >= MAX_HOP:
        return []
    turns = []
    for member in members:
        binding = audience.get(member)
        if member == author or binding is None:
            continue
        if (by_agent or binding["policy"] == "mentioned") and member not in mentions:
            continue
        status = PENDING if binding["enabled"] else BACKLOG
        turn_id = store.insert("turns", {"session": session, "message_id": message_id, "principal": member,
                                         "status": status, "hop": hop, "created_at": now_iso()})
        turns.append({"id": turn_id, "principal": member, "status": status})
    return turns


def _checked_limit(limit: Any) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise FwError("invalid", "limit must be a whole number, at least 1", "e.g. --limit 20")
    return None if limit is not None and limit > 2**31 else limit  # more than can exist: every message


class MessageRows:
    """A session's messages, oldest first, read from state.db as they are iterated: a
    session of any length is listed in the memory of one batch."""

    def __init__(self, store: StateStore, session: str, limit: int | None) -> None:
        self.store, self.session, self.limit = store, session, limit

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.limit is None:
            sql, params = "SELECT * FROM messages WHERE session = ? ORDER BY id", (self.session,)
        else:
            sql = "SELECT * FROM (SELECT * FROM messages WHERE session = ? ORDER BY id DESC LIMIT ?) AS last ORDER BY id"
            params = (self.session, self.limit)
        decoded: dict[str, Any] = {}  # a session's messages mention the same few members: decode each list once

        def mentions(raw: str) -> Any:
            if raw not in decoded:
                if len(decoded) > 4096:
                    decoded.clear()
                decoded[raw] = json.loads(raw)
            value = decoded[raw]
            return list(value) if isinstance(value, list) else value  # each message its own list

        for row in self.store.rows(sql, params):
            try:
                yield _present_message(row, mentions)
            except (TypeError, ValueError):
                raise FwError("corrupt", f"{STATE_FILE}: message {row.get('id')} of session {self.session!r} is damaged",
                              f"move {STATE_FILE} aside to start with an empty runtime state", path=STATE_FILE) from None

    def author_width(self) -> int:
        """The length of the longest author's name, to align a log's columns before it is read."""
        row = self.store.one("SELECT max(length(author)) AS width FROM messages WHERE session = ?", (self.session,))
        return int((row or {}).get("width") or 0)


@contextmanager
def message_stream(home: Home, session: str, limit: int | None = None, reader: str | None = None) -> Iterator[MessageRows]:
    """The messages of a session, oldest first (the last `limit` of them), to be read while
    the store is open. Everything that can be refused (the limit, the session, a `reader`
    who is not a member) is checked before the first message is read."""
    limit = _checked_limit(limit)
    with store_for(home) as store:
        _session(store, session)
        if reader is not None:
            _require_member(_members(store, session), reader, session)
        yield MessageRows(store, session, limit)


def message_list(home: Home, session: str, limit: int | None = None, reader: str | None = None) -> dict[str, Any]:
    """The messages of a session, oldest first (the last `limit` of them). A `reader` must
    be a member."""
    with message_stream(home, session, limit, reader) as messages:
        return {"session": session, "messages": list(messages)}


# -- the bindings' backlog --------------------------------------------------------------------
def binding_changed(home: Home, principal: str, enabled: bool, by_identity: str | None = None) -> dict[str, int]:
    """Apply a binding's new state to its turns. Enabled: its backlog in open sessions it is
    still a member of becomes pending. Disabled by its own run: its other pending turns are
    cancelled; disabled otherwise: they wait in the backlog."""
    if not state_exists(home):
        return {"released": 0, "cancelled": 0, "held": 0}
    with store_for(home) as store, store.transaction():
        if enabled:
            released = store.execute(
                "UPDATE turns SET status = ? WHERE principal = ? AND status = ? AND session IN "
                "(SELECT s.name FROM sessions s JOIN members m ON m.session = s.name WHERE s.status = ? AND m.principal = ?)",
                (PENDING, principal, BACKLOG, OPEN, principal),
            ).rowcount
            released += store.execute(
                "UPDATE tasks SET status = ? WHERE principal = ? AND status = ? AND "
                "(session IS NULL OR session IN (SELECT name FROM sessions WHERE status = ?))",
                (PENDING, principal, BACKLOG, OPEN),
            ).rowcount
            return {"released": released, "cancelled": 0, "held": 0}
        if by_identity == principal:
            cancelled = 0
            for table in ("turns", "tasks"):
                cancelled += store.execute(
                    f"UPDATE {table} SET status = ?, error = ?, ended_at = ? WHERE principal = ? AND status IN (?, ?)",
                    (CANCELLED, "its binding was disabled by its own run", now_iso(), principal, PENDING, BACKLOG),
                ).rowcount
            return {"released": 0, "cancelled": cancelled, "held": 0}
        held = sum(
            store.execute(f"UPDATE {table} SET status = ? WHERE principal = ? AND status = ?", (BACKLOG, principal, PENDING)).rowcount
            for table in ("turns", "tasks")
        )
        return {"released": 0, "cancelled": 0, "held": held}


def set_binding_enabled(home: Home, principal: str, enabled: bool, by_identity: str | None = None,
                        by: str | None = None) -> dict[str, Any]:
    """`fw binding enable|disable` and `agent_set_enabled`: the binding, then its turns.
    `by_identity` is the run's identity that asked (None: the Manager, or a person); `by` is
    who is noted as having turned it on or off."""

    doc = agent_set_enabled(home, principal, enabled, by or (f"{by_identity} (run)" if by_identity else None))
    doc["turns"] = binding_changed(home, principal, enabled, by_identity)
    if doc["turns"]["released"]:
        work.changed()  # after the commit: a dispatcher woken now sees the released work
    return doc


# -- memory -----------------------------------------------------------------------------------
def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key or len(key) > 200 or any(c in key for c in "\x00\n\r"):
        raise FwError("invalid", "a memory key is 1 to 200 characters on one line", "e.g. preferences/tone")
    return key


def memory_write(home: Home, principal: str, key: str, value: Any) -> dict[str, Any]:
    _check_key(key)
    secrets.refuse(home, {"key": key, "value": value})
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > MAX_MEMORY_VALUE:
        raise FwError("invalid", f"a memory value is at most {MAX_MEMORY_VALUE} bytes of JSON", "store less, or split it over keys")
    with store_for(home) as store, store.transaction():
        store.execute(
            "INSERT INTO memory (principal, key, value, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (principal, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            (principal, key, text, now_iso()),
        )
    return {"key": key, "value": value}


def memory_read(home: Home, principal: str, key: str) -> dict[str, Any]:
    _check_key(key)
    with store_for(home) as store:
        row = store.one("SELECT value FROM memory WHERE principal = ? AND key = ?", (principal, key))
    if row is None:
        raise _no_memory(store_keys(home, principal), principal, key)
    return {"key": key, "value": json.loads(row["value"])}


def store_keys(home: Home, principal: str) -> list[str]:
    with store_for(home) as store:
        return [r["key"] for r in store.all("SELECT key FROM memory WHERE principal = ? ORDER BY key", (principal,))]


def _no_memory(keys: list[str], principal: str, key: str) -> FwError:
    suggestion = did_you_mean(key, keys)
    return FwError("not_found", f"no memory {key!r} for {principal!r}",
                   hint_with(suggestion, f"list the keys with `fw memory list {principal}`"), **suggestion)


def memory_list(home: Home, principal: str, prefix: str | None = None) -> dict[str, Any]:
    with store_for(home) as store:
        rows = store.all("SELECT key FROM memory WHERE principal = ? ORDER BY key", (principal,))
    keys = [r["key"] for r in rows if prefix is None or r["key"].startswith(prefix)]
    return {"principal": principal, "keys": keys}


def memory_delete(home: Home, principal: str, key: str) -> dict[str, Any]:
    _check_key(key)
    with store_for(home) as store, store.transaction():
        deleted = store.execute("DELETE FROM memory WHERE principal = ? AND key = ?", (principal, key)).rowcount
    if not deleted:
        raise _no_memory(store_keys(home, principal), principal, key)
    return {"key": key, "deleted": True}


# -- deleting a session: plan, then exact confirmation, as deletes are --------------------------
def session_delete(home: Home, name: str, confirm: str | None = None) -> dict[str, Any]:
    """Without `confirm`, the plan (the session, with how many messages and turns go with it)
    and nothing deleted; with `confirm` equal to the plan's item, the session, its members,
    messages and turns are deleted. A session with a running turn is blocked (end it, let the
    turn finish, then delete)."""
    item = f"session/{name}"
    with store_for(home) as store, store.transaction():
        _session(store, name)
        count = {table: store.one(f"SELECT count(*) AS n FROM {table} WHERE session = ?", (name,))["n"]  # type: ignore[index]
                 for table in ("messages", "turns")}
        running = store.one("SELECT count(*) AS n FROM turns WHERE session = ? AND status = ?", (name, RUNNING))["n"]  # type: ignore[index]
        blocked = [{"item": item, "reason": "running", "detail": f"{plural(running, 'turn')} running"}] if running else []
        plan = {"status": "plan", "plan": [item], "blocked": blocked, "messages": count["messages"], "turns": count["turns"], "confirm": item}
        if confirm is None:
            return plan
        given = parse_confirm(confirm)
        if given != [item]:
            raise mismatch(given, item, [item], blocked, f"fw session delete {name} --confirm {item}", kinds=("session",))
        if blocked:
            raise FwError("protected", f"session {name!r} has {plural(running, 'running turn')}",
                          f"end it first (`fw session end {name}`), let the turn finish, then delete it", blocked=blocked)
        for table in ("turns", "messages", "members"):
            store.execute(f"DELETE FROM {table} WHERE session = ?", (name,))
        store.execute("UPDATE tasks SET status = ?, error = ?, ended_at = ? WHERE session = ? AND status IN (?, ?)",
                      (CANCELLED, "session_deleted", now_iso(), name, PENDING, BACKLOG))
        store.execute("DELETE FROM sessions WHERE name = ?", (name,))
        return {"status": "deleted", "deleted": [item], "messages": count["messages"], "turns": count["turns"]}
