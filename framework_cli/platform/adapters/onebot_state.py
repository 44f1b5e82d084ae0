"""What the store keeps of each OneBot bot, for every process to read: which process holds its
socket (`onebot_links`), its own id and heartbeats (`onebot_status`), the reports it has seen
(`onebot_seen`, to de-duplicate them) and the messages it sent (`onebot_sent`, so that a reply
to one addresses it). `fw bot serve` writes most of it; the adapter (`onebot.py`) reads it."""

from __future__ import annotations

import os
import socket as socket_module
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from ...errors import FwError
from ...home.store import Home
from ...state.store import StateStore, now_iso

LINK_STALE_SECONDS = 60  # a socket row not refreshed for this long was left by a process that died
OWNER = f"{socket_module.gethostname()}:{os.getpid()}"  # this process, as other processes see it


def _cutoff() -> str:
    moment = datetime.now(timezone.utc) - timedelta(seconds=LINK_STALE_SECONDS)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def link_state(home: Home, bot: str) -> dict[str, Any] | None:
    """The freshest live socket row of the bot, from any process, or None."""
    with StateStore.open(home) as store:
        return store.one("SELECT owner, online, self_id, connected_at, seen_at FROM onebot_links "
                         "WHERE bot = ? AND seen_at > ? ORDER BY seen_at DESC LIMIT 1", (bot, _cutoff()))


def record_link(store: StateStore, bot: str, *, online: bool | None = None, self_id: str | None = None) -> None:
    """This process holds a socket of the bot (and, when given, its online state now)."""
    now = now_iso()
    with store.transaction():
        row = store.one("SELECT online, self_id FROM onebot_links WHERE bot = ? AND owner = ?", (bot, OWNER))
        if row is None:
            store.insert("onebot_links", {"bot": bot, "owner": OWNER, "online": int(online is not False), "self_id": self_id,
                                          "connected_at": now, "seen_at": now})
            return
        store.execute("UPDATE onebot_links SET online = ?, self_id = ?, seen_at = ? WHERE bot = ? AND owner = ?",
                      (int(row["online"] if online is None else online), self_id or row["self_id"], now, bot, OWNER))


def forget_link_in(store: StateStore, bot: str) -> None:
    """This process holds no socket of the bot any more."""
    with store.transaction():
        store.execute("DELETE FROM onebot_links WHERE bot = ? AND owner = ?", (bot, OWNER))


def forget_bot(home: Home, bot: str) -> None:
    """A bot removed: what state.db kept of it (its socket, the reports it saw, the messages it
    sent, its heartbeats and own id) goes, so that a bot added again under its name starts
    afresh."""
    with StateStore.open(home) as store, store.transaction():
        for table in ("onebot_links", "onebot_seen", "onebot_sent", "onebot_status"):
            store.execute(f"DELETE FROM {table} WHERE bot = ?", (bot,))


def forget_self_id(home: Home, bot: str) -> None:
    """The bot now reaches another implementation (its url changed): its own id is learned
    again, from that one."""
    with StateStore.open(home) as store, store.transaction():
        store.execute("UPDATE onebot_status SET self_id = NULL WHERE bot = ?", (bot,))


SEEN_SECONDS = 24 * 3600  # a report is de-duplicated for a day...
SEEN_MAX = 100_000  # ...and among the last this many of its bot
SENT_SECONDS = 7 * 24 * 3600  # the bot's own messages kept, so that a reply to one addresses it
MISSED_BEATS = 3  # heartbeats missed before a bot is offline


def _ago(seconds: float) -> str:
    moment = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def first_sight(store: StateStore, bot: str, key: str) -> bool:
    """Note a report of the bot by its de-duplication key; False when it was seen already (a
    report replayed, a frame sent twice). Inside the caller's transaction."""
    found = store.one("SELECT seen_at FROM onebot_seen WHERE bot = ? AND key = ?", (bot, key))
    if found is not None and found["seen_at"] >= _ago(SEEN_SECONDS):
        return False
    now = now_iso()
    if found is None:
        store.insert("onebot_seen", {"bot": bot, "key": key, "seen_at": now})
    else:
        store.execute("UPDATE onebot_seen SET seen_at = ? WHERE bot = ? AND key = ?", (now, bot, key))
    return True


def forget_old_sights(store: StateStore, bot: str) -> None:
    """Drop what is past de-duplication: older than a day, or beyond the last SEEN_MAX."""
    with store.transaction():
        store.execute("DELETE FROM onebot_seen WHERE bot = ? AND seen_at < ?", (bot, _ago(SEEN_SECONDS)))
        store.execute("DELETE FROM onebot_seen WHERE bot = ? AND seen_at < (SELECT seen_at FROM onebot_seen WHERE bot = ? "
                      "ORDER BY seen_at DESC LIMIT 1 OFFSET ?)", (bot, bot, SEEN_MAX))
        store.execute("DELETE FROM onebot_sent WHERE bot = ? AND sent_at < ?", (bot, _ago(SENT_SECONDS)))


def record_sent(home: Home, bot: str, message_id: str) -> None:
    """A message the bot sent, so that a reply to it is read as addressing the bot."""
    try:
        with StateStore.open(home) as store, store.transaction():
            store.execute("DELETE FROM onebot_sent WHERE bot = ? AND message_id = ?", (bot, str(message_id)))
            store.insert("onebot_sent", {"bot": bot, "message_id": str(message_id), "sent_at": now_iso()})
    except FwError:
        pass  # the message went out; only the reply rule loses it


def said_by_bot(store: StateStore, bot: str) -> Callable[[str], bool]:
    return lambda message_id: store.one("SELECT 1 AS yes FROM onebot_sent WHERE bot = ? AND message_id = ?",
                                        (bot, str(message_id))) is not None


def bot_status(home: Home, bot: str) -> dict[str, Any] | None:
    """What `fw bot serve` keeps of a bot: `self_id`, `last_event_at`, `last_heartbeat_at`,
    `heartbeat_seconds`, `heartbeat_online`, `served_by`, `served_at`."""
    with StateStore.open(home) as store:
        return store.one("SELECT * FROM onebot_status WHERE bot = ?", (bot,))


def heartbeat_state(home: Home, bot: str) -> bool | None:
    """Online by its heartbeats: while a `fw bot serve` receives for the bot (its row is
    fresh) and the bot has sent heartbeats with an interval, it is online when the last came
    within three intervals and said so; None when heartbeats do not decide."""
    try:
        row = bot_status(home, bot)
    except FwError:
        return None
    return beats_say(row)


def beats_say(row: dict[str, Any] | None, now: datetime | None = None) -> bool | None:
    if not row or not row.get("heartbeat_seconds") or not row.get("last_heartbeat_at") or not row.get("served_at"):
        return None
    now = now or datetime.now(timezone.utc)
    if datetime.fromisoformat(row["served_at"].replace("Z", "+00:00")) < now - timedelta(seconds=LINK_STALE_SECONDS):
        return None  # no server receives for it now: its heartbeats say nothing
    last = datetime.fromisoformat(row["last_heartbeat_at"].replace("Z", "+00:00"))
    return bool(row.get("heartbeat_online")) and now - last <= timedelta(seconds=MISSED_BEATS * float(row["heartbeat_seconds"]))


def record_status(store: StateStore, bot: str, **values: Any) -> None:
    """Keep what was learnt of a bot now (inside the caller's transaction); `served_at` is
    renewed with each, by this process."""
    values = {k: v for k, v in values.items() if v is not None}
    values.update(served_by=OWNER, served_at=now_iso())
    if store.one("SELECT bot FROM onebot_status WHERE bot = ?", (bot,)) is None:
        store.insert("onebot_status", {"bot": bot, **values})
        return
    sets = ", ".join(f"{k} = ?" for k in values)
    store.execute(f"UPDATE onebot_status SET {sets} WHERE bot = ?", (*values.values(), bot))


def status_view(home: Home, bot: str) -> dict[str, Any]:
    """`self_id`, `last_event_at` and `last_heartbeat_at` as `fw bot list` shows them."""
    try:
        row = bot_status(home, bot) or {}
    except FwError:
        row = {}
    return {"self_id": row.get("self_id"), "last_event_at": row.get("last_event_at"), "last_heartbeat_at": row.get("last_heartbeat_at")}
