"""Event runs as a source of the engine: the events `fw bot serve` queued (runtime/bot_events.py),
run one at a time per conversation, in arrival order, side by side across conversations, even
when one principal serves them all.

A bot's events run only while it can act: a bot reached over its reverse WebSocket alone waits
for its implementation to connect (a reply sent before would be lost). Whether the principal
takes an event is decided when it arrives (nothing is queued otherwise)
and again when its turn comes: a binding disabled meanwhile, or an agent that no longer selects
the event, makes it `refused`, not run. A server that dies during a run leaves its event to the
next server of the bot: run again if its run had not started; `failed` if it had (it may have
spoken already, and the group must not hear it twice).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container
from typing import Any

from ..domain.bots import find_bot
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..platform.bots import bot_remove
from ..runtime import bot_events, lanes
from ..runtime.bot_events import CANCELLED, DONE, FAILED, PENDING, REFUSED, RUNNING
from ..state.store import StateStore, now_iso
from .engine import Engine, Item, Outcome
from .external import GatewayStarter
from .handling import arun_event, refusal

MAX_ATTEMPTS = 3


class BotEvents:
    kinds = ("event",)

    def __init__(self, home: Home, bots: list[str], gateway: GatewayStarter | None = None,
                 ready: Callable[[str], bool] | None = None) -> None:
        self.root = home.root
        self.bots = list(bots)
        self.gateway = gateway
        self.ready = ready or (lambda bot: True)  # a bot whose events can run now (its socket is connected)
        self.since = bot_events.stamp()  # events older than this were left by an earlier server
        self._forgot_at = -1e9

    # -- claiming -------------------------------------------------------------------------------
    def claim(self, store: StateStore, owner: str, limit: int) -> list[Item]:
        """The oldest waiting event of each conversation whose lane is free (oldest first), up to
        `limit`, each marked running and its lane taken, in one short transaction."""
        bots = [b for b in self.bots if self.ready(b)]
        if not bots or not self._candidates(store, bots, limit):
            return []
        claimed: list[Item] = []
        with store.transaction():
            for row in self._candidates(store, bots, limit):
                lane = lanes.conversation_lane(row["conversation"])
                fence = lanes.take(store, lane, owner)
                if fence is None:
                    continue
                if not store.execute("UPDATE bot_events SET status = ?, started_at = ?, owner = ?, attempts = attempts + 1 "
                                     "WHERE id = ? AND status = ?", (RUNNING, now_iso(), owner, row["id"], PENDING)).rowcount:
                    lanes.give_back(store, lane, owner, fence)
                    continue
                claimed.append(Item("event", row["id"], lane, fence, row["attempts"] + 1, row))
        return claimed

    def _candidates(self, store: StateStore, bots: list[str], limit: int) -> list[dict[str, Any]]:
        marks = ", ".join("?" for _ in bots)
        firsts = store.all(
            f"SELECT MIN(e.id) AS id FROM bot_events e WHERE e.status = ? AND e.bot IN ({marks}) "
            "AND NOT EXISTS (SELECT 1 FROM lanes l WHERE l.lane = 'conversation:' || e.conversation AND l.owner IS NOT NULL) "
            "AND e.conversation NOT IN (SELECT conversation FROM bot_events WHERE status = 'running') "
            "GROUP BY e.conversation ORDER BY MIN(e.id) LIMIT ?", (PENDING, *bots, limit))
        if not firsts:
            return []
        ids = [r["id"] for r in firsts]
        marks = ", ".join("?" for _ in ids)
        return store.all(f"SELECT * FROM bot_events WHERE id IN ({marks}) ORDER BY id", tuple(ids))

    # -- running --------------------------------------------------------------------------------
    async def run(self, item: Item, engine: Engine) -> Outcome:
        home = Home(self.root)
        event = bot_events.event_of(item.row)
        bot_name = item.row["bot"]
        record = {"event": event}
        bot, why = await engine.threads(_bot_and_refusal, home, bot_name, event)
        if bot is None:
            return Outcome(FAILED, f"not_found: bot {bot_name!r} was removed before its turn came", record=record)
        if why is not None:
            return Outcome(REFUSED, why, record={**record, "reason": why})

        def note(progress: dict[str, Any]) -> None:
            if progress.get("type") == "started":
                run_id = progress["run"]["run_id"]
                record["run_id"] = run_id
                engine.started_run(item, run_id)

        try:
            doc = await arun_event(home, bot["principal"], event, {"bot": bot_name, "event": event}, note, self.gateway,
                                   engine.threads, on_started=lambda run_id: _record_run(home, engine.owner, item, run_id))
        except FwError as exc:
            return Outcome(FAILED, redact(f"{exc.code}: {exc.message}"),
                           record={**record, "error": {"code": exc.code, "message": redact(exc.message), "hint": redact(exc.hint)}})
        result = doc["result"]
        return Outcome(DONE, record={**record, "run_id": doc["run"]["run_id"], "run_status": result["status"],
                                     "tool_calls": [{"name": c["name"], "outcome": c["outcome"]} for c in result["tool_calls"]]})

    # -- recording --------------------------------------------------------------------------------
    def finish(self, store: StateStore, owner: str, item: Item, outcome: Outcome) -> str:
        with store.transaction():
            store.execute("UPDATE bot_events SET status = ?, error = ?, ended_at = ? "
                          "WHERE id = ? AND owner = ? AND attempts = ? AND status = ?",
                          (outcome.status, outcome.note, now_iso(), item.id, owner, item.attempts, RUNNING))
            lanes.give_back(store, item.lane, owner, item.fence)
            row = store.one("SELECT status FROM bot_events WHERE id = ?", (item.id,))
        return row["status"] if row else outcome.status

    def stopped(self, store: StateStore, owner: str, item: Item, run_id: str | None) -> bool:
        """The server stopped during the run (which it ended): `cancelled` (True), unless it
        had finished meanwhile; one whose run had not started yet waits for the next server."""
        if run_id is None:
            with store.transaction():
                store.execute("UPDATE bot_events SET status = ?, owner = NULL, started_at = NULL, attempts = attempts - 1 "
                              "WHERE id = ? AND owner = ? AND status = ?", (PENDING, item.id, owner, RUNNING))
                lanes.give_back(store, item.lane, owner, item.fence)
            return False
        return self.finish(store, owner, item, Outcome(CANCELLED, "the server was stopped during its run")) == CANCELLED

    def take_back(self, home: Home, store: StateStore, owner: str, live: Container[str]) -> int:
        """Events left running by servers that are gone: run again when no run had started,
        failed otherwise; then waiting events too old to answer expire."""
        taken = 0
        for row in store.all("SELECT id, owner, attempts, run_id FROM bot_events WHERE status = ?", (RUNNING,)):
            if row["owner"] == owner or row["owner"] in live:
                continue
            if row["run_id"] is None and row["attempts"] < MAX_ATTEMPTS:
                status, note = PENDING, None
            else:
                status, note = FAILED, ("its server stopped during its run; it is not run again, so that nothing is said twice"
                                        if row["run_id"] else f"its server stopped before it ran, {row['attempts']} times")
            owner_is = "owner IS NULL" if row["owner"] is None else "owner = ?"
            with store.transaction():
                taken += store.execute(
                    f"UPDATE bot_events SET status = ?, error = ?, owner = NULL, ended_at = ? WHERE id = ? AND status = ? "
                    f"AND attempts = ? AND {owner_is}",
                    (status, note, None if status == PENDING else now_iso(), row["id"], RUNNING, row["attempts"],
                     *(() if row["owner"] is None else (row["owner"],)))).rowcount
        bot_events.expire(store, self.bots, self.since)
        if time.monotonic() - self._forgot_at > 3600:  # at the start, then hourly: ended events older than a week go
            bot_events.forget_old(store)
            self._forgot_at = time.monotonic()
        return taken


def _bot_and_refusal(home: Home, bot_name: str, event: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(the bot as it is now, why its principal may not take the event or None), in one step."""
    bot = find_bot(home, bot_name)
    return bot, (refusal(home, bot_name, bot["principal"], event, bot) if bot is not None else None)


def _record_run(home: Home, owner: str, item: Item, run_id: str) -> None:
    with StateStore.open(home) as store, store.transaction():
        store.execute("UPDATE bot_events SET run_id = ? WHERE id = ? AND owner = ? AND attempts = ?", (run_id, item.id, owner, item.attempts))


def remove_bot(home: Home, name: str) -> dict[str, Any]:
    """`fw bot remove`, and the web page's: the bot's file and stored secrets removed
    (platform/bots.py), and its events still waiting cancelled, so that a bot added again under
    its name does not answer them."""
    doc = bot_remove(home, name)
    with StateStore.open(home) as store:
        doc["cancelled_events"] = bot_events.forget_bot(store, name)
    return doc
