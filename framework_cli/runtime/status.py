"""`fw status`: the work of the home at a glance: what waits, what runs and what failed in the
last hour, per principal (its turns, tasks and bot events together) and per bot (its events),
with each principal's waiting work measured against its binding's `max_queue`.

Read from `state.db` in one pass of grouped counts, so it answers at once however long the
queues are; nothing is written.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from ..domain.bots import bot_names, find_bot
from ..domain.identities import DEFAULT_MAX_QUEUE, binding_list
from ..errors import FwError
from ..home.store import Home
from ..state.store import StateStore

FAILED_WINDOW_SECONDS = 3600.0
_COUNTS = ("pending", "backlog", "running", "failed_last_hour")


def _since(seconds: float) -> str:
    moment = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _tally(store: StateStore, table: str, key: str, since: str) -> dict[str, dict[str, int]]:
    """{key value: {pending, backlog, running, failed_last_hour}} of one table."""
    found: dict[str, dict[str, int]] = {}
    for row in store.all(f"SELECT {key} AS k, status, COUNT(*) AS n FROM {table} "
                         "WHERE status IN ('pending', 'backlog', 'running') GROUP BY 1, 2"):
        found.setdefault(row["k"], dict.fromkeys(_COUNTS, 0))[row["status"]] += int(row["n"])
    for row in store.all(f"SELECT {key} AS k, COUNT(*) AS n FROM {table} WHERE status = 'failed' AND ended_at >= ? GROUP BY 1", (since,)):
        found.setdefault(row["k"], dict.fromkeys(_COUNTS, 0))["failed_last_hour"] += int(row["n"])
    return found


def _add(into: dict[str, int], more: dict[str, int]) -> None:
    for name in _COUNTS:
        into[name] += more.get(name, 0)


def work_status(home: Home) -> dict[str, Any]:
    """`{"principals": [...], "bots": [...], "serving": [...], "totals": {...}}` (CONTRACT section 7)."""
    since = _since(FAILED_WINDOW_SECONDS)
    with StateStore.open(home) as store:
        by_principal = [_tally(store, table, "principal", since) for table in ("turns", "tasks", "bot_events")]
        by_bot = _tally(store, "bot_events", "bot", since)
        serving = store.all("SELECT id, host, process, started_at, heartbeat_at FROM dispatchers ORDER BY started_at")
    limits = {b["principal"]: b.get("max_queue", DEFAULT_MAX_QUEUE) for b in binding_list(home)["bindings"] if "error" not in b}
    principals = []
    for name in sorted(set(limits) | {p for tally in by_principal for p in tally}):
        counts = dict.fromkeys(_COUNTS, 0)
        for tally in by_principal:
            _add(counts, tally.get(name, {}))
        limit = limits.get(name)
        principals.append({"principal": name, **counts, "max_queue": limit,
                           "over_max_queue": limit is not None and counts["pending"] > limit})
    bots = []
    for name in sorted(set(bot_names(home)) | set(by_bot)):
        try:
            bot = find_bot(home, name)
        except FwError:
            bot = None
        counts = {k: v for k, v in by_bot.get(name, dict.fromkeys(_COUNTS, 0)).items() if k != "backlog"}
        bots.append({"bot": name, "principal": bot["principal"] if bot else None, **counts})
    totals = dict.fromkeys(_COUNTS, 0)
    for entry in principals:
        _add(totals, entry)
    return {"principals": principals, "bots": bots, "serving": [_serving(row) for row in serving], "totals": totals,
            "over_max_queue": [p["principal"] for p in principals if p["over_max_queue"]]}


def _serving(row: dict[str, Any]) -> dict[str, Any]:
    """A process that serves work (`fw dispatch`, `fw bot serve`), as its heartbeat says."""
    role = str(row["id"]).split("-", 1)[0]
    return {"id": row["id"], "command": "fw bot serve" if role == "bot" else "fw dispatch", "host": row["host"],
            "process": row["process"], "started_at": row["started_at"], "heartbeat_at": row["heartbeat_at"]}
