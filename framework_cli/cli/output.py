"""Everything the CLI prints goes through here, and so through redaction."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
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
# Text printed as it is (a file's lines in a dry run's diff) stands between these two marks: the
# commands in it are not rewritten (a comment that says "fw keeps it" stays as it is).
VERBATIM_START, VERBATIM_END = "\ue000", "\ue001"
_VERBATIM = re.compile("(\ue000.*?\ue001)", re.S)


def verbatim(text: str) -> str:
    return f"{VERBATIM_START}{text}{VERBATIM_END}"


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
        return text.replace(VERBATIM_START, "").replace(VERBATIM_END, "")
    import shlex

    option = f"fw --home {shlex.quote(_home_option)} "
    return "".join(part[1:-1] if part.startswith(VERBATIM_START) else FW_COMMAND.sub(option, part) for part in _VERBATIM.split(text))


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
        stream.write(text if text.endswith("\n") else text + "\n")  # one write: lines of two threads never interleave
        stream.flush()
    except BrokenPipeError:
        _reader_went_away(stream)


# -- a tool call's progress -------------------------------------------------------------
def progress_text(progress: dict[str, Any]) -> str:
    """`3/10: copying` (or `3`, `3/10`, `3: copying`): a progress notification in words."""
    amount = f"{progress['progress']:g}" + (f"/{progress['total']:g}" if progress.get("total") is not None else "")
    return f"{amount}: {progress['message']}" if progress.get("message") else amount


class _ProgressLines:
    """At most a few progress lines a second for one tool (a server may send hundreds); the
    last one (progress equal to total) always shows."""

    EVERY = 0.25

    def __init__(self) -> None:
        self._shown: dict[str, float] = {}

    def due(self, event: dict[str, Any]) -> bool:
        now, name = time.monotonic(), event["name"]
        last = event.get("total") is not None and event["progress"] >= event["total"]
        if last or now - self._shown.get(name, 0.0) >= self.EVERY:
            self._shown[name] = now
            return True
        return False


PROGRESS_LINES = _ProgressLines()


class StreamedText:
    """Text written to stdout piece by piece as it arrives (a streamed answer), redacted: the
    end of a piece that could begin a secret waits for the next piece."""

    def __init__(self) -> None:
        self._held = ""
        self.open = False  # written text not yet ended by a newline

    def write(self, piece: str) -> None:
        # What could begin a secret is held back before anything is redacted: redacting a
        # cut start of a key first would let the rest of it through with the next piece.
        text = self._held + piece
        keep = unsafe_tail(text)
        self._held = text[len(text) - keep:] if keep else ""
        self._put(redact(text[:len(text) - keep]))

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


_json_lines = {"on": False}  # a server's --json output: one document a line, its last error too


def set_json_lines(on: bool = True) -> None:
    """This command writes JSON lines (a server's records as they happen), not one document:
    an error that ends it is one more line."""
    _json_lines["on"] = on


def emit_error(error: FwError, as_json: bool) -> None:
    error = FwError(error.code, error.message, on_this_home(error.hint), **error.extra)
    if as_json:
        if _json_lines["on"]:
            write_out(json.dumps(error.to_dict(), ensure_ascii=False))
            return
        print_json(error.to_dict())
        return
    lines = [f"Error: {error.message}"]  # then what it is about, then what to do (last, where the eye ends)
    detail = error.extra.get("items") or error.extra.get("detail")
    if isinstance(detail, list) and detail and not all(str(d) in error.message for d in detail):  # not said twice
        lines.append("  " + "\n  ".join(str(d) for d in detail))
    changes = error.extra.get("changes")
    if isinstance(changes, dict):
        lines += plan_changes(changes, never_planned=error.extra.get("reason") == "not_a_plan")
    if error.hint:
        lines.append(f"Hint: {error.hint}")
    write_out("\n".join(lines), err=True)


def plan_changes(changes: dict[str, Any], never_planned: bool = False) -> list[str]:
    """A stale confirmation's differences, as the JSON error's `changes` has them; for one
    that never was a plan, how it differs from the plan (nothing in the home changed)."""
    lines = ["How the confirmation differs from the plan:" if never_planned else "What changed since the confirmed plan:"]
    labels = (("added", "missing from it"), ("gone", "not in the plan")) if never_planned else (("added", "added"), ("gone", "gone"))
    for key, label in (*labels, ("duplicated", "given twice")):
        if changes.get(key):
            lines.append(f"  {label}: {', '.join(changes[key])}")
    if changes.get("reordered"):
        lines.append("  reordered: the same items, in another order")
    return lines


# Columns that hold an id or a name: never cut, never wrapped, never dropped.
KEY_COLUMNS = frozenset((
    "name", "run_id", "id", "run", "principal", "agent", "identity", "session", "tool", "bot", "key",
    "model", "check", "field", "caller", "category", "kind", "api",
))
NARROWEST = 12  # a less important column is cut (with "…") down to this, before any is dropped


def table(console: Any, title: str | None, columns: list[str], rows: list[list[Any]], empty: str, *, titled: bool = False) -> None:
    """Rows in aligned plain columns, as kubectl prints them. Piped, every cell is whole,
    whatever the width, and an empty cell is "-", so that `awk` counts fields right; the
    title is shown only on a terminal (or when `titled`, for output of several tables).
    On a terminal the table fits its width: less important columns are cut, then dropped,
    from the right; an id or a name is never cut."""
    if not rows:
        console.print(empty)
        return
    tty = bool(getattr(console, "is_terminal", False))
    cells = [list(columns)] + [[redact(_text(v)).replace("\n", " ") if v is not None else "" for v in row] for row in rows]
    cells = [[c or "-" for c in row] for row in cells]
    shown = list(range(len(columns)))
    widths = [max(len(row[i]) for row in cells) for i in shown]
    hidden: list[str] = []
    if tty:
        shown, widths, hidden = _fit(columns, shown, widths, max(20, console.width))
    lines = [f"{title} ({len(rows)})"] if title and (tty or titled) else []
    for row in cells:
        parts = [_cut(row[i], w) for i, w in zip(shown, widths)]
        lines.append("  ".join(p.ljust(w) for p, w in zip(parts, widths)).rstrip())
    if hidden:
        lines.append(wrapped(f"(not shown, for the width: {', '.join(hidden)}; see --json)", console, ""))
    console.file.write("\n".join(lines) + "\n")


def _fit(columns: list[str], shown: list[int], widths: list[int], width: int) -> tuple[list[int], list[int], list[str]]:
    """Cut the widest less important column down to NARROWEST, then drop the rightmost
    one, until the table fits `width` (key columns stay whole, even if it then does not)."""
    def total() -> int:
        return sum(widths) + 2 * (len(widths) - 1)

    minor = [p for p, i in enumerate(shown) if columns[i] not in KEY_COLUMNS]
    while total() > width:
        cuttable = [p for p in minor if widths[p] > NARROWEST]
        if not cuttable:
            break
        widest = max(cuttable, key=lambda p: widths[p])
        widths[widest] = max(NARROWEST, widths[widest] - (total() - width))
    hidden: list[str] = []
    while total() > width and any(columns[i] not in KEY_COLUMNS for i in shown):
        last = max(p for p, i in enumerate(shown) if columns[i] not in KEY_COLUMNS)
        hidden.insert(0, columns[shown[last]])
        del shown[last], widths[last]
    return shown, widths, hidden


def _cut(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[: width - 1] + "…"


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
LONG_LIST = 12  # names; past this a list is counted, and shown with -v


def wrapped(text: str, console: Any, indent: str) -> str:
    """`text` wrapped to the console's width at spaces only: a name is never cut."""
    import textwrap

    width = max(40, getattr(console, "width", 80) or 80)
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)


def names_line(label: str, names: list[str], console: Any, verbose: bool, indent: str = "  ") -> str:
    """`tools (3): a, b, c`, wrapped; a long list is counted unless `verbose`."""
    if len(names) > LONG_LIST and not verbose:
        return f"{indent}{label}: {len(names)} (list them with -v, or --json)"
    return wrapped(f"{label} ({len(names)}): {', '.join(names)}", console, indent)


def render_run_tools(console: Any, doc: dict[str, Any], verbose: bool = False) -> None:
    """A run's tools, then what was left out of them and why (`unavailable_tools`)."""
    tools, left_out = doc.get("tools") or [], doc.get("unavailable_tools") or []
    if tools:
        console.print(names_line("tools", tools, console, verbose))
    elif not left_out:
        console.print("  tools: none (no group mounted, or the model cannot call tools)")
    else:
        console.print("  tools: none")
    groups: dict[tuple[str, str], list[str]] = {}
    for entry in left_out:
        groups.setdefault((entry.get("reason", ""), str(entry.get("detail") or "")), []).append(entry.get("name", ""))
    if groups:
        console.print(f"  left out ({len(left_out)}):")
    for (reason, detail), names in groups.items():
        console.print(wrapped(f"{reason}: {detail}" if detail else reason, console, "    "))
        console.print(names_line("names", names, console, verbose, indent="      "))


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
        raise FwError("not_found", f"{what} file {path!r} does not exist", "check the path") from None
    except OSError as exc:
        raise FwError("invalid", f"cannot read {what} file {path!r}: {exc.strerror}", "give the path of a readable file") from None
    except UnicodeDecodeError:
        raise FwError("invalid", f"{what}: file {path!r} is not UTF-8 text", "give a text file") from None


def read_text_arg(text: str | None, path: str | None, what: str) -> str:
    """Text given literally, as - (standard input), or from a file."""
    if path is not None:
        return read_text_file(path, what)
    return read_stdin_text(what) if text == "-" else str(text)


EXAMPLES = {"--data": '{"description": "..."}', "--args": '{"kind": "agent"}', "--event": '{"type": "message.received", ...}'}


def read_data_arg(value: str, what: str) -> Any:
    """JSON or YAML (JSON is YAML) given inline, as @FILE, or as - (standard input): the
    home's own files are YAML, so `--data @agent.yaml` takes one as it is."""
    example = f"pass a JSON or YAML object, e.g. '{EXAMPLES.get(what, EXAMPLES['--data'])}', @FILE (.json or .yaml) or - for stdin"
    text = read_text_arg(value, value[1:] if value.startswith("@") else None, what)
    try:
        data = _json_or_yaml(text, what, example)
    except RecursionError:
        data = None
        depth = MAX_DEPTH + 1
    else:
        depth = _depth(data)
    if depth > MAX_DEPTH:
        raise FwError("invalid", f"{what} is nested more than {MAX_DEPTH} levels deep", example)
    return data


def _json_or_yaml(text: str, what: str, example: str) -> Any:
    """JSON first (the common case, and the fastest); YAML, read as the home's files are
    (true/false only as booleans, a duplicate key refused), when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        json_problem = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    from ..home.yamlio import YamlProblem, fast_load  # lazy: start-up speed

    try:
        return fast_load(text)
    except YamlProblem as exc:
        looks_like_json = text.lstrip()[:1] in ("{", "[", '"')
        raise FwError("invalid", f"{what} is not valid JSON or YAML: {json_problem if looks_like_json else exc.message}", example) from None


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
