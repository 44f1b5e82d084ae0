"""What `fw bot serve` does for the bots it serves besides taking their events: it sends the
actions other processes put in the outbox of each bot whose socket it holds (owning the bot with
an epoch, `platform/adapters/onebot_relay.py`), each bot's in order, woken by the store's
notices; and it keeps the bots' state in state.db (served here, their own ids, their
heartbeats), saying when one goes silent or comes back."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..errors import FwError
from ..home.store import Home
from ..platform.adapters import onebot, onebot_state
from ..platform.adapters import onebot_relay as relay
from ..state.store import Poller, StateStore, listener

OnRecord = Callable[[dict[str, Any]], None]
Stored = Callable[[Callable[[StateStore], Any], str], Awaitable[Any]]  # store work off the loop, or None said and given up
KEEP_FRESH_SECONDS = 15  # how often the rows that say this process serves a bot are refreshed
WATCH_SECONDS = 1.0  # how often each bot's heartbeats are looked at
LOGIN_SECONDS = 5.0  # for an HTTP bot's `get_login_info`, when its own id is not known yet


@dataclass
class ServedBot:
    name: str
    url: str | None
    token: str | None
    secret: str | None
    self_id: str | None  # its own id on the platform, once known
    report_door: bool  # takes HTTP reports
    door_note: str | None = None  # why it takes none, when it has a url
    online: bool | None = None  # by its heartbeats, as last said


class Upkeep:
    """The served bots' outbox and liveness, for one server. `stored_or_said(work, what)` runs
    store work off the loop (None when it could not: the server has said so)."""

    def __init__(self, home: Home, bots: list[ServedBot], say: OnRecord, stored_or_said: Stored) -> None:
        self.home = home
        self.bots = bots
        self.say = say
        self.stored_or_said = stored_or_said
        self.epochs: dict[str, int] = {}  # bot -> the epoch of its ownership, while this server holds its socket
        self.outbox = asyncio.Event()  # set when the outbox may hold work for this server

    def owned(self, bot: str, epoch: int) -> None:
        """This server owns `bot` (its socket came) with `epoch`: its outbox is looked at now."""
        self.epochs[bot] = epoch  # this socket's: a later socket of the bot takes the next
        self.outbox.set()

    def let_go(self, bot: str, epoch: int) -> bool:
        """Whether the bot is no longer owned here: only if no socket of the bot came meanwhile
        (it owns the bot with an epoch of its own)."""
        if self.epochs.get(bot) == epoch and onebot.LINKS.current(bot) is None:
            del self.epochs[bot]
            return True
        return False

    # -- the outbox: other processes' actions on the sockets held here ------------------------------
    async def relay_outbox(self) -> None:
        """While this server holds bots' sockets, send the actions other processes ask of them,
        each bot's in the order they were asked; woken by the store's notices (PostgreSQL,
        listened for on a thread of its own) or looking every 0.1 s (SQLite)."""
        listening = await self._listener()
        loop = asyncio.get_running_loop()
        stop = threading.Event()

        def listen() -> None:
            nonlocal listening
            said = False
            while not stop.is_set():
                try:
                    if listening.wait(1.0):
                        loop.call_soon_threadsafe(self.outbox.set)
                except RuntimeError:
                    return  # the loop has closed
                except Exception as exc:  # the listener's connection broke: a new one, while the outbox is looked at each second
                    if not said:
                        said = True
                        loop.call_soon_threadsafe(self.say, {"type": "ignored", "why": f"the outbox's notices stopped ({type(exc).__name__}); "
                                                             "it is looked at every second until they come back"})
                    stop.wait(1.0)
                    with contextlib.suppress(Exception):
                        listening.close()
                        listening = listener(self.home, relay.OUTBOX_CHANNEL)
                        said = False

        thread = None
        if not isinstance(listening, Poller):
            thread = threading.Thread(target=listen, name="fw-outbox-notices", daemon=True)
            thread.start()
        every = 0.1 if thread is None else 1.0
        try:
            while True:
                # each bot's actions in order, the bots side by side: a hung implementation holds up only its own bot
                done = await asyncio.gather(*(self._relay_bot(bot) for bot in list(self.epochs)), return_exceptions=True)
                for failed in (d for d in done if isinstance(d, Exception)):
                    self.say({"type": "internal", "why": f"unexpected error {type(failed).__name__} relaying actions; "
                              "this is a bug in fw, please report it"})
                with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                    await asyncio.wait_for(self.outbox.wait(), every if self.epochs else 1.0)
                self.outbox.clear()
        finally:
            stop.set()
            if thread is not None:
                await asyncio.to_thread(thread.join, 2.0)
            with contextlib.suppress(Exception):
                listening.close()

    async def _listener(self) -> Any:
        try:
            return await asyncio.to_thread(listener, self.home, relay.OUTBOX_CHANNEL)
        except FwError as exc:
            self.say({"type": "ignored", "why": f"the outbox's notices cannot be had ({exc.message}): it is looked at every 0.1 s"})
            return Poller()

    async def _relay_bot(self, bot: str) -> None:
        while (epoch := self.epochs.get(bot)) is not None and (link := onebot.LINKS.current(bot)) is not None:
            asked = await self.stored_or_said(lambda store: relay.claim_next(store, bot, onebot_state.OWNER, epoch), f"the outbox of bot {bot}")
            if asked is None:
                return
            try:
                answer = await link.arequest(asked["action"], asked["params"], onebot.ACTION_TIMEOUT,
                                             lambda action, detail: FwError("unavailable", detail, ""))
                outcome: dict[str, Any] = {"answer": answer}
            except FwError as exc:
                outcome = {"error": exc.message}
            await self.stored_or_said(lambda store: relay.settle(store, asked["id"], epoch, **outcome), f"the outbox of bot {bot}")
            self.say({"type": "relayed", "bot": bot, "action": asked["action"], "outcome": "failed" if "error" in outcome else "ok"})

    # -- liveness -------------------------------------------------------------------------------
    async def keep_fresh(self) -> None:
        """While serving: say so in state.db for each bot (other processes read it), and look
        at each bot's heartbeats every second, saying when one goes silent or comes back."""
        await self._learn_own_ids()
        beat = 0
        while True:
            if beat % int(KEEP_FRESH_SECONDS / WATCH_SECONDS) == 0:
                await self.stored_or_said(self._refresh, "the state of the bots")
            await self.watch_once()
            beat += 1
            await asyncio.sleep(WATCH_SECONDS)

    def _refresh(self, store: StateStore) -> None:
        with store.transaction():
            for bot in self.bots:
                onebot_state.record_status(store, bot.name, self_id=bot.self_id)
                link = onebot.LINKS.current(bot.name)
                if link is not None:
                    onebot_state.record_link(store, bot.name, online=link.online, self_id=link.self_id)
        for bot in self.bots:
            onebot_state.forget_old_sights(store, bot.name)
        relay.forget_old(store)

    async def watch_once(self) -> None:
        rows = await self.stored_or_said(lambda store: {b.name: store.one("SELECT * FROM onebot_status WHERE bot = ?", (b.name,))
                                                        for b in self.bots}, "the heartbeats of the bots")
        if rows is None:
            return
        now = datetime.now(timezone.utc)
        for bot in self.bots:
            row = rows.get(bot.name)
            online = onebot_state.beats_say(row, now)
            if online is None or online == bot.online:
                continue
            if bot.online is not None or not online:
                why = "its heartbeats came back" if online else _silence(row, now)
                self.say({"type": "online" if online else "offline", "bot": bot.name, "why": why})
            bot.online = online

    async def _learn_own_ids(self) -> None:
        """An HTTP bot learns its own id from `get_login_info` (else from its first report)."""
        for bot in self.bots:
            if bot.self_id is not None or not bot.url:
                continue
            adapter = onebot.make(self.home, bot.name, {"adapter": "onebot", "url": bot.url})
            try:
                found = await asyncio.wait_for(adapter.alogin_id(), LOGIN_SECONDS + 1)
            except (TimeoutError, asyncio.TimeoutError, FwError):
                continue
            if found and bot.self_id is None:
                bot.self_id = found
                await self.stored_or_said(lambda store, b=bot: _with(store, b.name, self_id=b.self_id), f"the id of bot {bot.name}")
                self.say({"type": "learned", "bot": bot.name, "self_id": found})


def _with(store: StateStore, bot: str, **values: Any) -> None:
    with store.transaction():
        onebot_state.record_status(store, bot, **values)


def _silence(row: dict[str, Any] | None, now: datetime) -> str:
    if row and row.get("heartbeat_online") == 0:
        return "its implementation says it is offline"
    last = datetime.fromisoformat(row["last_heartbeat_at"].replace("Z", "+00:00")) if row and row.get("last_heartbeat_at") else now
    interval = float(row["heartbeat_seconds"]) if row and row.get("heartbeat_seconds") else 0
    return (f"no heartbeat for {(now - last).total_seconds():.0f} s ({onebot_state.MISSED_BEATS} intervals of {interval:g} s): "
            "its implementation may be down or logged out")
