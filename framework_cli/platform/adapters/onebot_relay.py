"""The actions of a reverse-WebSocket OneBot bot sent from a process that does not hold its
socket: through the holder, its *owner*, by way of the store.

One process at a time holds a bot's socket and owns the bot: `onebot_owner` names it, with an
epoch that grows each time another process (on this host or, with PostgreSQL, another one)
accepts the bot's socket. Any other process that must act on the bot (a run dispatched on
another host, `fw tool call` beside `fw bot serve`) writes the action into `onebot_outbox` and
wakes the owner (PostgreSQL's `NOTIFY`; with SQLite the owner looks every 0.1 s). The owner
sends the bot's waiting actions on its socket one at a time, oldest first, so they are answered
in the order they were asked, and writes each answer into the row, which the asker reads.

- An action not yet taken when its asker stops waiting is marked `expired` and never sent.
- An owner claims an action only while the owner row still names it with its epoch (a fence):
  an owner presumed dead that comes back sends nothing more.
- A new owner fails what an old one had taken and not answered (it may or may not have gone
  out: it is never sent twice), then sends what waits.

Rows hold no secret: an answer is redacted before it is kept. Answered rows are dropped after
an hour.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from ...errors import FwError
from ...home import secrets
from ...home.store import Home
from ...state.store import StateStore, now_iso

OUTBOX_CHANNEL = "fw_onebot_outbox"
KEEP_SECONDS = 3600  # answered, failed and expired actions kept this long
WAIT_SECONDS = 30.0  # how long an asker waits for an action to be taken (the adapter's ACTION_TIMEOUT)
# An action still `pending` this long after it was asked has no asker left (it was killed): it is
# never sent. One still `sending` this long was taken by an owner that died or lost track of it.
PENDING_STALE_SECONDS = WAIT_SECONDS + 5
SENDING_STALE_SECONDS = 2 * WAIT_SECONDS + 10
Failure = Callable[[str, str], FwError]


# -- the owner ---------------------------------------------------------------------------------
def take_ownership(store: StateStore, bot: str, owner: str) -> int:
    """`owner` now holds the bot's socket: it owns the bot with the next epoch. What an earlier
    owner had taken and not answered fails (it may have gone out; it is not sent again)."""
    now = now_iso()
    with store.transaction():
        row = store.one("SELECT epoch FROM onebot_owner WHERE bot = ?", (bot,))
        epoch = (int(row["epoch"]) if row else 0) + 1
        if row is None:
            store.insert("onebot_owner", {"bot": bot, "owner": owner, "epoch": epoch, "seen_at": now})
        else:
            store.execute("UPDATE onebot_owner SET owner = ?, epoch = ?, seen_at = ? WHERE bot = ?", (owner, epoch, now, bot))
        store.execute("UPDATE onebot_outbox SET status = 'failed', answered_at = ?, error = ? WHERE bot = ? AND status = 'sending'",
                      (now, "the process that held the bot's socket stopped before the action was answered; it may or may "
                       "not have been done", bot))
    return epoch


def release_ownership(store: StateStore, bot: str, owner: str, epoch: int) -> None:
    """`owner` holds no socket of the bot any more (unless another took it since)."""
    with store.transaction():
        store.execute("DELETE FROM onebot_owner WHERE bot = ? AND owner = ? AND epoch = ?", (bot, owner, epoch))


def owner_of(store: StateStore, bot: str) -> dict[str, Any] | None:
    return store.one("SELECT owner, epoch, seen_at FROM onebot_owner WHERE bot = ?", (bot,))


def claim_next(store: StateStore, bot: str, owner: str, epoch: int) -> dict[str, Any] | None:
    """The bot's oldest waiting action, taken by its owner (`sending`); None when none waits or
    `owner` is no longer the owner of that epoch (fenced off)."""
    if store.one("SELECT id FROM onebot_outbox WHERE bot = ? AND status = 'pending' LIMIT 1", (bot,)) is None:
        return None  # nothing waits: no write transaction (with SQLite, no write lock ten times a second)
    with store.transaction():
        row = store.one("SELECT owner, epoch FROM onebot_owner WHERE bot = ?", (bot,))
        if row is None or row["owner"] != owner or int(row["epoch"]) != epoch:
            return None
        now = now_iso()
        store.execute("UPDATE onebot_outbox SET status = 'expired', answered_at = ? WHERE bot = ? AND status = 'pending' AND asked_at < ?",
                      (now, bot, _ago(PENDING_STALE_SECONDS)))
        store.execute("UPDATE onebot_outbox SET status = 'failed', answered_at = ?, error = ? WHERE bot = ? AND status = 'sending' "
                      "AND asked_at < ?", (now, "its answer never came back from the process that took it; it may or may not "
                                           "have been done", bot, _ago(SENDING_STALE_SECONDS)))
        found = store.one("SELECT id, action, params FROM onebot_outbox WHERE bot = ? AND status = 'pending' ORDER BY id LIMIT 1", (bot,))
        if found is None:
            return None
        store.execute("UPDATE onebot_outbox SET status = 'sending', epoch = ? WHERE id = ?", (epoch, found["id"]))
    return {"id": found["id"], "action": found["action"], "params": json.loads(found["params"])}


def settle(store: StateStore, action_id: int, epoch: int, answer: Any = None, error: str | None = None) -> None:
    """The owner's outcome of an action it took: the platform's answer, or why it failed."""
    with store.transaction():
        store.execute("UPDATE onebot_outbox SET status = ?, answer = ?, error = ?, answered_at = ? WHERE id = ? AND status = 'sending' "
                      "AND epoch = ?", ("failed" if error is not None else "answered",
                                        None if error is not None else secrets.redact(json.dumps(answer, ensure_ascii=False)),
                                        None if error is None else secrets.redact(error), now_iso(), action_id, epoch))
        store.notify(OUTBOX_CHANNEL, f"answered {action_id}")


def _ago(seconds: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def forget_old(store: StateStore) -> None:
    cutoff = _ago(KEEP_SECONDS)
    with store.transaction():
        store.execute("DELETE FROM onebot_outbox WHERE status <> 'pending' AND status <> 'sending' AND asked_at < ?", (cutoff,))


# -- the asker ---------------------------------------------------------------------------------
class RelayedLink:
    """A bot's socket as a process that does not hold it sees it: each action goes through the
    owner's outbox, and its answer comes back the same way (same interface as a SocketLink)."""

    def __init__(self, home: Home, bot: str, owner: str, asker: str) -> None:
        self.home = home
        self.bot = bot
        self.owner = owner
        self.asker = asker

    def _ask(self, action: str, params: dict[str, Any]) -> int:
        with StateStore.open(self.home) as store, store.transaction():
            action_id = store.insert("onebot_outbox", {"bot": self.bot, "action": action, "params": json.dumps(params, ensure_ascii=False),
                                                       "status": "pending", "asked_by": self.asker, "asked_at": now_iso()})
            store.notify(OUTBOX_CHANNEL, self.bot)
        return action_id

    def _look(self, action_id: int) -> dict[str, Any] | None:
        with StateStore.open(self.home) as store:
            row = store.one("SELECT status, answer, error FROM onebot_outbox WHERE id = ?", (action_id,))
        return row if row is not None and row["status"] not in ("pending", "sending") else None

    def _give_up(self, action_id: int) -> dict[str, Any] | None:
        """Stop waiting for the action to be taken: one not taken yet is never sent; one answered
        meanwhile is kept; one being sent now is `{"status": "sending"}` (worth waiting for)."""
        with StateStore.open(self.home) as store, store.transaction():
            store.execute("UPDATE onebot_outbox SET status = 'expired', answered_at = ? WHERE id = ? AND status = 'pending'",
                          (now_iso(), action_id))
            row = store.one("SELECT status, answer, error FROM onebot_outbox WHERE id = ?", (action_id,))
        return row if row is not None and row["status"] in ("answered", "failed", "sending") else None

    def _outcome(self, action: str, row: dict[str, Any], failure: Failure) -> Any:
        if row["status"] == "answered":
            return json.loads(row["answer"])
        raise failure(action, f"{row['error'] or 'it failed'} (sent through {self.owner}, which holds the bot's socket)")

    def _late(self, action: str, timeout: float, failure: Failure) -> FwError:
        return failure(action, f"no answer within {timeout:g} s from {self.owner}, the fw process that holds the bot's socket")

    def request(self, action: str, params: dict[str, Any], timeout: float, failure: Failure) -> Any:
        action_id = self._ask(action, params)
        deadline = time.monotonic() + timeout
        pause = 0.01
        try:
            while time.monotonic() < deadline:
                time.sleep(pause)
                pause = min(pause * 1.5, 0.1)
                row = self._look(action_id)
                if row is not None:
                    return self._outcome(action, row, failure)
            row = self._give_up(action_id)
            if row is not None and row["status"] == "sending":  # the owner has it: wait for its own answer
                deadline = time.monotonic() + timeout + 2
                while time.monotonic() < deadline:
                    time.sleep(0.1)
                    if (row := self._look(action_id)) is not None:
                        return self._outcome(action, row, failure)
                row = None
        except BaseException:  # Ctrl-C, a signal: what was not taken yet is never sent
            self._give_up(action_id)
            raise
        if row is not None:
            return self._outcome(action, row, failure)
        raise self._late(action, timeout, failure)

    async def arequest(self, action: str, params: dict[str, Any], timeout: float, failure: Failure) -> Any:
        action_id = await asyncio.to_thread(self._ask, action, params)
        deadline = time.monotonic() + timeout
        pause = 0.01
        try:
            while time.monotonic() < deadline:
                await asyncio.sleep(pause)
                pause = min(pause * 1.5, 0.1)
                row = await asyncio.to_thread(self._look, action_id)
                if row is not None:
                    return self._outcome(action, row, failure)
            row = await asyncio.to_thread(self._give_up, action_id)
            if row is not None and row["status"] == "sending":  # the owner has it: wait for its own answer
                deadline = time.monotonic() + timeout + 2
                row = None
                while time.monotonic() < deadline and row is None:
                    await asyncio.sleep(0.1)
                    row = await asyncio.to_thread(self._look, action_id)
        except asyncio.CancelledError:
            await asyncio.shield(asyncio.to_thread(self._give_up, action_id))
            raise
        if row is not None:
            return self._outcome(action, row, failure)
        raise self._late(action, timeout, failure)
