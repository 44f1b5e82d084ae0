"""What a tool is and who calls it: the types the registry, the tool groups and the platform
toolset share. Plain data, cheap to import, and low enough that every floor above may use it."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..home.kinds import KIND_NAMES
from ..home.store import Home

NAME = {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]{0,62}$"}
KIND = {"type": "string", "enum": list(KIND_NAMES)}


def object_schema(required: list[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


# The audit's caller for a run that does not exist: not a valid principal name, so it can
# never be mistaken for an identity.
UNKNOWN_RUN = "(unknown run)"


@dataclass(frozen=True)
class Caller:
    """Who is calling: the Manager (`fw tool call --manager`) or a run (never the Manager)."""

    kind: str  # "manager" or "run"
    run_id: str | None = None
    run: dict[str, Any] | None = None  # the run's record, once loaded and checked

    @property
    def is_manager(self) -> bool:
        return self.kind == "manager"

    @property
    def identity(self) -> str:
        if self.is_manager:
            return "manager"
        return self.run["identity"] if self.run else UNKNOWN_RUN


@dataclass(frozen=True)
class Tool:
    name: str
    group: str
    risk: str  # read, write, dangerous
    description: str
    input_schema: dict[str, Any]
    handler: Callable[[Home, Caller, dict[str, Any]], dict[str, Any]]
    title: str | None = None  # a tool of another source (MCP) may bring its own
    # The same job for an event loop (the engine's): awaited, holding no thread while it waits
    # (an MCP call, task_wait); given `run_sync`, which runs blocking work on the engine's threads.
    ahandler: Callable[[Home, Caller, dict[str, Any], Any], Awaitable[dict[str, Any]]] | None = None


@dataclass
class CallWatch:
    """What a front door lends one tool call while it runs. `on_progress` hears the call's
    progress (`{"progress", "total"?, "message"?}`, from an MCP server's notifications), in the
    calling thread; `cancel()` gives the call up (an MCP call then sends
    `notifications/cancelled`); `attachments`, when a list, receives the bytes of the call's
    binary content (`{"type", "mimeType", "uri"?, "blob" | "data"}`), which only an MCP front
    door passes on: every other door shows their size."""

    on_progress: Callable[[dict[str, Any]], None] | None = None
    attachments: list[dict[str, Any]] | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()


def long_work(run_sync: Any) -> Any:
    """Where a tool handler that may wait long runs (a blocking tool, an MCP server's start, an
    external runner, a platform action over plain HTTP): the engine's threads for long work,
    `run_sync.blocking`, where `run_sync` has them (`engine.aio.Threads`); else `run_sync`."""
    return getattr(run_sync, "blocking", run_sync)
