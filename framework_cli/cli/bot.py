"""fw bot: the home's bots (doors to chat platforms), and the local platform's own commands."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Optional

import typer

from ..errors import FwError
from .common import (
    DryRunOpt,
    complete_bot,
    complete_choice,
    complete_principal,
    home_of,
    listed,
    maybe_dry,
    render_dry_run,
    run_gateway,
)
from .output import JsonOpt, emit, table

app = typer.Typer(help="Add, list, show, change and remove bots; try a local bot with `fw bot local`.")
local_app = typer.Typer(help="A local bot's platform (inside state.db): say something as a user, read what the bot did.")
app.add_typer(local_app, name="local")

NameArg = Annotated[str, typer.Argument(help="The bot's name.", show_default=False, autocompletion=complete_bot)]


def _render_bot(console: Any, doc: dict[str, Any]) -> None:
    state = "online" if doc["online"] else "offline"
    console.print(f"Bot {doc['name']} ({doc['adapter']}, {state}): events go to principal {doc['principal']}.")
    if doc["adapter"] == "onebot":
        how = {"http": f"over HTTP at {doc.get('url')}", "socket": "over its reverse WebSocket"}.get(doc["connection"], "not connected")
        console.print(f"  connected: {how}; access token {'set' if doc['access_token_set'] else 'not set'}, "
                      f"X-Signature secret {'set' if doc['secret_set'] else 'not set'}")
        seen = [f"its own id {doc['self_id']}" if doc.get("self_id") else None,
                f"last event {doc['last_event_at']}" if doc.get("last_event_at") else None,
                f"last heartbeat {doc['last_heartbeat_at']}" if doc.get("last_heartbeat_at") else None]
        if any(seen):
            console.print(f"  seen by fw bot serve: {'; '.join(s for s in seen if s)}")
    if doc.get("description"):
        console.print(f"  {doc['description']}")
    console.print(f"  supported APIs: {', '.join(doc['supported_apis']) or 'none'}")
    if doc.get("unsupported_apis"):
        console.print(f"  withheld: {', '.join(doc['unsupported_apis'])}")
    if doc.get("note"):
        console.print(f"  note: {doc['note']}")


@app.command("add")
def add(
    ctx: typer.Context,
    name: NameArg,
    adapter: Annotated[str, typer.Option("--adapter", autocompletion=complete_choice("local", "onebot"), help="local (a platform inside state.db) or onebot (OneBot v11: NapCat, Lagrange, LLOneBot, go-cqhttp).", show_default=False)],
    principal: Annotated[str, typer.Option("--principal", autocompletion=complete_principal, help="The principal (kind agent) whose binding handles its events.", show_default=False)],
    url: Annotated[Optional[str], typer.Option("--url", help="onebot: the base URL of its HTTP API; without it, actions go over the reverse WebSocket of `fw bot serve`.")] = None,
    access_token_stdin: Annotated[bool, typer.Option("--access-token-stdin", help="onebot: read its access token (8 characters or more) from standard input.")] = False,
    secret_stdin: Annotated[bool, typer.Option("--secret-stdin", help="onebot: read its X-Signature secret (8 characters or more) from standard input.")] = False,
    description: Annotated[Optional[str], typer.Option("--description", help="What it is for.")] = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Add a bot. A local bot starts online, with every API of the catalogue. A onebot bot
    acts over HTTP when given --url, otherwise over the reverse WebSocket that its
    implementation opens to `fw bot serve`, whose handshake carries the access token. A
    refused add writes nothing."""
    from ..platform.bots import bot_add  # lazy: start-up speed

    token, secret = _stdin_secret(access_token_stdin, secret_stdin)
    home = home_of(ctx)
    doc = maybe_dry(home, dry_run, lambda: bot_add(home, name, adapter, principal, url=url, description=description, access_token=token,
                                                   secret=secret))
    emit(doc, as_json, lambda c: render_dry_run(c, doc) if dry_run else (c.print(f"Added bot {name}."), _render_bot(c, doc)))


def _stdin_secret(token_flag: bool, secret_flag: bool) -> tuple[str | None, str | None]:
    """The access token or the secret, read from standard input: one value, so one flag."""
    if token_flag and secret_flag:
        raise FwError("usage", "--access-token-stdin and --secret-stdin both read standard input: give one at a time",
                      "set the other with a second command, e.g. `printf %s \"$SECRET\" | fw bot set NAME --secret-stdin`")
    value = sys.stdin.read().strip() if token_flag or secret_flag else None
    return (value, None) if token_flag else (None, value)


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List bots, with their adapter, principal and whether they are online."""
    from ..platform.bots import bot_list  # lazy: start-up speed

    doc = bot_list(home_of(ctx))
    columns = ["name", "adapter", "principal", "online", "self_id", "last_event_at", "last_heartbeat_at"]
    rows = [[b["name"], f"CORRUPT: {b['error']['message']}", "", "", "", "", ""] if "error" in b else [b.get(k) for k in columns]
            for b in doc["bots"]]
    emit(doc, as_json, lambda c: table(c, "bots", columns, rows, "No bots yet. Add one with `fw bot add NAME --adapter local --principal P`."))


@app.command("show")
def show(ctx: typer.Context, name: NameArg, as_json: JsonOpt = False) -> None:
    """Show a bot: its definition, the APIs its adapter supports (less those withheld) and
    whether it is online."""
    from ..platform.bots import bot_show  # lazy: start-up speed

    doc = bot_show(home_of(ctx), name)
    emit(doc, as_json, lambda c: _render_bot(c, doc))


@app.command("remove")
def remove(ctx: typer.Context, name: NameArg, as_json: JsonOpt = False) -> None:
    """Remove a bot. Runs started for it can no longer act through it; its events still waiting
    are cancelled, and what state.db kept of it (its own id, the reports it saw) is forgotten."""
    from ..engine.events import remove_bot  # lazy: start-up speed

    doc = remove_bot(home_of(ctx), name)
    emit(doc, as_json, lambda c: c.print(f"Removed bot {name}."))


@app.command("set")
def set_(
    ctx: typer.Context,
    name: NameArg,
    unsupported_api: Annotated[Optional[list[str]], typer.Option("--unsupported-api", metavar="API", help="Withhold this API from its runs (repeat, or a,b; replaces the list; '' clears it).")] = None,
    online: Annotated[Optional[bool], typer.Option("--online/--offline", help="Take a local bot online or offline.", show_default=False)] = None,
    url: Annotated[Optional[str], typer.Option("--url", help="onebot: the base URL of its HTTP API ('' removes it: the reverse WebSocket alone).")] = None,
    access_token_stdin: Annotated[bool, typer.Option("--access-token-stdin", help="onebot: read a new access token (8 characters or more) from standard input.")] = False,
    secret_stdin: Annotated[bool, typer.Option("--secret-stdin", help="onebot: read its X-Signature secret (8 characters or more) from standard input.")] = False,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Change a bot. Withheld APIs and going offline apply at once, to started runs too. Only one
    of --access-token-stdin and --secret-stdin at a time (standard input holds one value)."""
    from ..platform.bots import bot_set  # lazy: start-up speed

    token, secret = _stdin_secret(access_token_stdin, secret_stdin)
    home = home_of(ctx)
    doc = maybe_dry(home, dry_run, lambda: bot_set(home, name, unsupported_apis=listed(unsupported_api), online=online, secret=secret,
                                                   url=url, access_token=token))
    emit(doc, as_json, lambda c: render_dry_run(c, doc) if dry_run else _render_bot(c, doc))


@app.command("serve")
def serve(
    ctx: typer.Context,
    names: Annotated[Optional[list[str]], typer.Argument(metavar="BOT...", help="The onebot bots to serve on one listener.", show_default=False, autocompletion=complete_bot)] = None,
    all_: Annotated[bool, typer.Option("--all", help="Serve every onebot bot of the home.")] = False,
    listen: Annotated[str, typer.Option("--listen", metavar="HOST:PORT", help="Where to listen (port 0: a free one). Loopback unless told otherwise.")] = "127.0.0.1:8080",
    concurrency: Annotated[int, typer.Option("--concurrency", "--workers", metavar="N", help="Event runs in flight at once (waiting for a model holds no thread); the others wait in state.db, in order, one at a time per group or private chat (--workers is its old name).")] = 256,
    max_body: Annotated[Optional[int], typer.Option("--max-body", metavar="BYTES", help="The largest report accepted (default 1 MiB); larger ones get 413, unread.")] = None,
    max_connections: Annotated[Optional[int], typer.Option("--max-connections", metavar="N", help="Connections open at once (default 512); more are closed at once.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve onebot bots: HTTP reports at / and the reverse WebSocket at /onebot/v11/ws, one
    listener for all of them (a report is told apart by its X-Self-ID or its signature, a
    socket by its access token). An event the bot's principal takes is queued in state.db and
    the implementation answered at once; the event runs as `fw event handle` does, one at a
    time per conversation (a group, a private chat), many conversations side by side. One
    line, with its time, for each thing that happens (a JSON object a line with --json). A bot
    with a url and no secret takes reports only on a loopback address. Ctrl-C or SIGTERM stops
    it: runs in progress are ended and their processes stopped (exit 130); with none in flight
    it exits 0. Events still waiting are run by the next server of the bot, within 10 minutes."""
    import json
    import threading

    from ..serve.bot import all_bots, serve_bots  # lazy: start-up speed
    from ..serve.http import DoorLimits, RefusalLog, check_limits  # lazy: start-up speed
    from .output import json_wanted, set_json_lines, write_out  # lazy: start-up speed

    home = home_of(ctx)
    if all_ and names:
        raise FwError("usage", "give bot names or --all, not both", "e.g. fw bot serve --all")
    bots = all_bots(home) if all_ else list(names or [])
    body, connections = check_limits(max_body, max_connections)
    lock = threading.Lock()
    as_lines = json_wanted(as_json)
    if as_lines:
        set_json_lines()

    def on_record(record: dict[str, Any]) -> None:
        record = {"time": _now(), **record}
        with lock:
            write_out(json.dumps(record, ensure_ascii=False) if as_lines else f"{record['time']} {serve_line(record)}")

    refused = RefusalLog(lambda what, why: on_record({"type": "refused", "what": what, "why": why}))
    serve_bots(home, bots, listen, concurrency, on_record, DoorLimits(max_body=body, max_connections=connections, refused=refused))


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def _event_words(event: dict[str, Any]) -> str:
    where = f" in group {event['group']['id']}" if event.get("group") else ""
    return f"{event['type']} from {event['actor']['id']}{where}"


def _listening_words(r: dict[str, Any]) -> str:
    names = ", ".join(b["bot"] for b in r["bots"])
    doors = []
    for b in r["bots"]:
        if b["report_door"]:
            signed = "signed with its secret" if b["signed"] else "unsigned (loopback only)"
            doors.append(f"{b['bot']}: HTTP client with URL {r['http']} ({signed})")
        token = "its access token" if b["token"] else "no token yet: add one, the socket needs it"
        doors.append(f"{b['bot']}: WebSocket client with URL {r['websocket']} and {token}")
    wide = "" if r["loopback"] else " Listening beyond loopback: every report must be signed."
    left = f" {r['waiting']} event(s) left waiting by an earlier server run first." if r.get("waiting") else ""
    return f"fw bot serve {names}: listening on {r['http']}. In NapCat, add {'; '.join(doors)}.{wide}{left} Ctrl-C stops."


def serve_line(r: dict[str, Any]) -> str:
    """One line of `fw bot serve` for one thing that happened."""
    kind = r["type"]
    bot = f"bot {r['bot']}: " if r.get("bot") and kind not in ("listening",) else ""
    if kind == "listening":
        return _listening_words(r)
    if kind == "handled":
        if not r["handled"]:
            return f"{bot}{_event_words(r['event'])}: not handled ({r['reason']})"
        calls = ", ".join(f"{c['name']} {c['outcome']}" for c in r["tool_calls"]) or "none"
        return f"{bot}{_event_words(r['event'])}: run {r['run_id']} {r['status']}; tool calls: {calls}"
    if kind == "failed":
        if "event" not in r:
            return f"{bot}failed: {r.get('why')}"
        run = f" (run {r['run_id']})" if r.get("run_id") else ""
        return f"{bot}{_event_words(r['event'])}: failed{run}: {r['error']['code']}: {r['error']['message']}"
    if kind == "queue_over":
        return (f"{bot}principal {r['principal']} has {r['waiting']} events waiting, more than its max_queue {r['max_queue']}: "
                "nothing is dropped; see `fw status`")
    if kind == "queue_normal":
        return f"{bot}principal {r['principal']} is back to {r['waiting']} events waiting (max_queue {r['max_queue']})"
    if kind == "duplicate":
        return f"{bot}{_event_words(r['event'])}: a repeat of a report already handled ({r['key']}): skipped"
    if kind == "refused":
        what = {"websocket": "a WebSocket handshake", "report": "a report", "client": "a client", "frame": "a frame"}.get(r["what"], r["what"])
        return f"refused {what}: {r['why']}"
    if kind == "connected":
        return f"{bot}a WebSocket connected (self id {r.get('self_id') or 'not given'})"
    if kind == "disconnected":
        return f"{bot}a WebSocket closed (self id {r.get('self_id') or 'not given'})"
    if kind in ("online", "offline"):
        return f"{bot}{kind}: {r['why']}"
    if kind == "learned":
        return f"{bot}its own id is {r['self_id']}"
    if kind == "report_door_off":
        return f"{bot}takes no HTTP reports here: {r['why']}"
    if kind == "internal":
        return f"{bot}INTERNAL ERROR: {r['why']}"
    if kind == "busy":
        return f"{bot}answered 503: {r['why']}"
    if kind == "stopped":
        ended = f"ended {r['ended_runs']} run(s) in progress" if r["ended_runs"] else ""
        waiting = f"{r['waiting']} event(s) wait for the next server of the bot (run if it starts within 10 minutes)" if r["waiting"] else ""
        return "stopped" + (": " + "; ".join(p for p in (ended, waiting) if p) if ended or waiting else ".")
    return f"{bot}ignored: {r.get('why', kind)}"


@local_app.command("say")
def say(
    ctx: typer.Context,
    bot: Annotated[str, typer.Argument(help="The local bot.", show_default=False, autocompletion=complete_bot)],
    text: Annotated[str, typer.Argument(help="The message, taken literally.", show_default=False)],
    from_: Annotated[str, typer.Option("--from", metavar="USER", help="The user who says it (created on first use).", show_default=False)],
    group: Annotated[Optional[str], typer.Option("--group", metavar="G", help="Say it in this group (created on first use); otherwise to the bot in private.")] = None,
    no_run: Annotated[bool, typer.Option("--no-run", help="Start the run and stop there, for an external runner.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the id of the run it started (nothing if none), for scripts.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Say something to a local bot as a user, and handle the message as `fw event handle` does."""
    from ..engine.handling import local_say  # lazy: start-up speed
    from .agent import run_progress  # lazy: start-up speed
    from .event import bot_principal, render_handled  # lazy: start-up speed
    from .output import json_wanted, write_out  # lazy: start-up speed

    quiet = quiet and not json_wanted(as_json)
    doc = local_say(home_of(ctx), bot, from_, text, group, run=not no_run, on_event=None if json_wanted(as_json) or quiet else run_progress,
                    gateway=run_gateway)
    if doc.get("offline") and doc.get("handled"):  # a note, not the result, on standard error: a run met the offline platform
        write_out(f"Note: bot {bot} is offline, so its run's platform actions (event_reply among them) are refused; "
                  f"bring it back with `fw bot set {bot} --online`.", err=True)
    if quiet:
        if doc.get("run"):
            write_out(doc["run"]["run_id"])
        return

    def human(console: Any) -> None:
        where = f"in group {group}" if group else "in private"
        console.print(f"{from_} said message {doc['event']['message']['id']} {where}.")
        render_handled(console, doc, principal=bot_principal(home_of(ctx), bot))

    if doc.get("run") and "gateway_token" in doc["run"]:
        from .output import emit_started  # lazy: start-up speed

        emit_started(doc, doc["run"], as_json, human)
        return
    emit(doc, as_json, human)


@local_app.command("log")
def log(ctx: typer.Context, bot: Annotated[str, typer.Argument(help="The local bot.", show_default=False, autocompletion=complete_bot)], as_json: JsonOpt = False) -> None:
    """List every API call the local bot's platform served, oldest first."""
    import json

    from ..platform.bots import local_platform  # lazy: start-up speed

    doc = local_platform(home_of(ctx), bot).log()
    rows = [[a["time"], a["api"], json.dumps(a["params"], ensure_ascii=False), a.get("error")] for a in doc["actions"]]
    emit(doc, as_json, lambda c: table(c, f"actions of {bot}", ["time", "api", "params", "error"], rows, f"Bot {bot} has done nothing yet."))
