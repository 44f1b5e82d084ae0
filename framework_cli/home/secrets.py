"""Secret values have one home, `secrets/` (folder 0700, files 0600), and one way out: none.

Every value stored in the home, read from or written to the secret store, or given to fw
is remembered, and `redact` removes each of them from any text before it leaves (stdout,
stderr, errors, audit). Each invocation starts afresh (`forget_all`) and learns every secret
of the home it opens (`remember_home`), so what is redacted never depends on what an earlier
command of the same process happened to load.

A secret is also found in the forms JSON gives it: `"` and `\\` escaped, `/` escaped as
`\\/` (as PHP and some servers write it), non-ASCII as `\\uXXXX`. A value replaced or removed
by a later write (a rotated key) is kept in `secrets/.retired.json` and stays known, so an
old key is never shown in the clear either; deleting the resource forgets its values.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..errors import FwError, refuse_lone_surrogates
from .store import SECRETS_DIR, Home

REDACTED = "[redacted]"
_MIN_LEN = 6  # shorter values would mangle ordinary words; no real key is that short
MIN_KEY_LEN = 8  # a key given to fw: shorter cannot be told apart from ordinary text
RETIRED = f"{SECRETS_DIR}/.retired.json"
MAX_RETIRED = 100  # the most recent values replaced or removed, kept known
# The shape of a run's gateway token (see domain/runs.py): redacted wherever it shows, in any
# process, whether or not this one ever saw the token.
GATEWAY_TOKEN_PREFIX = "fwgt_"
_TOKEN_SHAPE = re.escape(GATEWAY_TOKEN_PREFIX) + r"[A-Za-z0-9_-]{20,}"
_known: set[str] = set()
_pattern: re.Pattern[str] | None = None  # every form of every known value, longest first
_homes_read: dict[str, tuple[int, ...]] = {}  # home -> the stamp of its secret store when last read


def remember(value: Any) -> None:
    global _pattern
    if isinstance(value, str):
        if len(value) >= _MIN_LEN and value not in _known:
            _known.add(value)
            _pattern = None
    elif isinstance(value, dict):
        for item in value.values():
            remember(item)


def forget_all() -> None:
    global _pattern
    _known.clear()
    _pattern = None
    _homes_read.clear()


def _forms(value: str) -> set[str]:
    """The value, and each form JSON text may carry it in."""
    forms = {value}
    for ascii_only in (False, True):
        escaped = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        forms.update((escaped, escaped.replace("/", "\\/")))
    return forms


def _known_pattern() -> re.Pattern[str]:
    global _pattern
    pattern = _pattern
    if pattern is None:
        values = tuple(_known)  # a copy: a dispatcher's other threads may remember more meanwhile
        forms = sorted({form for value in values for form in _forms(value)}, key=len, reverse=True)
        pattern = _pattern = re.compile("|".join([*map(re.escape, forms), _TOKEN_SHAPE]))
    return pattern


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
    for value in _retired(home):
        remember(value)


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
    """Whether `text` holds any remembered secret value, in any of its forms."""
    if not _known and GATEWAY_TOKEN_PREFIX not in text:
        return False
    return _known_pattern().search(text) is not None


def redact(text: str) -> str:
    if not _known and GATEWAY_TOKEN_PREFIX not in text:
        return text  # the common case, kept cheap: nothing known, no token
    return _known_pattern().sub(REDACTED, text)


def refuse(home: Home, fields: dict[str, Any], hint: str = "leave the key out") -> None:
    """The one check of a value about to be kept outside secrets/ (a file of the home,
    state.db, a platform, a run record): a stored secret value, in any string of it (keys
    included), is `invalid`, naming the field and never the value; so is text that holds a
    lone surrogate, which nothing could store."""
    remember_home(home)
    for field, text in _strings(fields, ""):
        if known_in(text):
            raise FwError("invalid", f"{field} holds a secret value; secret values are stored only under secrets/",
                          hint, field=field)
    refuse_lone_surrogates(fields, "")


def _strings(data: Any, path: str) -> Any:
    """(field path, text) of every string in plain data, keys included."""
    if isinstance(data, dict):
        for key, value in data.items():
            sub = f"{path}.{key}" if path else str(key)
            yield sub, str(key)
            yield from _strings(value, sub)
    elif isinstance(data, (list, tuple)):
        for index, value in enumerate(data):
            yield from _strings(value, f"{path}[{index}]")
    elif isinstance(data, str):
        yield path, data


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
    """Store `values` (an empty mapping removes the file). Caller holds the home's lock.
    A new value shorter than MIN_KEY_LEN is `invalid` and nothing is written; a value
    replaced or dropped is retired (kept known)."""
    remember(values)
    values = {k: v for k, v in values.items() if v not in (None, {}, "")}
    try:
        old = load(home, kind, name)
    except FwError:
        old = {}  # a damaged file is replaced by the values given
    previous = dict(_leaves(old, ""))
    for field, value in _leaves(values, ""):
        if previous.get(field) != value and len(value) < MIN_KEY_LEN:
            raise FwError("invalid", f"{field} is shorter than {MIN_KEY_LEN} characters: too short to be told apart from ordinary text",
                          "give the whole key or token", field=field)
    if values and old == values:
        return
    _retire(home, [v for f, v in previous.items() if v not in dict(_leaves(values, "")).values()])
    if not values:
        home.remove(_rel(kind, name))
        return
    home.write_text(_rel(kind, name), json.dumps(values, indent=2, sort_keys=True) + "\n", secret=True)


def remove(home: Home, kind: str, name: str) -> None:
    """Remove a resource's secret file: deleting a resource forgets its secrets (a value
    replaced by `save` is retired instead). Caller holds the lock."""
    home.remove(_rel(kind, name))


def _leaves(values: dict[str, Any], path: str) -> list[tuple[str, str]]:
    """(field, value) of every secret string: `api_key`, `env.TOKEN`, `headers.Authorization`."""
    out = []
    for key, value in values.items():
        field = f"{path}.{key}" if path else str(key)
        if isinstance(value, dict):
            out.extend(_leaves(value, field))
        elif isinstance(value, str):
            out.append((field, value))
    return out


def _retired(home: Home) -> list[str]:
    raw = home.read_text(RETIRED)
    try:
        values = json.loads(raw) if raw else []
    except ValueError:
        return []  # damaged: what it held is no longer known, nothing else breaks
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def _retire(home: Home, values: list[str]) -> None:
    """Keep values taken out of the store known (the most recent MAX_RETIRED): a rotated key
    may still work somewhere, and may still be echoed back."""
    fresh = [v for v in values if len(v) >= _MIN_LEN]
    if not fresh:
        return
    kept = [v for v in _retired(home) if v not in fresh] + fresh
    home.write_text(RETIRED, json.dumps(kept[-MAX_RETIRED:], indent=2) + "\n", secret=True)


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
