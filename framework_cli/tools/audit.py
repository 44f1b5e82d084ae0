"""The audit log: one JSON line a tool call, allowed or refused.

It records the shape of the parameters (keys and value types), never a value: no key, no
prompt body, no other raw parameter can reach it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import Any

from ..domain.run_records import RUN_ID_RE
from ..errors import FwError, without_lone_surrogates
from ..home.secrets import redact
from ..home.store import Home, write_failure
from ..state.location import AUDIT_FILE, state_url
from ..state.store import StateStore
from ..suggest import did_you_mean


def shape(value: Any) -> Any:
    """Keys and value types only: {"kind": "string", "data": {"api_key": "string"}}."""
    if isinstance(value, dict):
        return {without_lone_surrogates(redact(str(k))): shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return f"array[{len(value)}]"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "string"


def _run_id(run_id: str | None) -> str | None:
    """The run id as given, if it is one; anything else (a typo, a pasted key, a megabyte)
    is recorded as a marker, never raw."""

    if run_id is None or RUN_ID_RE.fullmatch(run_id):
        return run_id
    return "(malformed)"


def record(
    home: Home,
    *,
    caller: str,
    run_id: str | None,
    tool: str,
    params: Any,
    outcome: str,
    error_code: str | None = None,
    via: str | None = None,
) -> None:
    line = {
        "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "caller": caller,
        "run_id": _run_id(run_id),
        "tool": without_lone_surrogates(redact(tool))[:200],
        "params": shape(params),
        "outcome": outcome,
        "error": error_code,
        **({"via": via} if via else {}),  # the front door, when it is not fw's own (`gateway`)
    }
    text = json.dumps(line, ensure_ascii=False)
    if state_url(home.root) is not None:  # PostgreSQL: every host's lines in one table
        with StateStore.open(home) as store, store.transaction():
            store.insert("audit", {"line": text})
        return
    data = (text + "\n").encode("utf-8")
    with home.locked():  # one writer at a time; O_APPEND keeps every line whole
        try:
            fd = os.open(home.path(AUDIT_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise write_failure(exc, AUDIT_FILE) from None
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(28, "No space left on device")
                os.fsync(fd)
            except OSError as exc:
                os.ftruncate(fd, size)  # never half a line: the log ends where it ended
                raise write_failure(exc, AUDIT_FILE) from None
        finally:
            os.close(fd)


def audit_list(home: Home, limit: int = 50, *, run: str | None = None, tool: str | None = None,
               since: float | None = None) -> dict[str, Any]:
    """The latest `limit` entries, oldest first; only a run's (its id, or a unique start or
    end of it, as the listing shows runs), a tool's, or those of the last `since` seconds.
    None of a tool that was never called, but one with a close name was: `did_you_mean`."""
    if not isinstance(limit, int) or limit < 1:

        raise FwError("invalid", "the limit must be a whole number, at least 1", "e.g. --limit 20")
    lines = _lines(home)
    cutoff = None
    if since is not None:
        from datetime import datetime, timedelta, timezone

        cutoff = datetime.now(timezone.utc) - timedelta(seconds=since)
    entries = list(_entries(lines, run, tool, cutoff))[-limit:]
    if entries or tool is None:
        return {"entries": entries}
    called = {e.get("tool") for e in _entries(_lines(home), None, None, None) if isinstance(e.get("tool"), str)}
    return {"entries": entries, **({} if tool in called else did_you_mean(tool, called))}  # a tool name mistyped: the one meant


def audit_page(home: Home, number: int, size: int, *, run: str | None = None, tool: str | None = None) -> dict[str, Any]:
    """Page `number` (from 1) of the entries, newest first, `size` a page, filtered as
    `audit_list` filters: `{"entries", "older"}` (whether a further page exists). Read from
    the newest end and only as far as the page: the first pages of a long log cost what they
    show, not the whole log."""
    wanted = number * size + 1  # one more than the page: whether there is an older one
    entries: list[dict[str, Any]] = []
    for entry in _entries(_newest_first(home), run, tool, None):
        entries.append(entry)
        if len(entries) == wanted:
            break
    return {"entries": entries[(number - 1) * size: number * size], "older": len(entries) == wanted}


def _entries(lines: Iterable[str], run: str | None, tool: str | None, cutoff: Any) -> Iterator[dict[str, Any]]:
    """The entries of `lines` the filters select; a line that is not an entry is
    `{"corrupt_line": true}` (selected only when nothing is filtered)."""
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            entry = {"corrupt_line": True}
        if _selected(entry, run, tool, cutoff):
            yield entry


def _newest_first(home: Home, block: int = 65536) -> Iterator[str]:
    """The audit log's lines, newest first, read from its end a block at a time."""
    if state_url(home.root) is not None:
        with StateStore.open(home) as store:
            for row in store.rows("SELECT line FROM audit ORDER BY seq DESC"):
                yield row["line"]
        return
    try:
        handle = open(home.path(AUDIT_FILE), "rb")
    except FileNotFoundError:
        return
    with handle:
        end = handle.seek(0, os.SEEK_END)
        rest = b""  # the start of a line whose beginning is in an earlier block
        while end > 0:
            start = max(0, end - block)
            handle.seek(start)
            chunk = handle.read(end - start) + rest
            end = start
            lines = chunk.split(b"\n")
            rest = lines.pop(0) if start > 0 else b""
            for raw in reversed(lines):
                if raw.strip():
                    yield raw.decode("utf-8", "replace")


def _lines(home: Home) -> list[str]:
    """The audit log's lines, oldest first: audit.jsonl, or the store's table (PostgreSQL)."""
    if state_url(home.root) is None:
        text = home.read_text(AUDIT_FILE) or ""
        lines = text.split("\n")  # one entry a line: a U+2028 inside an entry's text does not end it
        return lines[:-1] if lines[-1] == "" else lines
    with StateStore.open(home) as store:
        return [row["line"] for row in store.rows("SELECT line FROM audit ORDER BY seq")]


def _selected(entry: dict[str, Any], run: str | None, tool: str | None, cutoff: Any) -> bool:
    if run is None and tool is None and cutoff is None:
        return True
    if entry.get("corrupt_line"):
        return False
    run_id = str(entry.get("run_id") or "")
    if run is not None and not (run_id == run or (run_id.startswith("run-") and (run_id.endswith(run) or run_id.startswith(run)))):
        return False
    if tool is not None and entry.get("tool") != tool:
        return False
    return cutoff is None or _time(entry.get("time")) >= cutoff


def _time(stamp: Any) -> Any:
    from datetime import datetime, timezone

    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
