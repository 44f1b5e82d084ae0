"""The events a bot server has taken and not yet run: a durable queue in `state.db`.

`fw bot serve` writes each event its bot's principal takes here (`enqueue`), in the transaction
that de-duplicates it, then answers the platform; its engine runs them (engine/events.py), one
at a time per conversation (a bot and a group, or a bot and one user in private), in arrival
order. An event waits here, never dropped, however many are in flight; one still waiting when
its server stops is run by the next server of that bot, unless it is older than EXPIRE_SECONDS
(then it is `expired`: an answer that late would only confuse the group).

Statuses: `pending`, `running`, `done`, `failed`, `cancelled` (its server stopped during its
run), `expired`, `refused` (the principal no longer takes it when its turn comes: the binding
disabled, the agent's events changed).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from ..state.store import StateStore, now_iso

PENDING, RUNNING, DONE, FAILED, CANCELLED, EXPIRED, REFUSED = "pending", "running", "done", "failed", "cancelled", "expired", "refused"
EXPIRE_SECONDS = 600.0
KEEP_SECONDS = 7 * 86400.0  # ended events are forgotten after a week


def conversation_of(bot: str, event: dict[str, Any]) -> str:
    """The conversation an event belongs to: the bot and its group, or the bot and the person
    (a temporary chat through a group is a private one)."""
    group = (event.get("group") or {}).get("id")
    if group:
        return f"{bot}/group/{group}"
    return f"{bot}/user/{(event.get('actor') or {}).get('id')}"


def stamp(seconds_from_now: float = 0.0) -> str:
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds_from_now)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def enqueue(store: StateStore, bot: str, principal: str, event: dict[str, Any]) -> int:
    """Queue an event the bot's principal takes, inside the caller's transaction: its id."""
    return store.insert("bot_events", {"bot": bot, "conversation": conversation_of(bot, event), "principal": principal,
                                       "event": json.dumps(event, ensure_ascii=False), "status": PENDING,
                                       "received_at": now_iso()})


def expire(store: StateStore, bots: list[str], since: str) -> int:
    """Mark `expired` the bots' events that a server before the one started at `since` left
    waiting, once they are older than EXPIRE_SECONDS; how many. (Events that wait that long in
    a serving server are still run: it is busy, not gone.)"""
    if not bots:
        return 0
    before = min(stamp(-EXPIRE_SECONDS), since)
    marks = ", ".join("?" for _ in bots)
    with store.transaction():
        return int(store.execute(
            f"UPDATE bot_events SET status = ?, error = ?, ended_at = ? WHERE status = ? AND received_at < ? AND bot IN ({marks})",
            (EXPIRED, f"it waited more than {EXPIRE_SECONDS / 60:g} minutes for a server of its bot; not run", now_iso(), PENDING,
             before, *bots)).rowcount)


def forget_bot(store: StateStore, bot: str) -> int:
    """A bot removed: its waiting events are `cancelled` (a bot added again under its name
    does not answer them); how many."""
    with store.transaction():
        return int(store.execute("UPDATE bot_events SET status = ?, error = ?, ended_at = ? WHERE bot = ? AND status = ?",
                                 (CANCELLED, "its bot was removed", now_iso(), bot, PENDING)).rowcount)


def forget_old(store: StateStore) -> None:
    with store.transaction():
        store.execute("DELETE FROM bot_events WHERE status NOT IN (?, ?) AND ended_at < ?", (PENDING, RUNNING, stamp(-KEEP_SECONDS)))


def waiting(store: StateStore, bots: list[str] | None = None) -> int:
    """How many events wait (of these bots; of all)."""
    if bots is None:
        return int(store.one("SELECT COUNT(*) AS n FROM bot_events WHERE status = ?", (PENDING,))["n"])  # type: ignore[index]
    if not bots:
        return 0
    marks = ", ".join("?" for _ in bots)
    return int(store.one(f"SELECT COUNT(*) AS n FROM bot_events WHERE status = ? AND bot IN ({marks})", (PENDING, *bots))["n"])  # type: ignore[index]


def waiting_of(store: StateStore, principal: str) -> int:
    return int(store.one("SELECT COUNT(*) AS n FROM bot_events WHERE status = ? AND principal = ?", (PENDING, principal))["n"])  # type: ignore[index]


def event_of(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row["event"])  # type: ignore[no-any-return]
