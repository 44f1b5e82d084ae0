"""fw message: post to a session and read it, as a chat log."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, islice
from typing import Annotated, Any, Optional

import typer

from .common import complete_principal, complete_session, home_of
from .output import (
    JsonOpt,
    json_wanted,
    print_json,
    print_json_stream,
    read_text_arg,
    rich_text,
    screen_lines,
    stdout_is_terminal,
    write_out,
    write_stream,
)

app = typer.Typer(help="Post messages to a session and read them.")

SessionArg = Annotated[str, typer.Argument(help="The session's name.", show_default=False, autocompletion=complete_session)]


def render_message(console: Any, m: dict[str, Any]) -> None:
    """One line of a chat log: time, author, text, with the mentions highlighted."""
    from rich.text import Text

    line = Text.assemble((m["created_at"][11:19], "dim"), " ", (m["author"], "bold"), ": ", m["text"])
    for name in m["mentions"]:
        line.highlight_words([f"@{name}"], style="bold cyan")
    console.print(line)


# What rich leaves out of a text (bell, backspace, vertical tab, form feed, carriage return),
# left out of plain lines too: a message must not move the cursor over what came before it.
CONTROL = dict.fromkeys((7, 8, 11, 12, 13))


def chat_line(m: dict[str, Any]) -> str:
    """The chat log's line of a message as plain text: what `render_message` prints
    without a terminal, written without loading rich."""
    return f"{m['created_at'][11:19]} {m['author']}: {m['text'].translate(CONTROL)}\n"


def log_rows(messages: Iterable[dict[str, Any]], width: int) -> Iterator[str]:
    """A long chat log as plain aligned rows (time, author, text); a text of several lines
    keeps to its column."""
    width = max(width, len("author"))
    indent = "\n" + " " * (10 + width + 2)
    yield f"{'time':<8}  {'author':<{width}}  text\n"
    for m in messages:
        text = m["text"].translate(CONTROL).replace("\n", indent)
        yield f"{m['created_at'][11:19]}  {m['author']:<{width}}  {text}\n"


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

    if json_wanted(as_json):
        print_json(doc)
        return
    if stdout_is_terminal():
        rich_text(lambda console: _render_posted(console, doc))
    else:  # without a terminal rich would print plain text: write it without loading rich
        write_stream([chat_line(doc["message"]), *(_turn_line(t) + "\n" for t in doc["turns"])])
    for name in doc.get("not_members", []):  # a note, not the result: on standard error
        write_out(f"Note: @{name} is not a member of {session}, so it gets no turn; "
                  f"add it with `fw session add-member {session} {name}`.", err=True)


def _render_posted(console: Any, doc: dict[str, Any]) -> None:
    render_message(console, doc["message"])
    for turn in doc["turns"]:
        console.print(_turn_line(turn))


def _turn_line(turn: dict[str, Any]) -> str:
    return f"  turn {turn['id']} for {turn['principal']}: {turn['status']}"


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
    """List a session's messages, oldest first. Past a screenful, plain aligned rows."""
    from ..runtime.sessions import message_stream  # lazy: start-up speed

    with message_stream(home_of(ctx), session, limit) as messages:
        if json_wanted(as_json):
            print_json_stream({"session": session}, "messages", messages)
        else:
            _print_log(session, messages)


def _render_log(console: Any, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        render_message(console, message)


def _print_log(session: str, messages: Any) -> None:
    """The chat log: as chat lines (styled on a terminal) up to a screenful, plain aligned
    rows past it, written as they are read."""
    rows = iter(messages)
    first = list(islice(rows, screen_lines() + 1))
    if not first:
        write_out(f"No messages in {session} yet.")
    elif len(first) > screen_lines():
        write_stream(log_rows(chain(first, rows), messages.author_width()))
    elif stdout_is_terminal():
        rich_text(lambda console: _render_log(console, first))
    else:
        write_stream(chat_line(m) for m in first)
