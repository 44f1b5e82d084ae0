"""fw dispatch: run the pending turns of every session."""

from __future__ import annotations

import functools
import os
import sys
from typing import Annotated, Any, Optional

import typer

from ..errors import FwError
from ..liveness import die_with
from ..suggest import plural
from .common import DURATION_HELP, TIMEOUT_HELP, home_of, parse_duration, run_gateway
from .output import JsonOpt, emit, json_wanted, write_out


def command(
    ctx: typer.Context,
    once: Annotated[bool, typer.Option("--once", help="Run until nothing is pending, then exit with a summary.")] = False,
    concurrency: Annotated[int, typer.Option("--concurrency", "--workers", metavar="N", help="Turns and tasks in flight at once, across principals (one at a time per principal); waiting for a model holds no thread. --workers is its old name.")] = 256,
    timeout: Annotated[Optional[str], typer.Option("--timeout", metavar="DURATION", help=f"{TIMEOUT_HELP[:-1]}: {DURATION_HELP}.", show_default=False)] = None,
    processes: Annotated[Optional[int], typer.Option("--processes", metavar="N", show_default=False, help="Processes that share the work, each with its part of --concurrency, so that more than one core starts and ends runs (a principal's work stays in one of them). Default: one for every 256 of --concurrency, up to the cores fw may use; 1 keeps it in this process.")] = None,
    part: Annotated[Optional[str], typer.Option("--part", hidden=True)] = None,
    part_progress: Annotated[bool, typer.Option("--part-progress", hidden=True)] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run pending turns and tasks. A turn is a managed run of its principal's binding, tied
    to its session and fed its messages; its answer is posted to the session. A task is a
    managed run of its principal on the task's instructions; its answer is the result unless
    the run reports one. With --once it exits when nothing is pending (exit 0 whatever the
    outcomes); without it, it keeps serving until Ctrl-C or SIGTERM, which ends the runs in
    progress (exit 130), or, with none in flight, stops with the summary (exit 0)."""
    from ..engine import shares  # lazy: start-up speed

    home = home_of(ctx)
    seconds = parse_duration(timeout, "--timeout") if timeout is not None else None
    if part is not None:  # one of the processes of a dispatch run by several: its summary as JSON for the first
        from ..engine.dispatch import dispatch as run_part  # lazy: start-up speed

        index, count, parent = _part(part)
        if not die_with(parent):
            raise FwError("usage", f"--part names process {parent}, which did not start this one (or has gone)",
                          "leave --part out: fw dispatch starts the processes it shares its work with (--processes)")
        progress = functools.partial(_progress, home, not part_progress)
        doc = run_part(home, once=once, concurrency=concurrency, on_event=progress, timeout=seconds, gateway=run_gateway,
                       share=(index, count))
        emit(doc, True, lambda c: None)
        return
    if part_progress:
        raise FwError("usage", "--part-progress goes with --part, fw dispatch's own", "leave it out")
    shares.check_concurrency(concurrency)  # the whole dispatch's: each process checks its part again
    count = shares.default_processes(concurrency) if processes is None else shares.check_processes(processes, concurrency)
    parts = shares.shares_of(concurrency, count)
    # the others are started first, to load what this one is about to load meanwhile; a bound
    # refused by the first (its concurrency, its timeout) stops them, before they have claimed anything
    helpers = shares.Helpers([_helper(home, k, count, parts[k], once, timeout, not json_wanted(as_json)) for k in range(1, count)],
                             sum(parts[1:])) if count > 1 else None
    try:
        from ..engine.dispatch import dispatch as run_dispatch  # lazy: start-up speed

        progress = functools.partial(_progress, home, json_wanted(as_json))
        doc = run_dispatch(home, once=once, concurrency=parts[0], on_event=progress, timeout=seconds, gateway=run_gateway,
                           share=(0, count) if count > 1 else None, helpers=helpers)
    except BaseException:
        if helpers is not None:  # refused or interrupted before its loop ran (after it, the dispatch has stopped them)
            helpers.stop()
            helpers.finish(shares.HELPER_STOP_SECONDS)
        raise
    emit(doc, as_json, lambda c: _render(c, doc))


# How the other processes of a dispatch start fw: the interpreter's first path (the current folder)
# dropped, so that a folder named framework_cli where the command runs is never what they run.
HELPER_CODE = "import sys; del sys.path[0]; from framework_cli.cli.main import main; main()"


def _helper(home: Any, index: int, count: int, concurrency: int, once: bool, timeout: str | None, progress: bool) -> list[str]:
    """The command line of one more process of this dispatch."""
    return [sys.executable, "-c", HELPER_CODE, "--home", str(home.root), "dispatch", "--json", "--concurrency", str(concurrency),
            "--part", f"{index}/{count}/{os.getpid()}", *(["--once"] if once else []), *(["--timeout", timeout] if timeout else []),
            *(["--part-progress"] if progress else [])]


def _part(text: str) -> tuple[int, int, int]:
    try:
        index, count, parent = (int(x) for x in text.split("/"))
    except ValueError:
        index = count = parent = 0
    if not 0 < index < count:
        raise FwError("usage", "--part is fw dispatch's own: INDEX/COUNT/PID", "leave it out")
    return index, count, parent


def _progress(home: Any, quiet: bool, event: dict[str, Any]) -> None:
    """A dispatch's events on standard error: its notes always, its progress unless `quiet`."""
    if event["type"] == "note":
        write_out(f"fw dispatch: {event['text']}", err=True)
    if quiet:
        return
    if event["type"] == "serving":  # said once the bounds were checked
        write_out(f"fw dispatch: serving {home.root}, up to {plural(event['concurrency'], 'turn or task', 'turns or tasks')} "
                  "at once; Ctrl-C stops.", err=True)
    if event["type"] == "ended":
        error = f" ({event['error']})" if event.get("error") else ""
        where = f" in {event['session']}" if event.get("session") else ""
        write_out(f"{event['kind']} {event['id']}: {event['principal']}{where}: {event['status']}{error}", err=True)


def _render(console: Any, doc: dict[str, Any]) -> None:
    t, k = doc["turns"], doc["tasks"]
    silent = t["run"] - t["answered"] - t["failed"] - t["cancelled"]  # an empty answer (nothing posted), or put back
    console.print(f"Turns run: {t['run']}, answered: {t['answered']}, failed: {t['failed']}, cancelled: {t['cancelled']}"
                  + (f", without an answer: {silent}." if silent > 0 else "."))
    console.print(f"Tasks run: {k['run']}, done: {k['done']}, failed: {k['failed']}, cancelled: {k['cancelled']}.")
    if t["failed"]:
        console.print("Why each turn failed: `fw turn list --status failed`; once that is fixed, `fw turn retry ID` runs one again.")
    if k["failed"]:
        console.print("Why each task failed: `fw task show ID`.")
    q = doc.get("queue_at_start") or {}
    if q.get("turns") or q.get("tasks") or q.get("backlog"):
        backlog = f"; {q['backlog']} held in backlog by disabled bindings" if q.get("backlog") else ""
        console.print(f"Waiting at the start: {plural(q.get('turns', 0), 'turn')} and {plural(q.get('tasks', 0), 'task')}{backlog}.")
    for over in q.get("over_max_queue") or []:
        console.print(f"Over max_queue: {over['principal']} had {over['waiting']} waiting (max_queue {over['max_queue']}); see `fw status`.")
