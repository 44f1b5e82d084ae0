"""The time as the runtime state records it: UTC, to the millisecond, ISO 8601 with a Z."""

from __future__ import annotations

from datetime import datetime, timezone


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
