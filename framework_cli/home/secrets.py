"""Secret values have one home, `secrets/` (folder 0700, files 0600), and one way out: none.

Every value stored in the home, read from or written to the secret store, or given to fw
is remembered, and `redact` removes each of them from any text before it leaves (stdout,
stderr, errors, audit). Each invocation starts afresh (`forget_all`) and learns every secret
of the home it opens (`remember_home`), so what is redacted never depends on what an earlier
command of the same process happened to load.

A secret is also found in the forms a server may echo it in (JSON-escaped, URL-encoded,
HTML-escaped: `forms`), and cut short: any leading piece of a form at least 8 characters and
half its length long, wherever it stands. A value of 4 to 7 characters (a key from the
environment may be that short) is redacted where it stands as a whole word; a shorter one
cannot be, and `fw home check` warns about it. Text is redacted first and cut after, always.
A value replaced or removed by a later write (a rotated key) is kept in
`secrets/.retired.json` and stays known, so an old key is never shown in the clear either;
deleting the resource forgets its values.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..errors import FwError, refuse_lone_surrogates
from .store import SECRETS_DIR, Home

REDACTED = "[redacted]"
MIN_REDACTED = 4  # shorter values cannot be told from ordinary text at all: `fw home check` warns
WHOLE_WORD_BELOW = 8  # values shorter than this are redacted only where they stand as a whole word
MIN_PIECE = 8  # a leading piece of a secret this long, and half its length, is a cut secret
MIN_KEY_LEN = 8  # a key given to fw: shorter cannot be told apart from ordinary text
RETIRED = f"{SECRETS_DIR}/.retired.json"
MAX_RETIRED = 100  # the most recent values replaced or removed, kept known
# The shape of a run's gateway token (see domain/runs.py): redacted wherever it shows, in any
# process, whether or not this one ever saw the token.
GATEWAY_TOKEN_PREFIX = "fwgt_"
_TOKEN_SHAPE = re.escape(GATEWAY_TOKEN_PREFIX) + r"[A-Za-z0-9_-]{20,}"
_WORD = r"[A-Za-z0-9_]"
_known: set[str] = set()
_matcher: _Matcher | None = None  # built from every form of every known value when first needed
_homes_read: dict[str, tuple[int, ...]] = {}  # home -> the stamp of its secret store when last read


def remember(value: Any) -> None:
    global _matcher
    if isinstance(value, str):
        if len(value) >= MIN_REDACTED and value not in _known:
            _known.add(value)
            _matcher = None
    elif isinstance(value, dict):
        for item in value.values():
            remember(item)


def forget_all() -> None:
    global _matcher
    _known.clear()
    _matcher = None
    _homes_read.clear()


def forms(value: str) -> set[str]:
    """The value, and each form text may carry it in: JSON-escaped (`"` and `\\` escaped, `/`
    as `\\/` as PHP and some servers write it, non-ASCII as `\\uXXXX` in lower or upper case,
    `<`, `>` and `&` as `\\u003c` as Go writes them), URL-encoded (`/` kept or not, `~` as `%7E`,
    upper- and lower-case hex, a space as `%20` or `+`) and HTML-escaped (named, `&#34;`/`&#39;`,
    or every sign as a numeric entity)."""
    from html import escape
    from urllib.parse import quote, quote_plus

    found = {value}
    for ascii_only in (False, True):
        escaped = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        go = escaped.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        upper = re.sub(r"\\u[0-9a-f]{4}", lambda m: "\\u" + m.group(0)[2:].upper(), go)
        found.update((escaped, escaped.replace("/", "\\/"), go, upper))
    for encoded in (quote(value, safe=""), quote_plus(value, safe=""), quote(value, safe="/"), quote_plus(value, safe="/")):
        for form in (encoded, encoded.replace("~", "%7E")):
            found.update((form, re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), form)))
    for html in (escape(value, quote=True), escape(value, quote=False)):
        found.update((html, html.replace("&#x27;", "&#39;"), html.replace("&quot;", "&#34;").replace("&#x27;", "&#39;")))
    for kept in ("-_.", ""):  # every sign as a numeric entity, or all but these
        found.add("".join(c if c.isalnum() or c in kept else f"&#{ord(c)};" for c in value))
    return found


class _Matcher:
    """Finds every known secret in a text: each of its forms whole, and any leading piece of a
    form at least MIN_PIECE characters and half its length long (a secret cut short by a
    server, a log line or a column), wherever it stands; a value shorter than WHOLE_WORD_BELOW
    only as a whole word. Where pieces of several forms start at one place, the longest wins."""

    def __init__(self, values: tuple[str, ...]) -> None:
        short: set[str] = set()
        pieces: set[str] = set()
        self.by_start: dict[str, list[str]] = {}  # the first MIN_PIECE characters -> the forms that start so
        self.prefixes: set[str] = set()  # every proper leading piece of every form (`unsafe_tail`)
        for value in values:
            for form in forms(value):
                self.prefixes.update(form[:size] for size in range(1, len(form)))
                if len(value) < WHOLE_WORD_BELOW:
                    short.add(form)
                    continue
                pieces.add(form[: _shortest_piece(form)])
                self.by_start.setdefault(form[:MIN_PIECE], []).append(form)
        self.longest_prefix = max(map(len, self.prefixes), default=0)
        alternatives = [f"(?<!{_WORD}){re.escape(f)}(?!{_WORD})" for f in sorted(short, key=len, reverse=True)]
        alternatives += [re.escape(p) for p in sorted(pieces, key=len, reverse=True)]
        alternatives.append(_TOKEN_SHAPE)
        self.pattern = re.compile("|".join(alternatives))

    def spans(self, text: str) -> Any:
        """(start, end) of each secret in the text, left to right, none overlapping: secrets
        that overlap (a short one, and a longer one starting inside it) are one span."""
        at = 0
        while True:
            found = self.pattern.search(text, at)
            if found is None:
                return
            start, end = found.start(), self._end(text, found)
            probe = start + 1
            while probe < end and (more := self.pattern.search(text, probe)) is not None and more.start() < end:
                end = max(end, self._end(text, more))
                probe = more.start() + 1
            yield start, end
            at = max(end, start + 1)

    def _end(self, text: str, found: Any) -> int:
        """Where the secret found ends: the match, or further, to the end of the longest form
        whose leading piece starts there."""
        start, end = found.span()
        for form in self.by_start.get(text[start : start + MIN_PIECE], ()):
            size = _common_prefix(text, start, form)
            if size >= _shortest_piece(form):
                end = max(end, start + size)
        return end

    def sub(self, text: str) -> str:
        pieces, last = [], 0
        for start, end in self.spans(text):
            pieces += [text[last:start], REDACTED]
            last = end
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)


def _shortest_piece(form: str) -> int:
    return min(len(form), max(MIN_PIECE, (len(form) + 1) // 2))


def _common_prefix(text: str, start: int, form: str) -> int:
    """How many characters of `form`, from its start, stand in `text` at `start`."""
    size = 0
    for mine, theirs in zip(form, text[start : start + len(form)]):
        if mine != theirs:
            break
        size += 1
    return size


def _known_matcher() -> _Matcher:
    global _matcher
    matcher = _matcher
    if matcher is None:
        matcher = _matcher = _Matcher(tuple(_known))  # a copy: a dispatcher's other threads may remember more meanwhile
    return matcher


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
    """Whether `text` holds any remembered secret value, in any of its forms, or a cut of one."""
    if not _known and GATEWAY_TOKEN_PREFIX not in text:
        return False
    return next(_known_matcher().spans(text), None) is not None


def redact(text: str) -> str:
    """`text` with every known secret, in every form and every cut of it, replaced by
    `[redacted]`. Redact first, then cut: a text cut before it is redacted may end in less
    than the piece of a secret that is recognised."""
    if not _known and GATEWAY_TOKEN_PREFIX not in text:
        return text  # the common case, kept cheap: nothing known, no token
    return _known_matcher().sub(text)


def redact_with(text: str, value: str | None) -> str:
    """`redact`, and `value` (the key a request carried) also where it is too short to be
    remembered, as a whole word: what a server says back about the key it was sent."""
    text = redact(text)
    if value and len(value) < MIN_REDACTED:
        text = re.sub(f"(?<!{_WORD}){re.escape(value)}(?!{_WORD})", REDACTED, text)
    return text


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


def check_new(values: dict[str, Any], previous: dict[str, Any] | None = None) -> None:
    """`invalid` for a new secret value shorter than MIN_KEY_LEN (too short to be told apart
    from ordinary text), before anything is written."""
    before = dict(_leaves(previous or {}, ""))
    for field, value in _leaves({k: v for k, v in values.items() if v not in (None, {}, "")}, ""):
        if before.get(field) != value and len(value) < MIN_KEY_LEN:
            raise FwError("invalid", f"{field} is shorter than {MIN_KEY_LEN} characters: too short to be told apart from ordinary text",
                          "give the whole key or token", field=field)


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
    check_new(values, old)
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
    fresh = [v for v in values if len(v) >= MIN_REDACTED]
    if not fresh:
        return
    kept = [v for v in _retired(home) if v not in fresh] + fresh
    home.write_text(RETIRED, json.dumps(kept[-MAX_RETIRED:], indent=2) + "\n", secret=True)


_TOKEN_COMING = re.compile(r"f(?:w(?:g(?:t(?:_[A-Za-z0-9_-]*)?)?)?)?\Z")  # a gateway token, maybe not whole yet


def unsafe_tail(text: str) -> int:
    """How many characters at the end of `text` could be the start of a remembered secret, in
    any of its forms, or of a gateway token: text shown as it streams in holds them back until
    the next piece tells."""
    matcher = _known_matcher() if _known else None
    longest = 0
    for size in range(min(len(text), matcher.longest_prefix if matcher else 0), 0, -1):
        if text[-size:] in matcher.prefixes:  # type: ignore[union-attr]
            longest = size
            break
    coming = _TOKEN_COMING.search(text[-200:])
    if coming is not None:
        longest = max(longest, len(text[-200:]) - coming.start())
    return longest
