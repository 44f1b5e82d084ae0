"""Errors are values: domain code raises `FwError`, each front end maps its code once."""

from __future__ import annotations

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
