"""fw state: where the runtime state lives (SQLite's state.db, or PostgreSQL), and moving it."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from ..errors import FwError
from .common import home_of
from .output import JsonOpt, emit, table

app = typer.Typer(help="Where the runtime state lives (the home's state.db, or a PostgreSQL database shared by several hosts): "
                  "choose it, migrate it, check it, copy it over.")


def _url_from_stdin(what: str) -> str:
    if sys.stdin is None or sys.stdin.isatty():
        raise FwError("usage", f"{what} reads the database URL from standard input, so that its password is in no command line",
                      "e.g. printf %s \"$DATABASE_URL\" | fw state use")
    url = sys.stdin.read().strip()
    if not url:
        raise FwError("invalid", "standard input held no URL", "e.g. printf %s \"$DATABASE_URL\" | fw state use", field="url")
    return url


@app.command("use")
def use(
    ctx: typer.Context,
    sqlite: Annotated[bool, typer.Option("--sqlite", help="Use the home's state.db again (forget the stored URL and password).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Keep this home's runtime state in a PostgreSQL database: the URL
    (postgresql://USER:PASSWORD@HOST:PORT/DATABASE) is read from standard input, checked by
    connecting (and the schema made), then kept: its password in secrets/, the rest in
    state.url (copy both to each host). FW_STATE, when set, wins over it. Nothing is moved:
    `fw state copy` does that. With --sqlite, the home's state.db is used again."""
    from ..runtime.state_admin import state_use  # lazy: start-up speed

    home = home_of(ctx)
    doc = state_use(home, None if sqlite else _url_from_stdin("fw state use"))
    emit(doc, as_json, lambda c: _render_use(c, doc))


def _render_use(console: Any, doc: dict[str, Any]) -> None:
    state = doc["state"]
    console.print(f"Runtime state: {state['engine']} at {state['location']}"
                  + (f", schema at {doc['schema_version']} migrations." if "schema_version" in doc else "."))
    if doc.get("next_step"):
        console.print(f"Next: {doc['next_step']}")


@app.command("migrate")
def migrate(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Bring the store's schema up to date (fw does it on first use too), and say where it stands."""
    from ..runtime.state_admin import state_migrate  # lazy: start-up speed

    doc = state_migrate(home_of(ctx))
    emit(doc, as_json, lambda c: c.print(f"{doc['state']['engine']} at {doc['state']['location']}: schema at "
                                         f"{doc['schema_version']} migrations ({doc['latest']}), up to date."))


@app.command("check")
def check(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Check the store: that it can be reached, its schema version, the lanes held (a
    principal's or a conversation's work in progress) and by whom, serving processes whose
    heartbeat has stopped, and which `fw bot serve` holds each bot's reverse WebSocket (its
    owner, which relays other processes' actions) and when it was last seen. A store that
    cannot be reached is `unavailable` (exit 7)."""
    from ..runtime.state_admin import state_check  # lazy: start-up speed

    doc = state_check(home_of(ctx))
    emit(doc, as_json, lambda c: _render_check(c, doc))


def _render_check(console: Any, doc: dict[str, Any]) -> None:
    state = doc["state"]
    console.print(f"{state['engine']} at {state['location']}: reachable, schema at {doc['schema_version']} of {doc['latest']} migrations.")
    table(console, "lanes held", ["lane", "owner", "lease_until", "fence"],
          [[h["lane"], h["owner"], h["lease_until"], h["fence"]] for h in doc["lanes_held"]], "No lane is held: nothing runs.", titled=True)
    from ..liveness import machine_of  # lazy: start-up speed

    table(console, "serving", ["id", "host", "heartbeat_at"], [[s["id"], machine_of(s["host"]), s["heartbeat_at"]] for s in doc["serving"]],
          "Nothing is serving.", titled=True)
    table(console, "bot sockets", ["bot", "owner", "epoch", "seen_at"],
          [[o["bot"], o["owner"], o["epoch"], o["seen_at"] or ""] for o in doc["bot_owners"]], "No bot's socket is held.", titled=True)
    for problem in doc["problems"]:
        console.print(f"{problem['code']}: {problem['message']}")


@app.command("copy")
def copy(
    ctx: typer.Context,
    to: Annotated[str, typer.Option("--to", metavar="URL|PATH", help="An empty PostgreSQL database (postgresql://...; - reads the URL from standard input), or a home's folder without a state.db.", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    """Copy the runtime state in use (with the run records and the audit log) into an empty
    PostgreSQL database, or into a SQLite home's folder (its state.db, runs/ and audit.jsonl);
    the counts of every table are printed and checked. Refused while any `fw dispatch` or
    `fw bot serve` serves the source. The source is left as it is; `fw state use` then moves
    the home over."""
    from ..runtime.state_admin import state_copy  # lazy: start-up speed

    home = home_of(ctx)
    doc = state_copy(home, _url_from_stdin("fw state copy --to -") if to == "-" else to)
    emit(doc, as_json, lambda c: _render_copy(c, doc))


def _render_copy(console: Any, doc: dict[str, Any]) -> None:
    rows = [[name, n] for name, n in doc["tables"].items() if name != "migrations"]
    console.print(f"Copied {doc['from']['engine']} at {doc['from']['location']} to {doc['to']}; every count checked.")
    table(console, "rows", ["table", "rows"], rows, "", titled=True)
