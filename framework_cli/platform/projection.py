"""The event and platform tools of a run started for an event (CONTRACT section 9): a pure
function of the agent's definition, the runner's gate, the frozen event and what the bot
offers when the run starts.

Candidates are the event tools whose patterns fit the event's type, then the agent's
`allowed_platform_tools`. Each is offered, or listed with the first reason that applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..domain.catalogue import CATALOGUE, EVENT_TOOLS, PlatformTool
from .events import target_ids

RUNNER = "runner_call_permission_missing"
UNKNOWN = "unknown_tool"
API_UNSUPPORTED = "adapter_api_unsupported"
EVENT_INCOMPATIBLE = "event_incompatible"
TARGET_UNAVAILABLE = "event_target_unavailable"


@dataclass
class PlatformProjection:
    tools: list[str] = field(default_factory=list)
    unavailable: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> what the run record keeps of it
    capabilities: dict[str, Any] = field(default_factory=dict)  # the record's platform_capabilities


def candidates(definition: dict[str, Any], event_type: str) -> list[str]:
    names = [tool.name for tool in EVENT_TOOLS if tool.fits(event_type)]
    for name in definition.get("allowed_platform_tools") or []:
        if name not in names:
            names.append(name)
    return names


def refusal(name: str, gate: str | None, event: dict[str, Any], supported: list[str]) -> tuple[str, str] | None:
    """(reason, detail) for a candidate that is not offered, the first that applies; None
    when it is offered."""
    if gate is not None:
        return RUNNER, gate
    tool = CATALOGUE.get(name)
    if tool is None:
        return UNKNOWN, "not a tool of the catalogue (`fw tool catalogue`)"
    if tool.api not in supported:
        return API_UNSUPPORTED, f"the bot's adapter does not offer {tool.api}"
    if tool.is_event_tool and not tool.fits(event["type"]):
        return EVENT_INCOMPATIBLE, f"fits {', '.join(tool.patterns)}, not {event['type']}"
    if tool.is_event_tool and target_ids(tool.target, event) is None:
        return TARGET_UNAVAILABLE, f"the event does not carry the {tool.target.replace('_', ' ')} it acts on"  # type: ignore[union-attr]
    return None


def source_of(tool: PlatformTool) -> dict[str, Any]:
    return {"source": "event" if tool.is_event_tool else "platform", "api": tool.api, "risk": tool.risk,
            "description": tool.description, "input_schema": tool.input_schema}


def project_platform(definition: dict[str, Any], gate: str | None, event: dict[str, Any],
                     capabilities: dict[str, Any]) -> PlatformProjection:
    out = PlatformProjection()
    for name in candidates(definition, event["type"]):
        refused = refusal(name, gate, event, capabilities["supported_apis"])
        if refused is None:
            out.tools.append(name)
            out.sources[name] = source_of(CATALOGUE[name])
        else:
            out.unavailable.append({"name": name, "reason": refused[0], "detail": refused[1]})
    out.capabilities = {**capabilities, "authorized_tools": list(out.tools), "unavailable_tools": list(out.unavailable)}
    return out
