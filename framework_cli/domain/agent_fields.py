"""An agent's list fields (`skills`, `mcps`, `events`, `allowed_platform_tools`) edited from the
command line: a list given replaces the field (a lone '' clears it), and single entries are added or
removed, all under the home's lock so that concurrent edits all land."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..home.store import Home
from .agents import agent_edit
from .resources import resource_read

# field -> (replacement or None, entries to add, entries to remove)
ListEdits = dict[str, tuple[Sequence[str] | None, Sequence[str], Sequence[str]]]


def given(values: Sequence[str] | None) -> list[str] | None:
    """A repeated flag's values; a lone '' means an empty list."""
    if values is None:
        return None
    return [v for v in values if v != ""]


def edited(current: Sequence[str], replace: Sequence[str] | None, add: Sequence[str], remove: Sequence[str]) -> list[str]:
    result = list(current if replace is None else given(replace) or [])
    result += [v for v in add if v not in result]
    return [v for v in result if v not in remove]


def agent_edit_lists(home: Home, name: str, patch: dict[str, Any], lists: ListEdits, **builtin: Any) -> dict[str, Any]:
    """`agent_edit` with these list fields changed too; an empty result removes the field
    (absent and empty mean the same: no event, no platform tool)."""

    patch = dict(patch)
    wanted = {field: edits for field, edits in lists.items() if edits[0] is not None or edits[1] or edits[2]}
    with home.locked():
        current = resource_read(home, "agent", name)["data"] if wanted else {}
        for field, (replace, add, remove) in wanted.items():
            before = list(current.get(field) or [])
            after = edited(before, replace, add, remove)
            if after != before:
                patch[field] = after or None
        return agent_edit(home, name, patch, **builtin)
