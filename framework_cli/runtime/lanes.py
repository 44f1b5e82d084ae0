"""Lanes: one row a principal (its turns and tasks) and a conversation (a bot's event runs in
one group, or with one person), so that their work runs one piece at a time, in order, across
threads, processes and hosts.

A lane is taken in a short transaction by the process that will run its next piece of work,
with a lease it renews while the work runs (`renew`), and a fence number that every new holder
raises: a holder presumed dead that comes back finds its fence gone and writes nothing more.
No transaction stays open while the work runs. A free lane has no owner; a lane whose owner
died is freed by `free_lanes_of`, once that owner's work was taken back. The SQL is one dialect
for SQLite and PostgreSQL: the store says how to lock a row (`skip_locked`).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

LEASE_SECONDS = 30.0  # how long a lane is held without a renewal


def principal_lane(principal: str) -> str:
    return f"principal:{principal}"


def conversation_lane(conversation: str) -> str:
    return f"conversation:{conversation}"


def stamp(seconds_from_now: float = 0.0) -> str:
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds_from_now)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def take(store: Any, lane: str, owner: str) -> int | None:
    """Hold `lane` for `owner` if no one holds it, inside the caller's transaction: its new
    fence; None when another holds it (or has the row locked this moment)."""
    row = store.one(f"SELECT owner, fence FROM lanes WHERE lane = ?{store.skip_locked}", (lane,))
    if row is None:
        if store.execute("INSERT INTO lanes (lane, owner, lease_until, fence) VALUES (?, ?, ?, 1) ON CONFLICT DO NOTHING",
                         (lane, owner, stamp(LEASE_SECONDS))).rowcount:
            return 1
        return None  # taken by another this very moment
    if row["owner"] is not None and row["owner"] != owner:
        return None
    fence = int(row["fence"]) + 1
    store.execute("UPDATE lanes SET owner = ?, lease_until = ?, fence = ? WHERE lane = ?", (owner, stamp(LEASE_SECONDS), fence, lane))
    return fence


def held(store: Any, lane: str, owner: str, fence: int) -> bool:
    """Whether `owner` still holds `lane` with `fence`: every write of the work's results checks it."""
    return store.one("SELECT 1 AS yes FROM lanes WHERE lane = ? AND owner = ? AND fence = ?", (lane, owner, fence)) is not None


def give_back(store: Any, lane: str, owner: str, fence: int) -> None:
    """Free the lane, if it is still this holder's (a holder presumed dead frees nothing)."""
    store.execute("UPDATE lanes SET owner = NULL, lease_until = NULL WHERE lane = ? AND owner = ? AND fence = ?", (lane, owner, fence))


def renew(store: Any, owner: str) -> int:
    """Renew the lease of every lane `owner` holds; how many."""
    with store.transaction():
        return int(store.execute("UPDATE lanes SET lease_until = ? WHERE owner = ?", (stamp(LEASE_SECONDS), owner)).rowcount)


def free_lanes_of(store: Any, owners: set[str]) -> None:
    """Free the lanes of owners found dead (their work was taken back first)."""
    for owner in owners:
        store.execute("UPDATE lanes SET owner = NULL, lease_until = NULL WHERE owner = ?", (owner,))


def held_lanes(store: Any) -> list[dict[str, Any]]:
    """Every lane held now: `lane`, `owner`, `lease_until`, `fence` (`fw state check`, `fw status`)."""
    return store.all("SELECT lane, owner, lease_until, fence FROM lanes WHERE owner IS NOT NULL ORDER BY lane")
