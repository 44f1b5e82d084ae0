"""The tool service: one place that decides who may call what.

Every front end (`fw tool call`, `fw mcp serve`, and the operator commands' shared
functions) reaches the same handlers. A call is checked when it runs: the run must exist,
be active and within its lease, the tool must be in the run's snapshot, and the parameters
must fit the tool's JSON Schema. Allowed or refused, each call leaves one audit line.
"""

from __future__ import annotations

from typing import Any

from ..errors import FwError
from ..home.kinds import BUILTIN_GROUPS
from ..home.store import Home
from . import resource_management  # noqa: F401  (registers its tools)
from .registry import TOOL_PREFIX, TOOLS, Caller, Tool, group_tools

GROUP_TOOLS: dict[str, tuple[str, ...]] = {g: group_tools(g) for g in BUILTIN_GROUPS}


def granted_tools(definition: dict[str, Any], tool_call: bool) -> list[str]:
    """The model-side names a run of this definition may call: every tool of each mounted
    group, and only when the agent's model can call tools at all."""
    if not tool_call:
        return []
    return [TOOL_PREFIX + name for group in definition.get("builtin_tools", []) for name in GROUP_TOOLS.get(group, ())]


def start_run(home: Home, principal: str | None = None, agent: str | None = None, lease: int | None = None) -> dict[str, Any]:
    """Start a run whose tools this service decides (`fw run start`)."""
    from ..domain.runs import run_start

    return run_start(home, granted_tools, principal=principal, agent=agent, lease=lease)


def _granted(run: dict[str, Any], name: str) -> Tool:
    """The tool behind a name the run's record grants; a name this version does not know
    means the record is damaged (or from another version): `corrupt`, never a crash."""
    tool = TOOLS.get(name[len(TOOL_PREFIX):]) if name.startswith(TOOL_PREFIX) else None
    if tool is None:
        rel = f"runs/{run['run_id']}.json"
        raise FwError("corrupt", f"{rel} is corrupt: it grants {name!r}, a tool this version of fw does not know", "this run cannot act; start a new one with `fw run start`", path=rel)
    return tool


def describe(tool: Tool, name: str) -> dict[str, Any]:
    return {"name": name, "description": tool.description, "risk": tool.risk, "group": tool.group, "input_schema": tool.input_schema}


def caller_for(home: Home, manager: bool, run_id: str | None) -> Caller:
    """The caller named on a command line: exactly one of --manager and --run."""
    if manager == (run_id is not None):
        raise FwError("usage", "give exactly one of --manager and --run RUN", "--manager calls as the Manager; --run RUN as that run")
    return Caller("manager") if manager else Caller("run", run_id=run_id)


def list_tools(home: Home, caller: Caller) -> dict[str, Any]:
    """The tools a caller has: every tool for the Manager, the snapshot's tools for a run."""
    from ..domain.runs import active_run

    if caller.is_manager:
        return {"tools": [describe(t, t.name) for t in TOOLS.values()]}
    run = active_run(home, caller.run_id)  # type: ignore[arg-type]  # an ended run lists nothing, as it calls nothing
    return {"tools": [describe(_granted(run, n), n) for n in run["tools"]]}


def _validate_args(tool: Tool, args: Any) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(tool.input_schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(args))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
        # the validator's own message may quote the value; say what is wrong without it
        message = {
            "additionalProperties": "unknown parameter",
            "required": "a required parameter is missing",
            "enum": f"must be one of {error.validator_value}",
            "pattern": "is not a valid name",
            "type": f"must be of type {error.validator_value}",
        }.get(str(error.validator), f"fails {error.validator}")
        if error.validator == "additionalProperties":
            extra = sorted(set(args) - set(tool.input_schema["properties"])) if isinstance(args, dict) else []
            message = f"unknown {'parameter' if len(extra) == 1 else 'parameters'}: {', '.join(extra)}"
        elif error.validator == "required":
            message = error.message.replace("'", "")
        elif error.validator == "enum":
            message = f"must be one of: {', '.join(map(str, error.validator_value))}"
        from ..suggest import did_you_mean, hint_with

        suggestion = did_you_mean(error.instance, error.validator_value) if error.validator == "enum" else {}
        hint = hint_with(suggestion, "see the tool's input_schema in `fw tool list`")
        raise FwError("invalid", f"{tool.name}: {where}: {message}", hint, field=where, **suggestion)


def call_tool(home: Home, caller: Caller, name: str, args: Any) -> dict[str, Any]:
    """Authorise, validate and run one call; audit it whatever happens."""
    from . import audit

    run_id = caller.run_id
    try:
        if caller.is_manager:
            tool = TOOLS.get(name)
            if tool is None:
                hint = "the Manager uses bare names (resource_write)" if name.startswith(TOOL_PREFIX) else "see `fw tool list --manager`"
                raise FwError("not_found", f"no tool named {name!r}", hint)
        else:
            from ..domain.runs import load_run, require_active

            run = load_run(home, run_id)  # type: ignore[arg-type]  # re-read: ended or expired since?
            caller = Caller("run", run_id, run)  # a refusal below is audited as the run's identity
            require_active(run)
            if name not in run["tools"]:
                raise FwError(
                    "denied",
                    f"run {run_id} was not granted {name!r}",
                    "a run gets the tools of the groups its agent mounted when it started, if its model can call tools",
                )
            tool = _granted(run, name)
        _validate_args(tool, args)
        result = tool.handler(home, caller, args)
    except FwError as exc:
        audit.record(home, caller=caller.identity, run_id=run_id, tool=name, params=args, outcome="refused" if exc.code in ("denied", "run_ended", "lease_expired") else "error", error_code=exc.code)
        raise
    except Exception:
        audit.record(home, caller=caller.identity, run_id=run_id, tool=name, params=args, outcome="error", error_code="internal")
        raise
    audit.record(home, caller=caller.identity, run_id=run_id, tool=name, params=args, outcome="ok")
    return result
