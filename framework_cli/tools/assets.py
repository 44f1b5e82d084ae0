"""The gateway's asset tools (seed B's MCP asset gateway): what an external runner may ask
about its run, besides calling the run's own tools under their names.

`fw_list_assets` and `fw_get_current_event` are always offered; `fw_get_tool_detail` only with
`detail` in the harness's `permissions.tools`, `fw_call_tool` only with `call` (a run without a
harness is the built-in runner's, which may do both). Each takes an optional `run_id`, which
must be the token's run. The tool service builds them for each call (`asset_tools`), handing
in what they need of it, so this module never imports the service back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..domain.projection import MCP_PREFIX, PLUGIN_PREFIX, SANDBOX_PREFIX, SKILL_PREFIX
from ..domain.tool_types import Caller, Tool, object_schema
from ..errors import FwError
from ..home.store import Home

GATEWAY = "gateway"  # the audit's `via` for a call that came through the gateway
LIST_ASSETS, CURRENT_EVENT, TOOL_DETAIL, CALL_TOOL = "fw_list_assets", "fw_get_current_event", "fw_get_tool_detail", "fw_call_tool"
ASSET_TYPES = ("tools", "platform_tools", "event_tools", "mcp_tools", "skills", "sandbox_tools", "plugin_tools")
RUN_ID = {"type": "string", "maxLength": 200, "description": "the run this call is for; when given, it must be the token's run"}
TOOL_NAME = {"type": "string", "minLength": 1, "maxLength": 200}


@dataclass
class ServiceCalls:
    """What the asset tools use of the tool service: a granted tool's description, and a call
    of one of the run's tools (authorised and audited there like any other)."""

    describe: Callable[[Home, dict[str, Any], str], dict[str, Any]]
    call: Callable[[Home, Caller, str, Any], dict[str, Any]]


def offered(run: dict[str, Any]) -> list[str]:
    """The asset tools a run's gateway lists, as its harness permits."""
    harness = ((run.get("snapshot") or {}).get("harness") or {}).get("data")
    permissions = ((harness.get("permissions") or {}).get("tools") or []) if isinstance(harness, dict) else ["detail", "call"]
    return [LIST_ASSETS, CURRENT_EVENT] + ([TOOL_DETAIL] if "detail" in permissions else []) + ([CALL_TOOL] if "call" in permissions else [])


def asset_kind(name: str) -> str:
    """Which kind of asset a run's tool is, by its model-side name."""
    if name.startswith(MCP_PREFIX):
        return "mcp_tools"
    if name.startswith(SANDBOX_PREFIX):
        return "sandbox_tools"
    if name.startswith(PLUGIN_PREFIX):
        return "plugin_tools"
    if name.startswith(SKILL_PREFIX):
        return "skills"
    if name.startswith("event_"):
        return "event_tools"
    if name.startswith("platform_"):
        return "platform_tools"
    return "tools"


def _own_run(caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    """The caller's run record; `denied` when `run_id` names another run."""
    if "run_id" in args and args["run_id"] != caller.run_id:
        raise FwError("denied", "run_id is not the run of this gateway token", "leave run_id out, or give the token's own run",
                      field="run_id")
    return caller.run or {}


def asset_tools(service: ServiceCalls) -> dict[str, Tool]:
    def list_assets(home: Home, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        run = _own_run(caller, args)
        kinds = args.get("asset_types") or list(ASSET_TYPES)
        doc: dict[str, Any] = {"run_id": run["run_id"], **{kind: [] for kind in ASSET_TYPES if kind in kinds}}
        for name in run["tools"]:
            kind = asset_kind(name)
            if kind in doc:
                shown = service.describe(home, run, name)
                doc[kind].append({k: shown[k] for k in ("name", "description", "risk", *(("input_schema",) if args.get("include_schemas") else ()))})
        doc["unavailable_tools"] = [u for u in run.get("unavailable_tools") or [] if asset_kind(str(u.get("name", ""))) in kinds]
        return doc

    def current_event(home: Home, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        run = _own_run(caller, args)
        return {"run_id": run["run_id"], "mode": run["mode"], "identity": run["identity"], "agent": run["agent"],
                "input": run.get("input"), "event": run.get("event"), "bot": run.get("bot")}

    def tool_detail(home: Home, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        run = _own_run(caller, args)
        name = args["tool_name"]
        if name not in run["tools"]:
            raise FwError("denied", f"run {run['run_id']} was not granted {name!r}", "fw_list_assets lists the run's tools",
                          field="tool_name")
        shown = service.describe(home, run, name)
        return {k: shown[k] for k in ("name", "description", "risk", "input_schema")}

    def call(home: Home, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        _own_run(caller, args)
        return service.call(home, caller, args["tool_name"], args.get("parameters", {}))

    return {
        LIST_ASSETS: Tool(LIST_ASSETS, GATEWAY, "read",
                          "List the run's tools by kind (tools, platform_tools, event_tools, mcp_tools, skills), with their "
                          "descriptions (and input schemas with include_schemas), and the tools it was not given, with reasons.",
                          object_schema([], asset_types={"type": "array", "items": {"type": "string", "enum": list(ASSET_TYPES)}, "uniqueItems": True},
                                        include_schemas={"type": "boolean"}, run_id=RUN_ID),
                          list_assets),
        CURRENT_EVENT: Tool(CURRENT_EVENT, GATEWAY, "read",
                            "What this run is for: its id, mode, identity, agent, input text, and the chat-platform event and bot "
                            "it handles (null when none).",
                            object_schema([], run_id=RUN_ID), current_event),
        TOOL_DETAIL: Tool(TOOL_DETAIL, GATEWAY, "read", "One of the run's tools: its name, description, risk and input schema.",
                          object_schema(["tool_name"], tool_name=TOOL_NAME, run_id=RUN_ID), tool_detail),
        CALL_TOOL: Tool(CALL_TOOL, GATEWAY, "write",
                        "Call one of the run's tools by name with its parameters; authorised and audited like any call of the run.",
                        object_schema(["tool_name"], tool_name=TOOL_NAME, parameters={"type": "object"}, run_id=RUN_ID), call),
    }

