"""Secret values have one home, `secrets/` (folder 0700, files 0600), and one way out: none.

Every value read from or written to the secret store is remembered for this process, and
`redact` removes each of them from any text before it leaves (stdout, stderr, errors, audit).
"""

from __future__ import annotations

import json
from typing import Any

from .store import SECRETS_DIR, Home

REDACTED = "[redacted]"
_MIN_LEN = 6  # shorter values would mangle ordinary words; no real key is that short
_known: set[str] = set()


def remember(value: Any) -> None:
    if isinstance(value, str):
        if len(value) >= _MIN_LEN:
            _known.add(value)
    elif isinstance(value, dict):
        for item in value.values():
            remember(item)


def redact(text: str) -> str:
    for value in sorted(_known, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def _rel(kind: str, name: str) -> str:
    return f"{SECRETS_DIR}/{kind}/{name}.json"


def load(home: Home, kind: str, name: str) -> dict[str, Any]:
    raw = home.read_text(_rel(kind, name))
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    remember(data)
    return data


def has(home: Home, kind: str, name: str) -> bool:
    return home.exists(_rel(kind, name))


def save(home: Home, kind: str, name: str, values: dict[str, Any]) -> None:
    """Store `values` (an empty mapping removes the file). Caller holds the home's lock."""
    remember(values)
    values = {k: v for k, v in values.items() if v not in (None, {}, "")}
    if not values:
        home.remove(_rel(kind, name))
        return
    if load(home, kind, name) == values:
        return
    home.write_text(_rel(kind, name), json.dumps(values, indent=2, sort_keys=True) + "\n", secret=True)


def remove(home: Home, kind: str, name: str) -> None:
    home.remove(_rel(kind, name))
