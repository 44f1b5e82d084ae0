"""Secret values have one home, `secrets/` (folder 0700, files 0600), and one way out: none.

Every value stored in the home, read from or written to the secret store, or given to fw
is remembered, and `redact` removes each of them from any text before it leaves (stdout,
stderr, errors, audit). Each invocation starts afresh (`forget_all`) and learns every secret
of the home it opens (`remember_home`), so what is redacted never depends on what an earlier
command of the same process happened to load.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import FwError
from .store import SECRETS_DIR, Home

REDACTED = "[redacted]"
_MIN_LEN = 6  # shorter values would mangle ordinary words; no real key is that short
_known: set[str] = set()
_homes_read: dict[str, tuple[int, ...]] = {}  # home -> the stamp of its secret store when last read


def remember(value: Any) -> None:
    if isinstance(value, str):
        if len(value) >= _MIN_LEN:
            _known.add(value)
    elif isinstance(value, dict):
        for item in value.values():
            remember(item)


def forget_all() -> None:
    _known.clear()
    _homes_read.clear()


def remember_home(home: Home) -> None:
    """Remember every secret value stored in the home; a damaged file is skipped here and
    reported where it is used (and by `fw home check`). The store is read again only when a
    folder of it changed (a long `fw dispatch` learns a key stored meanwhile)."""
    stamp = _store_stamp(home)
    if _homes_read.get(str(home.root)) == stamp:
        return
    _homes_read[str(home.root)] = stamp
    for kind, name in stored(home):
        try:
            load(home, kind, name)
        except FwError:
            pass


def _store_stamp(home: Home) -> tuple[int, ...]:
    """The modification times of the secret store's folders: writing a secret file (a temp
    file renamed into place) changes its folder's."""
    root = home.path(SECRETS_DIR)
    try:
        folders = [root, *(e.path for e in os.scandir(root) if e.is_dir())]
        return tuple(os.stat(f).st_mtime_ns for f in folders)
    except (FileNotFoundError, NotADirectoryError):
        return ()


def stored(home: Home) -> list[tuple[str, str]]:
    """(kind, name) of every file of the secret store."""
    out = []
    root = home.path(SECRETS_DIR)
    try:
        kinds = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for kind in kinds:
        for entry in sorted(os.scandir(root / kind), key=lambda e: e.name):
            if entry.name.endswith(".json") and not entry.name.startswith("."):
                out.append((kind, entry.name[:-5]))
    return out


def known_in(text: str) -> bool:
    """Whether `text` holds any remembered secret value."""
    return any(value in text for value in _known)


def redact(text: str) -> str:
    for value in sorted(_known, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def _rel(kind: str, name: str) -> str:
    return f"{SECRETS_DIR}/{kind}/{name}.json"


def load(home: Home, kind: str, name: str) -> dict[str, Any]:
    """The stored values of one resource ({} when none); `corrupt` when the file is damaged,
    never "no key": a damaged key file must not read as a missing key."""
    rel = _rel(kind, name)
    raw = home.read_text(rel)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not all(isinstance(v, (str, dict)) for v in data.values()):
            raise ValueError
    except ValueError:
        raise FwError(
            "corrupt",
            f"{rel} is not a JSON object of secret values",
            f"store the secret again (for a provider: `printf %s \"$KEY\" | fw resource write provider {name} --api-key-stdin`), or fix or remove {rel} by hand",
            path=rel,
        ) from None
    remember(data)
    return data


def problem(home: Home, kind: str, name: str) -> dict[str, Any] | None:
    """The `corrupt` error document of a damaged secret file, or None."""
    try:
        load(home, kind, name)
    except FwError as exc:
        return {"code": exc.code, "message": exc.message, "path": exc.extra.get("path")}
    return None


def has(home: Home, kind: str, name: str) -> bool:
    return home.exists(_rel(kind, name))


def save(home: Home, kind: str, name: str, values: dict[str, Any]) -> None:
    """Store `values` (an empty mapping removes the file). Caller holds the home's lock."""
    remember(values)
    values = {k: v for k, v in values.items() if v not in (None, {}, "")}
    if not values:
        home.remove(_rel(kind, name))
        return
    try:
        if load(home, kind, name) == values:
            return
    except FwError:
        pass  # a damaged file is replaced by the values given
    home.write_text(_rel(kind, name), json.dumps(values, indent=2, sort_keys=True) + "\n", secret=True)


def remove(home: Home, kind: str, name: str) -> None:
    home.remove(_rel(kind, name))


def unsafe_tail(text: str) -> int:
    """How many characters at the end of `text` could be the start of a remembered secret:
    text shown as it streams in holds them back until the next piece tells."""
    longest = 0
    for value in _known:
        for size in range(min(len(value) - 1, len(text)), longest, -1):
            if text.endswith(value[:size]):
                longest = size
                break
    return longest
