"""Everything the CLI prints goes through here, and so through redaction."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any

import typer

from ..errors import FwError
from ..home.secrets import redact, unsafe_tail

JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON document on stdout instead of text (also FW_JSON=1)."),
]


_root_json = False  # `fw --json COMMAND`: set by the root callback on every invocation
_home_option: str | None = None  # `fw --home PATH COMMAND`: the commands we print name it too
# `fw home init PATH` names its home itself
FW_COMMAND = re.compile(r"(?<![\w/.-])fw (?!--home |home init )(?=[a-z][a-z-]* )")  # any command group


def set_root_json(flag: bool) -> None:
    global _root_json
    _root_json = flag


def set_home_option(path: str | None) -> None:
    global _home_option
    _home_option = path


def on_this_home(text: str) -> str:
    """The `fw ...` commands in a message, with the --home this command was given, so that
    each runs as printed on the same home."""
    if _home_option is None:
        return text
    import shlex

    return FW_COMMAND.sub(lambda m: f"fw --home {shlex.quote(_home_option)} ", text)


def json_wanted(flag: bool = False) -> bool:
    return flag or _root_json or os.environ.get("FW_JSON", "") not in ("", "0", "false", "no")


# Where a value printed once (a run's gateway token) stands in a document until it is written:
# everything else is redacted first, and then the value takes its place.
SHOWN_ONCE = "@@fw-shown-once@@"


def write_out(text: str, *, err: bool = False, reveal: str | None = None) -> None:
    stream = sys.stderr if err else sys.stdout
    text = redact(text)
    if reveal is not None:
        text = text.replace(SHOWN_ONCE, reveal)
    try:
        stream.write(text)
        if not text.endswith("\n"):
            stream.write("\n")
        stream.flush()
    except BrokenPipeError:
        _reader_went_away(stream)


class StreamedText:
    """Text written to stdout piece by piece as it arrives (a streamed answer), redacted: the
    end of a piece that could begin a secret waits for the next piece."""

    def __init__(self) -> None:
        self._held = ""
        self.open = False  # written text not yet ended by a newline

    def write(self, piece: str) -> None:
        text = redact(self._held + piece)
        keep = unsafe_tail(text)
        self._held = text[len(text) - keep:] if keep else ""
        self._put(text[:len(text) - keep])

    def end_line(self) -> None:
        """Flush what is held and end the line, if any text was written."""
        if self._held:
            self._put(redact(self._held))
            self._held = ""
        if self.open:
            self._put("\n")
            self.open = False

    def _put(self, text: str) -> None:
        if not text:
            return
        if any("\ud800" <= ch <= "\udfff" for ch in text):  # a lone surrogate cannot be printed: show "?"
            text = text.encode("utf-8", "replace").decode("utf-8")
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            _reader_went_away(sys.stdout)
        self.open = not text.endswith("\n")


STREAM_BATCH = 1000  # pieces written at once: few writes, and little held in memory


def write_stream(pieces: Iterable[str]) -> None:
    """Write text as it is made, a batch of pieces at a time, each batch redacted (a piece
    holds whole lines, so no secret is cut in two). A reader that goes away ends the
    stream: nobody is listening to the rest."""
    stream = sys.stdout
    batch: list[str] = []
    try:
        for piece in pieces:
            batch.append(piece)
            if len(batch) >= STREAM_BATCH:
                stream.write(redact("".join(batch)))
                batch.clear()
        stream.write(redact("".join(batch)))
        stream.flush()
    except BrokenPipeError:
        _reader_went_away(stream)
        raise typer.Exit(0) from None


def _reader_went_away(stream: Any) -> None:
    """The reader closed the pipe (`fw ... | head -c0`): nobody is listening, so drop what
    is left instead of failing again when Python flushes the stream at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (an in-process test runner): nothing to flush at exit


def print_json(doc: Any, reveal: str | None = None) -> None:
    write_out(json_text(doc), reveal=reveal)


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _one_line_encoder() -> Callable[[Any], str]:
    """JSON of one value on one line. CPython's C encoder is made once and reused: made
    anew for every item of a listing of thousands, it costs more than the encoding."""
    encoder = json.JSONEncoder(ensure_ascii=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    c_encode = make(None, encoder.default, json.encoder.encode_basestring, None, ": ", ", ", False, False, True)

    def encode(value: Any) -> str:
        return "".join(c_encode(value, 0))

    return encode


_encode = _one_line_encoder()


def _flat(value: Any) -> bool:
    """A scalar, or a list or mapping of scalars."""
    kind = type(value)
    if kind is dict:
        return all(type(v) in _SCALARS for v in value.values())
    if kind is list:
        return all(type(v) in _SCALARS for v in value)
    return kind in _SCALARS


def _one_line(value: Any) -> bool:
    """A record (a mapping of flat values) or a flat list: printed on one line."""
    if type(value) is not dict:
        return _flat(value)
    for item in value.values():  # a loop, not all(): this runs once per item of a listing
        if type(item) not in _SCALARS and not _flat(item):
            return False
    return True


def json_text(value: Any, depth: int = 0) -> str:
    """Indented JSON whose records (a listing's items, a plan's blocks) each take one line:
    as readable as `indent=2`, and encoded by the C encoder, so a listing of thousands of
    items prints in a fraction of the time."""
    if not isinstance(value, (dict, list)) or not value or (depth > 1 and _one_line(value)):
        return _encode(value)
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict):
        parts = [f"{inner}{_encode(str(k))}: {json_text(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(parts) + f"\n{pad}}}"
    parts = [inner + _list_item(v, depth) for v in value]
    return "[\n" + ",\n".join(parts) + f"\n{pad}]"


def _list_item(value: Any, depth: int) -> str:
    """An item of a list at `depth`, as `json_text` writes it."""
    return _encode(value) if depth > 0 and _one_line(value) else json_text(value, depth + 1)


def print_json_stream(head: dict[str, Any], key: str, items: Iterable[Any]) -> None:
    """`print_json({**head, key: [*items]})`, byte for byte, written while the items are
    read, so a listing of any length takes the memory of one batch. An error while reading
    (`FwError`) still ends one valid document: the items so far, then `"error"`; the exit
    code is the error's."""
    failed: list[FwError] = []
    write_stream(_json_pieces(head, key, items, failed))
    if failed:
        raise typer.Exit(failed[0].exit_code)


def _json_pieces(head: dict[str, Any], key: str, items: Iterable[Any], failed: list[FwError]) -> Iterator[str]:
    yield "{\n" + "".join(f"  {_encode(str(k))}: {json_text(v, 1)},\n" for k, v in head.items()) + f"  {_encode(key)}: "
    count = 0
    try:
        for item in items:
            yield ("[\n    " if count == 0 else ",\n    ") + _list_item(item, 1)
            count += 1
    except FwError as exc:
        failed.append(exc)
    yield "[]" if count == 0 else "\n  ]"
    if failed:
        error = FwError(failed[0].code, failed[0].message, on_this_home(failed[0].hint), **failed[0].extra)
        yield ',\n  "error": ' + json_text(error.to_dict()["error"], 1)
    yield "\n}\n"


def stdout_is_terminal() -> bool:
    return hasattr(sys.stdout, "isatty") and sys.stdout.isatty()


def screen_lines() -> int:
    """A screenful: the terminal's height, or 24 lines when the output is not a terminal."""
    import shutil

    return shutil.get_terminal_size((100, 24)).lines if stdout_is_terminal() else 24


def rich_text(render: Callable[[Any], None], *, err: bool = False, reveal: str | None = None) -> None:
    """Render with rich into a buffer, redact, then write: rich never writes a secret out."""
    import io
    import shutil

    from rich.console import Console

    stream = sys.stderr if err else sys.stdout
    buf = io.StringIO()
    tty = hasattr(stream, "isatty") and stream.isatty()
    width = shutil.get_terminal_size((100, 24)).columns if tty else 100
    # markup off: a user's "[/red]" is text, never a tag; styles come as rich Text
    console = Console(file=buf, force_terminal=tty, width=width, highlight=False, soft_wrap=True, markup=False)
    render(console)
    write_out(on_this_home(buf.getvalue()), err=err, reveal=reveal)


def emit(doc: Any, as_json: bool, human: Callable[[Any], None], reveal: str | None = None) -> None:
    """Print a result: the document itself in JSON mode, `human(console)` otherwise. With
    `reveal`, that value replaces SHOWN_ONCE in what is printed, after redaction."""
    if json_wanted(as_json):
        print_json(doc, reveal)
    else:
        rich_text(human, reveal=reveal)


def describe_runner(runner: Any) -> str:
    """`fw's model loop`, or the external program a harness names."""
    if not isinstance(runner, dict) or runner.get("type") != "external":
        return "local (fw's own model loop" + (f", harness {runner['harness']})" if isinstance(runner, dict) and runner.get("harness") else ")")
    return f"external (harness {runner.get('harness')}: {shlex.join(runner.get('command') or [])})"


def emit_started(doc: dict[str, Any], run: dict[str, Any], as_json: bool, human: Any) -> None:
    """Print a run just started, its gateway token with it: the only time the token is shown."""
    token = run.pop("gateway_token", None)
    if token is not None:
        run["gateway_token"] = SHOWN_ONCE
    emit(doc, as_json, human, reveal=token)


def emit_error(error: FwError, as_json: bool) -> None:
    error = FwError(error.code, error.message, on_this_home(error.hint), **error.extra)
    if as_json:
        print_json(error.to_dict())
        return
    lines = [f"Error: {error.message}"]
    if error.hint:
        lines.append(f"Hint: {error.hint}")
    detail = error.extra.get("items") or error.extra.get("detail")
    if isinstance(detail, list) and detail:
        lines.append("  " + "\n  ".join(str(d) for d in detail))
    changes = error.extra.get("changes")
    if isinstance(changes, dict):
        lines += plan_changes(changes)
    write_out("\n".join(lines), err=True)


def plan_changes(changes: dict[str, Any]) -> list[str]:
    """A stale confirmation's differences, as the JSON error's `changes` has them."""
    lines = ["What changed since the confirmed plan:"]
    for key, label in (("added", "added"), ("gone", "gone"), ("duplicated", "given twice")):
        if changes.get(key):
            lines.append(f"  {label}: {', '.join(changes[key])}")
    if changes.get("reordered"):
        lines.append("  reordered: the same items, in another order")
    return lines


BIG_TABLE = 200  # rows; past this a plain text table, since rich lays out every cell


def table(console: Any, title: str | None, columns: list[str], rows: list[list[Any]], empty: str) -> None:
    from rich.table import Table

    if not rows:
        console.print(empty)
        return
    if len(rows) > BIG_TABLE:
        _plain_table(console, title, columns, rows)
        return
    t = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else _cell(v) for v in row))
    console.print(t)


def _plain_table(console: Any, title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    """Aligned columns, each cut at 48 characters: fast for thousands of rows."""
    cells = [columns] + [["" if v is None else _cell(v) for v in row] for row in rows]
    cells = [[c if len(c) <= 48 else c[:47] + "…" for c in row] for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = [f"{title} ({len(rows)})"] if title else []
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    console.file.write("\n".join(lines) + "\n")


def fitted_table(console: Any, columns: list[str], rows: list[list[str]], width: int = 80, shrinkable: tuple[int, ...] = ()) -> None:
    """Plain aligned columns within `width` characters: the widest shrinkable column is
    cut (with "…") until the table fits."""
    cells = [columns] + [[redact(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    while sum(widths) + 2 * (len(widths) - 1) > width and shrinkable:
        widest = max(shrinkable, key=lambda i: widths[i])
        if widths[widest] <= 8:
            break
        widths[widest] -= 1
    cut = [[c if len(c) <= w else c[: w - 1] + "…" for c, w in zip(row, widths)] for row in cells]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cut]
    console.file.write("\n".join(lines) + "\n")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items())
    return str(value)


def _cell(value: Any) -> str:
    # redacted here, before a cell is cut or folded over lines: a cut key is still a key
    return redact(_text(value))


MAX_DEPTH = 64  # nesting levels of a JSON argument; no definition or tool call needs more


def read_stdin_text(what: str) -> str:
    """Standard input as UTF-8 text, strictly: bytes that are not text are `invalid`, never
    carried on half-decoded."""
    try:
        return sys.stdin.buffer.read().decode("utf-8") if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    except UnicodeDecodeError:
        raise FwError("invalid", f"{what} on standard input is not UTF-8 text", "pipe text in") from None


def read_text_file(path: str, what: str) -> str:
    """A file's text, strictly UTF-8: a missing file is `not_found`, an unreadable one or one
    that is not text `invalid`."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise FwError("not_found", f"no {what} file {path!r}", "check the path") from None
    except OSError as exc:
        raise FwError("invalid", f"cannot read {what} file {path!r}: {exc.strerror}", "give the path of a readable file") from None
    except UnicodeDecodeError:
        raise FwError("invalid", f"{what}: file {path!r} is not UTF-8 text", "give a text file") from None


def read_text_arg(text: str | None, path: str | None, what: str) -> str:
    """Text given literally, as - (standard input), or from a file."""
    if path is not None:
        return read_text_file(path, what)
    return read_stdin_text(what) if text == "-" else str(text)


def read_data_arg(value: str, what: str) -> Any:
    """JSON given inline, as @FILE, or as - (standard input)."""
    example = "pass a JSON object, e.g. '{\"description\": \"...\"}', @FILE or - for stdin"
    text = read_text_arg(value, value[1:] if value.startswith("@") else None, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FwError("invalid", f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", example) from None
    except RecursionError:
        data = None
        depth = MAX_DEPTH + 1
    else:
        depth = _depth(data)
    if depth > MAX_DEPTH:
        raise FwError("invalid", f"{what} is nested more than {MAX_DEPTH} levels deep", example)
    return data


def _depth(data: Any) -> int:
    """Nesting depth of parsed JSON, without recursion (the data may be deep)."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        value, level = todo.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        if isinstance(value, dict):
            todo.extend((v, level + 1) for v in value.values())
        elif isinstance(value, list):
            todo.extend((v, level + 1) for v in value)
    return deepest
