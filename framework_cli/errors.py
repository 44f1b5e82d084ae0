"""Errors are values: domain code raises `FwError`, each front end maps its code once."""

from __future__ import annotations

import re
from typing import Any

EXIT_CODES: dict[str, int] = {
    "internal": 1,
    "usage": 2,
    "not_found": 3,
    "invalid": 4,
    "corrupt": 4,
    "denied": 5,
    "run_ended": 5,
    "lease_expired": 5,
    "session_ended": 5,
    "exists": 6,
    "conflict": 6,
    "protected": 6,
    "stale_confirmation": 6,
    "not_empty": 6,
    "in_use": 6,
    "unavailable": 7,
    "interrupted": 130,
}


class FwError(Exception):
    """A failure the user can act on: a stable code, a message and a hint naming the fix."""

    def __init__(self, code: str, message: str, hint: str = "", **extra: Any) -> None:
        if code not in EXIT_CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.extra = extra

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.code]

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"code": self.code, "message": self.message, "hint": self.hint}
        doc.update(self.extra)
        return {"error": doc}


# -- text that cannot be stored or printed ---------------------------------------------------
# A UTF-16 surrogate on its own (JSON's "\ud83d" without its pair, or a byte that is not
# UTF-8 smuggled in by the file system's decoding) is no character: UTF-8 cannot encode it,
# so SQLite, a file or a terminal would fail on it half-way. It is refused where it comes in.
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate_at(value: Any, field: str) -> str | None:
    """The field path (`field`, `field.key`, `field[2]`) of the first string in plain data
    that holds a lone surrogate, keys included; None when every string is text."""
    todo = [(field, value)]
    while todo:
        path, item = todo.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path
        elif isinstance(item, dict):
            for key, sub in item.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    return path
                todo.append((f"{path}.{key}" if path else str(key), sub))
        elif isinstance(item, (list, tuple)):
            todo.extend((f"{path}[{index}]", sub) for index, sub in enumerate(item))
    return None


def refuse_lone_surrogates(value: Any, field: str, what: str | None = None) -> None:
    """`invalid` when `value` holds a lone surrogate, naming the field (never the text);
    `what` says whose value it is."""
    at = lone_surrogate_at(value, field)
    if at is not None:
        where = f"{what}: {at}" if what and at else what or at or "the text"
        raise FwError("invalid", f"{where} holds a lone UTF-16 surrogate, which is not text",
                      "send UTF-8 text (an emoji as one character, or as a JSON escape pair such as \\ud83d\\ude00)",
                      field=at)


def without_lone_surrogates(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD: for what only records that
    something arrived (an audit line's tool name), never for what is stored as given."""
    return _SURROGATE.sub("\ufffd", text)
