"""The tool service: one registry of tool groups, one place that decides who may call what.

Every front end (`fw tool call`, `fw mcp serve`, and the operator commands' shared
functions) reaches the same handlers. A call is checked when it runs: the run must exist,
be active and within its lease, the tool must be in the run's snapshot, and the parameters
must fit the tool's JSON Schema. Allowed or refused, each call leaves one audit line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .deletion import resource_delete
from .errors import FwError
from .identities import agent_bind, agent_set_enabled, agent_unbind, binding_list, principal_create, principal_list
from .kinds import BUILTIN_GROUPS, KIND_NAMES
from .probes import provider_models, resource_test
from .resources import category_create, category_delete, category_list, resource_list, resource_read, resource_write
from .runs import TOOL_PREFIX
from .store import Home

NAME = {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]{0,62}$"}
KIND = {"type": "string", "enum": list(KIND_NAMES)}


def _obj(required: list[str], **props: Any) -> dict[str, Any]:
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


# -- handlers: each is the one function the matching CLI command calls -------------------
def _principal_create(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    if not caller.is_manager and a["kind"] != "agent":
        raise FwError(
            "denied",
            f"inside a run only agent identities can be created, not {a['kind']!r}",
            "creating a user or manager identity is for the Manager (`fw principal create`)",
        )
    return principal_create(home, a["name"], a["kind"])


RM = "resource_management"
_TOOLS = [
    Tool("resource_list", RM, "read",
         "List the resources of one kind (provider, model, prompt, skill, mcp, harness, agent) with a short summary of each. Secret values are never shown.",
         _obj(["kind"], kind=KIND, category={**NAME, "description": "only this category"}), lambda h, c, a: resource_list(h, a["kind"], a.get("category"))),
    Tool("resource_read", RM, "read",
         "Read one resource's definition, and the text (body) of a prompt or skill. A provider shows api_key_set, never its key.",
         _obj(["kind", "reference"], kind=KIND, reference=NAME), lambda h, c, a: resource_read(h, a["kind"], a["reference"])),
    Tool("resource_write", RM, "write",
         "Create a resource (create=true: data is the whole definition, the name must be new) or update one (create=false: data is a JSON merge patch; null removes a field). A prompt's or skill's text is data.body. A provider's key goes in data.api_key and is stored as a secret. For an agent the result says whether it is enabled and what to do next.",
         _obj(["kind", "reference", "create", "data"], kind=KIND, reference=NAME, create={"type": "boolean"},
              data={"type": "object"}, category={**NAME, "description": "category to place or move it in"}), lambda h, c, a: resource_write(h, a["kind"], a["reference"], a["data"], create=a["create"], category=a.get("category"))),
    Tool("resource_delete", RM, "dangerous",
         "Delete a resource in two calls. Without confirm: returns the plan (the target and, with recursive, everything that uses it, users first) and what blocks it; nothing is deleted. Then call again with confirm equal to the plan's items in the same order to delete exactly those. A changed home makes the confirmation stale and nothing is deleted.",
         _obj(["kind", "reference"], kind=KIND, reference=NAME, recursive={"type": "boolean"},
              confirm={"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}],
                       "description": "the plan's items, in the plan's order"}), lambda h, c, a: resource_delete(h, a["kind"], a["reference"], recursive=a.get("recursive", False), confirm=a.get("confirm"))),
    Tool("provider_models", RM, "read",
         "Ask a provider which models it serves (GET {base_url}/models with its stored key). No inference is run.",
         _obj(["reference"], reference=NAME), lambda h, c, a: provider_models(h, a["reference"])),
    Tool("resource_test", RM, "read",
         "Check a provider's or MCP server's configuration statically: no network call, no process started.",
         _obj(["kind", "reference"], kind={"type": "string", "enum": ["provider", "mcp"]}, reference=NAME), lambda h, c, a: resource_test(h, a["kind"], a["reference"])),
    Tool("resource_category_list", RM, "read", "List the categories of a kind, default first.",
         _obj(["kind"], kind=KIND), lambda h, c, a: category_list(h, a["kind"])),
    Tool("resource_category_create", RM, "write", "Create an empty category for a kind.",
         _obj(["kind", "category"], kind=KIND, category=NAME), lambda h, c, a: category_create(h, a["kind"], a["category"])),
    Tool("resource_category_delete", RM, "dangerous", "Delete an empty category other than default.",
         _obj(["kind", "category"], kind=KIND, category=NAME), lambda h, c, a: category_delete(h, a["kind"], a["category"])),
    Tool("principal_list", RM, "read", "List the identities (principals) agents run as, with their kind.",
         _obj([]), lambda h, c, a: principal_list(h)),
    Tool("principal_create", RM, "write",
         "Create an identity. Inside a run only kind agent is allowed; user and manager identities are for the Manager.",
         _obj(["name", "kind"], name=NAME, kind={"type": "string", "enum": ["user", "agent", "manager"]}), _principal_create),
    Tool("binding_list", RM, "read", "List the bindings: which principal runs which agent, enabled or not, and how.",
         _obj([]), lambda h, c, a: binding_list(h)),
    Tool("agent_bind", RM, "write",
         "Bind a principal (kind agent) to an agent. A new binding is enabled, runs in the home's folder, with unlimited rounds and policy mentioned. Updating a disabled binding keeps it disabled.",
         _obj(["principal", "agent"], principal=NAME, agent=NAME, directory={"type": "string", "minLength": 1},
              max_rounds={"type": ["integer", "null"], "minimum": 1}, policy={"type": "string", "enum": ["mentioned", "all"]}), lambda h, c, a: agent_bind(h, a["principal"], a["agent"], a.get("directory"), a.get("max_rounds"), a.get("policy"))),
    Tool("agent_set_enabled", RM, "write", "Enable or disable a principal's binding. Disabling stops its later managed runs.",
         _obj(["principal", "enabled"], principal=NAME, enabled={"type": "boolean"}), lambda h, c, a: agent_set_enabled(h, a["principal"], a["enabled"])),
    Tool("agent_unbind", RM, "dangerous",
         "Remove a principal's binding (for decommissioning, or before deleting its agent); to pause an agent, disable it instead.",
         _obj(["principal"], principal=NAME), lambda h, c, a: agent_unbind(h, a["principal"])),
]

TOOLS: dict[str, Tool] = {t.name: t for t in _TOOLS}
GROUP_TOOLS: dict[str, tuple[str, ...]] = {g: tuple(t.name for t in _TOOLS if t.group == g) for g in BUILTIN_GROUPS}


def describe(tool: Tool, name: str) -> dict[str, Any]:
    return {"name": name, "description": tool.description, "risk": tool.risk, "group": tool.group, "input_schema": tool.input_schema}


def caller_for(home: Home, manager: bool, run_id: str | None) -> Caller:
    """The caller named on a command line: exactly one of --manager and --run."""
    if manager == (run_id is not None):
        raise FwError("usage", "give exactly one of --manager and --run RUN", "--manager calls as the Manager; --run RUN as that run")
    return Caller("manager") if manager else Caller("run", run_id=run_id)


def list_tools(home: Home, caller: Caller) -> dict[str, Any]:
    """The tools a caller has: every tool for the Manager, the snapshot's tools for a run."""
    from .runs import active_run

    if caller.is_manager:
        return {"tools": [describe(t, t.name) for t in _TOOLS]}
    granted = active_run(home, caller.run_id)["tools"]  # type: ignore[arg-type]  # an ended run lists nothing, as it calls nothing
    return {"tools": [describe(TOOLS[n[len(TOOL_PREFIX):]], n) for n in granted]}


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
            message = f"unknown parameter(s): {', '.join(extra)}"
        elif error.validator == "required":
            message = error.message.replace("'", "")
        raise FwError("invalid", f"{tool.name}: {where}: {message}", "see the tool's input_schema in `fw tool list`", field=where)


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
            from .runs import load_run, require_active

            run = load_run(home, run_id)  # type: ignore[arg-type]  # re-read: ended or expired since?
            caller = Caller("run", run_id, run)  # a refusal below is audited as the run's identity
            require_active(run)
            if name not in run["tools"]:
                raise FwError(
                    "denied",
                    f"run {run_id} was not granted {name!r}",
                    "a run gets the tools of the groups its agent mounted when it started, if its model can call tools",
                )
            tool = TOOLS[name[len(TOOL_PREFIX):]]
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
