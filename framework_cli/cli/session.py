"""fw session: the conversations managed agents run in."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..suggest import plural
from .common import complete_principal, complete_session, home_of, listed
from .output import JsonOpt, emit, table

app = typer.Typer(help="Create, list, show and end sessions: the conversations managed agents are mentioned in and answer.")

NameArg = Annotated[str, typer.Argument(help="The session's name.", show_default=False, autocompletion=complete_session)]


def _sessions():
    from ..runtime import sessions  # lazy: start-up speed

    return sessions


def render_session(console: Any, s: dict[str, Any]) -> None:
    console.print(f"Session {s['name']}{' (' + s['title'] + ')' if s['title'] else ''}: {s['status']}, {plural(s['messages'], 'message')}")
    console.print(f"  members: {', '.join(s['members']) or 'none'}")


@app.command("create")
def create(
    ctx: typer.Context,
    name: NameArg,
    member: Annotated[list[str], typer.Option("--member", help="A principal taking part (repeat, or a,b).", show_default=False, autocompletion=complete_principal)],
    title: Annotated[Optional[str], typer.Option("--title", help="What the session is about.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a session with its members. A message that mentions a member agent (@name)
    gives it a turn, which `fw dispatch` runs."""
    doc = _sessions().session_create(home_of(ctx), name, listed(member) or member, title)
    emit(doc, as_json, lambda c: render_session(c, doc["session"]))


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List sessions with their members and status."""
    doc = _sessions().session_list(home_of(ctx))
    cols = ["name", "title", "members", "status", "messages"]
    emit(doc, as_json, lambda c: table(c, "sessions", cols, [[s[k] for k in cols] for s in doc["sessions"]], "No sessions yet. Create one with `fw session create NAME --member P`."))


@app.command("show")
def show(ctx: typer.Context, name: NameArg, as_json: JsonOpt = False) -> None:
    """Show a session: members, status and its turns."""
    doc = _sessions().session_show(home_of(ctx), name)

    def human(console: Any) -> None:
        render_session(console, doc["session"])
        turns = doc["session"]["turns"]
        cols = ["id", "principal", "status", "message_id", "hop", "error"]
        table(console, "turns", cols, [[t[k] for k in cols] for t in turns], "  no turns", titled=True)

    emit(doc, as_json, human)


@app.command("end")
def end(ctx: typer.Context, name: NameArg, as_json: JsonOpt = False) -> None:
    """End a session: no message may be posted to it, no run tied to it may act, and its
    waiting turns are cancelled."""
    doc = _sessions().session_end(home_of(ctx), name)
    emit(doc, as_json, lambda c: c.print(f"Session {name} has ended; {plural(doc['cancelled_turns'], 'waiting turn')} cancelled."))


@app.command("delete")
def delete(
    ctx: typer.Context,
    name: NameArg,
    confirm: Annotated[Optional[str], typer.Option("--confirm", metavar="ITEMS", help="The plan's item (session/NAME). Without it nothing is deleted.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a session with its messages and turns, in two steps as every delete: first
    without --confirm, which prints the plan and deletes nothing; then with --confirm and
    exactly that plan."""
    doc = _sessions().session_delete(home_of(ctx), name, confirm)

    def human(console: Any) -> None:
        what = f"{plural(doc['messages'], 'message')} and {plural(doc['turns'], 'turn')}"
        if doc["status"] == "deleted":
            console.print(f"Deleted session {name} with {what}.")
            return
        console.print(f"Plan: session/{name} will be deleted, with {what}.")
        for block in doc["blocked"]:
            console.print(f"  blocked: {block['reason']} ({block['detail']}); end the session and let its turns finish first")
        if not doc["blocked"]:
            console.print("Nothing was deleted. To delete exactly this, run:")
            console.print(f"  fw session delete {name} --confirm {doc['confirm']}")

    emit(doc, as_json, human)


@app.command("add-member")
def add_member(
    ctx: typer.Context,
    name: NameArg,
    principal: Annotated[str, typer.Argument(help="The principal to add.", show_default=False, autocompletion=complete_principal)],
    as_json: JsonOpt = False,
) -> None:
    """Add a member to an open session."""
    doc = _sessions().session_add_member(home_of(ctx), name, principal)
    emit(doc, as_json, lambda c: render_session(c, doc["session"]))
