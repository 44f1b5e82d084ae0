"""fw message: post to a session and read it, as a chat log."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from .common import complete_principal, complete_session, home_of
from .output import JsonOpt, emit, read_text_arg

app = typer.Typer(help="Post messages to a session and read them.")

SessionArg = Annotated[str, typer.Argument(help="The session's name.", show_default=False, autocompletion=complete_session)]


def render_message(console: Any, m: dict[str, Any]) -> None:
    """One line of a chat log: time, author, text, with the mentions highlighted."""
    from rich.text import Text

    line = Text.assemble((m["created_at"][11:19], "dim"), " ", (m["author"], "bold"), ": ", m["text"])
    for name in m["mentions"]:
        line.highlight_words([f"@{name}"], style="bold cyan")
    console.print(line)


@app.command("post")
def post(
    ctx: typer.Context,
    session: SessionArg,
    as_: Annotated[str, typer.Option("--as", help="The member posting it.", show_default=False, autocompletion=complete_principal)],
    text: Annotated[Optional[str], typer.Argument(help="The text, taken literally ('-' reads standard input).", show_default=False)] = None,
    file: Annotated[Optional[str], typer.Option("--file", metavar="PATH", help="Read the text from this file.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Post a message as a member. Each member agent it mentions (@name), or every member
    agent under policy all, gets a turn that `fw dispatch` runs."""
    from ..runtime.sessions import message_post  # lazy: start-up speed

    doc = message_post(home_of(ctx), session, as_, _text(text, file))

    def human(console: Any) -> None:
        render_message(console, doc["message"])
        for turn in doc["turns"]:
            console.print(f"  turn {turn['id']} for {turn['principal']}: {turn['status']}")

    emit(doc, as_json, human)


def _text(text: Optional[str], file: Optional[str]) -> str:
    from ..errors import FwError  # lazy: start-up speed

    if (text is None) == (file is None):
        raise FwError("usage", "give the text, or --file PATH, or - for standard input", "e.g. fw message post s1 --as alice 'hello @ops'")
    return read_text_arg(text, file, "the message")


@app.command("list")
def list_(
    ctx: typer.Context,
    session: SessionArg,
    limit: Annotated[Optional[int], typer.Option("--limit", metavar="N", help="Only the last N messages (default: all).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List a session's messages, oldest first."""
    from ..runtime.sessions import message_list  # lazy: start-up speed

    doc = message_list(home_of(ctx), session, limit)

    def human(console: Any) -> None:
        if not doc["messages"]:
            console.print(f"No messages in {session} yet.")
        for message in doc["messages"]:
            render_message(console, message)

    emit(doc, as_json, human)
