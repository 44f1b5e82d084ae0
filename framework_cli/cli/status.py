"""fw status: what waits, what runs and what failed in the last hour, per principal and per bot."""

from __future__ import annotations

from typing import Any

import typer

from .common import home_of
from .output import JsonOpt, emit, table


def command(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Show the work of the home on one screen: per principal, its turns, tasks and bot events
    pending (and held in backlog by a disabled binding), running, and failed in the last hour,
    flagged when more wait than its binding's max_queue (nothing is ever dropped: the flag says
    the principal falls behind); per bot, its events; and the processes serving work
    (`fw dispatch`, `fw bot serve`), by their last heartbeat. Reads only."""
    from ..runtime.status import work_status  # lazy: start-up speed

    doc = work_status(home_of(ctx))
    emit(doc, as_json, lambda c: _render(c, doc))


def _render(console: Any, doc: dict[str, Any]) -> None:
    t = doc["totals"]
    console.print(f"Pending: {t['pending']}, running: {t['running']}, failed in the last hour: {t['failed_last_hour']}"
                  + (f", held in backlog: {t['backlog']}." if t["backlog"] else "."))
    rows = [[p["principal"], p["pending"], p["backlog"], p["running"], p["failed_last_hour"],
             p["max_queue"] if p["max_queue"] is not None else "no binding", "OVER" if p["over_max_queue"] else ""]
            for p in doc["principals"]]
    table(console, "principals", ["principal", "pending", "backlog", "running", "failed_1h", "max_queue", "flag"], rows,
          "No principals have work.", titled=True)
    if doc["bots"]:
        table(console, "bots", ["bot", "principal", "pending", "running", "failed_1h"],
              [[b["bot"], b["principal"], b["pending"], b["running"], b["failed_last_hour"]] for b in doc["bots"]], "", titled=True)
    if doc["serving"]:
        from ..liveness import machine_of, pid_of  # lazy: start-up speed

        # the machine's name and the pid: the host's boot and namespace, and the pid's start, are in --json
        table(console, "serving", ["command", "host", "pid", "id", "heartbeat_at"],
              [[s["command"], machine_of(s["host"]), pid_of(s["process"]), s["id"], s["heartbeat_at"]] for s in doc["serving"]],
              "", titled=True)
    else:
        console.print("Nothing is serving: `fw dispatch` runs turns and tasks, `fw bot serve BOT` a bot's events.")
    if doc["over_max_queue"]:
        console.print(f"Over max_queue: {', '.join(doc['over_max_queue'])}. Nothing is dropped; raise --concurrency, or a "
                      "binding's --max-queue if that much waiting is normal for it.")
