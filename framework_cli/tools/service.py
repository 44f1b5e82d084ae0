"""The tool service: one place that decides who may call what.

Every front end (`fw tool call`, `fw mcp serve`, and the operator commands' shared
functions) reaches the same handlers. A call is checked when it runs: the run must exist,
be active and within its lease, the tool must be in the run's snapshot, and the parameters
must fit the tool's JSON Schema. Allowed or refused, each call leaves one audit line.
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Callable
from typing import Any

from ..domain.agent_catalogue import agent_catalogue
from ..domain.projection import Snapshot, cap_tools, needs_sandbox, project, runner_refusal
from ..domain.resources import resource_read
from ..domain.run_records import RUN_ID_PART_RE, active_run, load_run, require_active, resolve_run_id, unless_abandoned
from ..domain.runs import freeze, run_start
from ..domain.tool_types import Caller, CallWatch, Tool, long_work
from ..errors import FwError, refuse_lone_surrogates
from ..home.kinds import BUILTIN_GROUPS
from ..home.store import Home
from ..platform.toolset import add_event_tools, granted_tool
from ..runtime.plugins import plugin_tools_now
from ..runtime.sandbox import probe
from ..suggest import did_you_mean, hint_with
from . import audit
from .arguments import PlainValidator, plain_validator
from .assets import GATEWAY, ServiceCalls, asset_tools, offered
from .registry import MANAGED_RUNTIME, RUN_CALL_CHECKS, SANDBOX_TOOLS, TOOL_PREFIX, TOOLS, group_tools
from .sources import RunSources, list_mcp_tools, skill_description, skill_text

# The tool groups register their tools when imported; their order is the order tools are listed.
# (`sandbox` registers the sandbox tools, a source governed by allowed_tools, not a group to mount.)
GROUP_MODULES = ("resource_management", "task_collaboration", "local_execution", "managed_runtime", "sandbox")
for _module in GROUP_MODULES:
    importlib.import_module(f"{__package__}.{_module}")

GROUP_TOOLS: dict[str, tuple[str, ...]] = {g: group_tools(g) for g in (*BUILTIN_GROUPS, MANAGED_RUNTIME)}
SANDBOX_SOURCE: dict[str, dict[str, Any]] = {
    name: {"description": t.description, "input_schema": t.input_schema, "risk": t.risk} for name, t in SANDBOX_TOOLS.items()
}
REFUSALS = ("denied", "run_ended", "lease_expired", "session_ended")  # audited as "refused"
# The Manager's groups: never `local_execution` (host execution is only for a run whose agent
# mounts it with `execution.enabled`, and the Manager has no such snapshot).
MANAGER_GROUPS = tuple(g for g in BUILTIN_GROUPS if g != "local_execution")


def sources_now(home: Home, definition: dict[str, Any], model_tool_call: bool, harness: dict[str, Any] | None,
                frozen: dict[str, Any], directory: str | None, held: list[Any], *, managed: bool = False,
                always: bool = False) -> Snapshot:
    """What the tool sources of a run of `definition` give now: the sandbox probed (when
    anything would run in it), its MCP servers started to list their tools (the open
    connections go in `held`), the home's enabled plugins listed (each in a process of its
    own), its skills read. Unless `always`, nothing is asked when the runner may call no tool."""
    snapshot = Snapshot(definition, model_tool_call, harness, GROUP_TOOLS, managed=managed, sandbox_tools=SANDBOX_SOURCE)
    plugins = frozen.get("plugins") or {}
    snapshot.plugins = list(plugins)
    if always or runner_refusal(snapshot) is None:
        listing = _Listing(lambda: plugin_tools_now(home, plugins)) if plugins else None  # meanwhile, in its own process
        if needs_sandbox(definition):
            snapshot.sandbox_problem = probe()
        servers = frozen.get("mcps") or {}
        if servers:
            connections = list_mcp_tools(home, servers, directory)
            held.append(connections)
            snapshot.mcp_tools, snapshot.mcp_unavailable = dict(connections.tools), dict(connections.unavailable)
        if listing is not None:
            snapshot.plugin_tools, snapshot.plugin_unavailable = listing.result()
    snapshot.skills = {name: skill_description(part) for name, part in (frozen.get("skills") or {}).items()}
    return snapshot


def sources_may_wait(definition: dict[str, Any], frozen: dict[str, Any]) -> bool:
    """Whether `sources_now` may wait long for what `definition` uses: its MCP servers started,
    its plugins listed, the sandbox probed (each can take seconds or more)."""
    return bool(frozen.get("mcps") or frozen.get("plugins") or needs_sandbox(definition))


class _Listing:
    """A job of another thread (a blocking listing), while this one does its own."""

    def __init__(self, job: Any) -> None:
        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(job,), name="fw-plugin-listing", daemon=True)
        self._thread.start()

    def _run(self, job: Any) -> None:
        try:
            self._box["value"] = job()
        except BaseException as exc:  # handed to the caller
            self._box["error"] = exc

    def result(self) -> Any:
        self._thread.join()
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


def tools_offered_now(home: Home, definition: dict[str, Any], directory: str | None = None) -> dict[str, Any]:
    """Every sandbox, MCP, plugin and skill tool the sources of `definition` (its `mcps`,
    `skills` and `sandbox`) give now, whatever its `allowed_tools` say, as the projection
    names them; and each source or name that gives none, with the projection's reason
    (`source_unavailable`, `ambiguous_name`, ...). Servers started to list their tools are
    stopped again before this returns."""
    wanted = _governed_sources(definition)
    held: list[Any] = []
    try:
        snapshot = sources_now(home, wanted, True, None, freeze(home, wanted, None, None), directory, held)
    finally:
        RunSources(home, None, *held).close()
    return _offered(snapshot)


def _governed_sources(definition: dict[str, Any]) -> dict[str, Any]:
    """The parts of a definition that name the sources `allowed_tools` governs."""
    return {k: definition[k] for k in ("mcps", "skills", "sandbox") if definition.get(k) is not None}


def _offered(snapshot: Snapshot) -> dict[str, Any]:
    """What the governed sources of a snapshot give, whatever `allowed_tools` says."""
    every = Snapshot(_governed_sources(snapshot.definition), True, None, GROUP_TOOLS,
                     **{k: getattr(snapshot, k) for k in _SOURCE_FIELDS})
    projection = project(every)
    return {"tools": [{"name": n, **projection.sources[n]} for n in projection.tools], "unavailable": projection.unavailable}


def catalogue_now(home: Home, definition: dict[str, Any], directory: str | None = None) -> dict[str, Any]:
    """The whole catalogue of an agent's definition as its sources stand now (seed B): every
    tool a run of it may be offered, with whether it is allowed and available and why not
    (`domain/agent_catalogue.py`); and, as `offered`, what `tools_offered_now` gives."""
    model, harness = _part_now(home, "model", definition), _part_now(home, "harness", definition)
    tool_call = bool(((model or {}).get("capabilities") or {}).get("tool_call"))
    held: list[Any] = []
    try:
        snapshot = sources_now(home, definition, tool_call, harness, freeze(home, definition, None, None), directory, held,
                               managed=True, always=True)
    finally:
        RunSources(home, None, *held).close()
    return {"tools": agent_catalogue(snapshot), "offered": _offered(snapshot)}


_SOURCE_FIELDS = ("mcp_tools", "mcp_unavailable", "skills", "sandbox_problem", "sandbox_tools", "plugins", "plugin_tools", "plugin_unavailable")


def agent_tools(home: Home, name: str) -> dict[str, Any]:
    """`fw agent tools NAME`: the agent's whole catalogue now (its MCP servers are started to
    list their tools, its plugins listed, the sandbox probed)."""
    definition = resource_read(home, "agent", name)["data"]
    return {"agent": name, "tools": catalogue_now(home, definition, str(home.root))["tools"]}


def _part_now(home: Home, kind: str, definition: dict[str, Any]) -> dict[str, Any] | None:
    """The agent's model or harness as it is now; None when it names none or it cannot be read."""
    if not definition.get(kind):
        return None
    try:
        return resource_read(home, kind, definition[kind])["data"]
    except FwError:
        return None


def _project_tools(home: Home, start: Any, held: list[Any]) -> Any:
    """The projection of a run about to start. Its MCP servers are started to list their
    tools (unless the runner may call no tool anyway); the open connections go in `held`."""

    definition = start.definition
    snapshot = sources_now(home, definition, start.model_tool_call, start.harness, start.frozen, start.directory, held,
                           managed=start.mode == "managed")
    projection = project(snapshot)
    if "event" in start.context:  # a run started for a chat-platform event: its event and platform tools

        add_event_tools(home, projection, runner_refusal(snapshot), definition, start.context)
    cap_tools(projection)
    return projection


class WouldWait(Exception):
    """`open_run(quick=True)`: starting this run would start MCP servers, list plugins or
    probe the sandbox, work that may take seconds or more; nothing was started or written."""


def open_run(
    home: Home,
    principal: str | None = None,
    agent: str | None = None,
    lease: int | None = None,
    context: dict[str, Any] | None = None,
    owned: bool = False,
    quick: bool = False,
    ready: Callable[[Any], None] | None = None,
) -> tuple[dict[str, Any], Any]:
    """Start a run and keep its MCP servers running: (run record, RunSources to close).
    `owned`: this process drives the run (see `run_start`). With `quick`, `WouldWait` instead
    of starting a run whose tool sources may take long to answer (an engine starts those on
    its threads for long work, so that they hold up no other run). `ready(start)` is asked
    before anything is started or recorded: what it raises refuses the run (a runner that
    could not work, such as a model whose key is missing)."""

    held: list[Any] = []

    def project(start: Any) -> Any:
        if ready is not None:
            ready(start)
        if quick and sources_may_wait(start.definition, start.frozen):
            raise WouldWait
        return _project_tools(home, start, held)

    try:
        record = run_start(home, project, principal=principal, agent=agent, lease=lease, context=context, owned=owned)
    except BaseException:
        RunSources(home, None, *held).close()
        raise
    return record, RunSources(home, record, *held)


def start_run(home: Home, principal: str | None = None, agent: str | None = None, lease: int | None = None) -> dict[str, Any]:
    """Start a run (`fw run start`): its tools decided, its MCP servers stopped again."""
    record, sources = open_run(home, principal=principal, agent=agent, lease=lease)
    sources.close()
    return record


def _granted(home: Home, run: dict[str, Any], name: str, sources: Any, watch: CallWatch | None = None) -> Tool:
    """The tool behind a name the run's record grants. A name this version cannot resolve
    means the record is damaged (or from another version): `corrupt`, never a crash."""
    if name.startswith(TOOL_PREFIX) and name[len(TOOL_PREFIX):] in TOOLS:
        return TOOLS[name[len(TOOL_PREFIX):]]
    source = (run.get("tool_sources") or {}).get(name)
    if isinstance(source, dict) and source.get("source") == "mcp":
        return Tool(name, f"mcp:{source['server']}", source.get("risk") or "write", source.get("description") or "",
                    source.get("input_schema") or {}, lambda h, c, a: _call_mcp(h, run, source, a, sources, watch),
                    title=source.get("title"),
                    ahandler=(lambda h, c, a, run_sync: sources.acall_mcp(source["server"], source["tool"], a, watch, run_sync))
                    if sources is not None else None)
    if isinstance(source, dict) and source.get("source") == "skill":

        return Tool(name, "skill", "read", source.get("description") or "", source.get("input_schema") or {},
                    lambda h, c, a: skill_text(h, run, source["skill"]))
    if isinstance(source, dict) and source.get("source") == "plugin" and isinstance(source.get("plugin"), str):
        return Tool(name, f"plugin:{source['plugin']}", source.get("risk") or "write", source.get("description") or "",
                    source.get("input_schema") or {}, lambda h, c, a: _call_plugin(h, run, source, a, sources))
    if isinstance(source, dict) and source.get("source") == "sandbox" and name in SANDBOX_TOOLS:
        tool = SANDBOX_TOOLS[name]
        return Tool(name, tool.group, tool.risk, source.get("description") or tool.description,
                    source.get("input_schema") or tool.input_schema, tool.handler)
    if isinstance(source, dict) and source.get("source") in ("event", "platform"):

        return granted_tool(run, name, source)
    rel = f"runs/{run['run_id']}.json"
    raise FwError("corrupt", f"{rel} is corrupt: it grants {name!r}, a tool this version of fw does not know",
                  "this run cannot act; start a new one with `fw run start`", path=rel)


def _call_mcp(home: Home, run: dict[str, Any], source: dict[str, Any], args: dict[str, Any], sources: Any,
              watch: CallWatch | None) -> dict[str, Any]:
    """Call an MCP tool through the caller's open connections, or a one-off connection that
    is closed again after the call."""

    if sources is not None:
        return sources.call_mcp(source["server"], source["tool"], args, watch)
    with RunSources(home, run) as once:
        return once.call_mcp(source["server"], source["tool"], args, watch)


def _call_plugin(home: Home, run: dict[str, Any], source: dict[str, Any], args: dict[str, Any], sources: Any) -> dict[str, Any]:
    """Call a plugin tool in the plugin's process of the caller's run, or in one started for
    this call alone and stopped after it."""
    if sources is not None:
        return sources.call_plugin(source["plugin"], source["tool"], args)
    with RunSources(home, run) as once:
        return once.call_plugin(source["plugin"], source["tool"], args)


def manager_tools() -> list[Tool]:
    """The Manager's tools: those of its groups (never `exec`), group by group."""
    return sorted((t for t in TOOLS.values() if t.group in MANAGER_GROUPS), key=lambda t: MANAGER_GROUPS.index(t.group))


def describe(tool: Tool, name: str) -> dict[str, Any]:
    doc = {"name": name, "description": tool.description, "risk": tool.risk, "group": tool.group,
           "input_schema": tool.input_schema}
    if tool.title:  # an MCP tool's own title
        doc["title"] = tool.title
    return doc


def tool_list_command(caller: Caller) -> str:
    """The command that lists this caller's tools, with the real run id."""
    return "fw tool list --manager" if caller.is_manager else f"fw tool list --run {caller.run_id}"


def caller_for(home: Home, manager: bool, run_id: str | None) -> Caller:
    """The caller named on a command line: exactly one of --manager and --run."""
    if manager == (run_id is not None):
        raise FwError("usage", "give exactly one of --manager and --run RUN", "--manager calls as the Manager; --run RUN as that run")
    if manager:
        return Caller("manager")
    # A part of an id is put whole here; a whole or malformed one goes on as given, so that
    # the call is refused, and audited, where every call is.
    return Caller("run", run_id=resolve_run_id(home, run_id) if RUN_ID_PART_RE.fullmatch(run_id or "") else run_id)


def list_tools(home: Home, caller: Caller, *, assets: bool = False, fresh: bool = False) -> dict[str, Any]:
    """The tools a caller has: every tool for the Manager, the snapshot's tools for a run (and,
    through the gateway, the asset tools its harness permits). `fresh`: the caller's record
    was written by this process a moment ago (the run it just started), and is not read again;
    every call is checked against the record as it stands then."""

    if caller.is_manager:
        return {"tools": [describe(t, t.name) for t in manager_tools()]}
    # an ended run lists nothing, as it calls nothing
    run = caller.run if fresh and caller.run is not None else active_run(home, caller.run_id)  # type: ignore[arg-type]
    _still_may_act(home, run, "", {})
    tools = [describe(_granted(home, run, n, None), n) for n in run["tools"]]
    if assets:
        gateway = _asset_tools(None)
        tools += [describe(gateway[n], n) for n in offered(run)]
    return {"tools": tools}


def check_run(home: Home, run: dict[str, Any]) -> None:
    """Whether a run may still act, beyond its record (its session open, its task its own)."""
    _still_may_act(home, run, "", {})


def _describe_granted(home: Home, run: dict[str, Any], name: str) -> dict[str, Any]:
    return describe(_granted(home, run, name, None), name)


def _asset_tools(sources: Any, watch: CallWatch | None = None) -> dict[str, Tool]:
    """The gateway's asset tools for one call; `fw_call_tool` calls through `call_tool` again,
    audited as the gateway's, with the caller's open MCP connections."""
    return asset_tools(ServiceCalls(
        describe=_describe_granted,
        call=lambda home, caller, name, args: call_tool(home, caller, name, args, sources, via=GATEWAY, watch=watch),
    ))


def _still_may_act(home: Home, run: dict[str, Any], name: str, args: Any) -> None:
    """What else must still hold when a run acts (its session open, its task its own)."""
    for check in RUN_CALL_CHECKS:
        check(home, run, name, args)


_VALIDATORS: dict[str, Any] = {}  # a schema's JSON text -> its validator (None: not valid JSON Schema)


def _validator(schema: dict[str, Any]) -> Any:
    """The validator of a schema, checked and built once a process, not on every call."""
    key = json.dumps(schema, sort_keys=True, ensure_ascii=False, default=str)
    if key in _VALIDATORS:
        return _VALIDATORS[key]
    plain = plain_validator(schema)  # most schemas: checked without importing jsonschema
    if plain is not None:
        _VALIDATORS[key] = plain
        return plain
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
        validator = cls(schema)
    except jsonschema.SchemaError:
        validator = None  # an MCP server's own schema that is not valid JSON Schema: the server checks its arguments
    _VALIDATORS[key] = validator
    return validator


def _validate_args(tool: Tool, args: Any) -> None:
    if not isinstance(args, dict):
        raise FwError("invalid", f"{tool.name}: the arguments must be a JSON object", "see the tool's input_schema in `fw tool list`", field="(arguments)")
    refuse_lone_surrogates(args, "", tool.name)
    validator = _validator(tool.input_schema)
    if validator is None:
        return
    if isinstance(validator, PlainValidator):
        error: Any = validator.best_error(args)
    else:
        import jsonschema  # lazy: start-up speed

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
            extra = sorted(set(args) - set(tool.input_schema.get("properties") or {}))
            message = f"unknown {'parameter' if len(extra) == 1 else 'parameters'}: {', '.join(extra)}"
        suggestion: dict[str, str] = {}
        if error.validator == "required":
            message = error.message.replace("'", "")
            suggestion = _misnamed(error)
            if suggestion:
                message += f", and {suggestion['given']!r} is not a parameter"
        elif error.validator == "enum":
            message = f"must be one of: {', '.join(map(str, error.validator_value))}"
            suggestion = did_you_mean(error.instance, error.validator_value)
        hint = hint_with(suggestion, "see the tool's input_schema in `fw tool list`")
        raise FwError("invalid", f"{tool.name}: {where}: {message}", hint, field=where, **suggestion)


def _misnamed(error: Any) -> dict[str, str]:
    """A required parameter that is missing because it was given a typo away (`txt` for
    `text`): {"given", "did_you_mean"}, else {}."""
    instance = error.instance if isinstance(error.instance, dict) else {}
    known = set((error.schema or {}).get("properties") or {})
    missing = [name for name in error.validator_value if name not in instance] if isinstance(error.validator_value, list) else []
    for given in (key for key in instance if key not in known):
        found = did_you_mean(given, missing)
        if found:
            return found
    return {}


def call_tool(home: Home, caller: Caller, name: str, args: Any, sources: Any = None, *, via: str | None = None,
              assets: bool = False, watch: CallWatch | None = None) -> dict[str, Any]:
    """Authorise, validate and run one call; audit it whatever happens. `via` names the front
    door in the audit (`gateway`); with `assets`, the gateway's asset tools may be called too;
    `watch` follows the call while it runs (its progress, a cancel)."""

    tool, caller = _checked_call(home, caller, name, args, sources, via, assets, watch)
    try:
        result = tool.handler(home, caller, args)
    except BaseException as exc:
        _audit_failure(home, caller, name, args, via, exc)
        raise
    audit.record(home, caller=caller.identity, run_id=caller.run_id, tool=name, params=args, outcome="ok", via=via)
    return result


async def acall_tool(home: Home, caller: Caller, name: str, args: Any, sources: Any = None, *, run_sync: Any = None,
                     watch: CallWatch | None = None) -> dict[str, Any]:
    """`call_tool` for an event loop (the engine's): the checks and the audit run on `run_sync`
    (the engine's threads; `asyncio.to_thread` by default), a blocking tool (`exec` may take
    minutes) on its pool for long work, `run_sync.blocking` where it has one; a tool that can
    wait without a thread (an MCP call, task_wait) is awaited on the loop."""
    import asyncio

    run_sync = run_sync or asyncio.to_thread
    tool, caller = await run_sync(_checked_call, home, caller, name, args, sources, None, False, watch)
    try:
        if tool.ahandler is not None:
            result = await tool.ahandler(home, caller, args, run_sync)
        else:
            result = await long_work(run_sync)(tool.handler, home, caller, args)
    except BaseException as exc:
        await run_sync(_audit_failure, home, caller, name, args, None, exc)
        raise
    await run_sync(lambda: audit.record(home, caller=caller.identity, run_id=caller.run_id, tool=name, params=args, outcome="ok"))
    return result


def _audit_failure(home: Home, caller: Caller, name: str, args: Any, via: str | None, exc: BaseException) -> None:
    if isinstance(exc, FwError):
        outcome = "refused" if exc.code in REFUSALS else "error"
        audit.record(home, caller=caller.identity, run_id=caller.run_id, tool=name, params=args, outcome=outcome,
                     error_code=exc.code, via=via)
    elif isinstance(exc, Exception):
        audit.record(home, caller=caller.identity, run_id=caller.run_id, tool=name, params=args, outcome="error",
                     error_code="internal", via=via)


def _checked_call(home: Home, caller: Caller, name: str, args: Any, sources: Any, via: str | None, assets: bool,
                  watch: CallWatch | None) -> tuple[Tool, Caller]:
    """The tool a call may run, and the caller as the audit names it; a refusal is audited
    here, and raised."""
    run_id = caller.run_id
    try:
        if caller.is_manager:
            tool = TOOLS.get(name)
            if tool is None or tool.group == MANAGED_RUNTIME:
                hint = "the Manager uses bare names (resource_write)" if name.startswith(TOOL_PREFIX) else "see `fw tool list --manager`"
                suggestion = did_you_mean(name, [n for n, t in TOOLS.items() if t.group in MANAGER_GROUPS])
                raise FwError("not_found", f"no tool named {name!r}", hint_with(suggestion, hint), **suggestion)
            if tool.group not in MANAGER_GROUPS:
                raise FwError("denied", f"the Manager is never granted {name!r}: host execution is only for runs",
                              "mount local_execution on an agent with execution.enabled and call it from that agent's run")
        else:

            run = unless_abandoned(home, load_run(home, run_id))  # type: ignore[arg-type]  # re-read: ended, expired, orphaned since?
            caller = Caller("run", run_id, run)  # a refusal below is audited as the run's identity
            require_active(run)
            if assets and name in offered(run):
                tool = _asset_tools(sources, watch)[name]
            elif name not in run["tools"]:
                suggestion = did_you_mean(name, run["tools"])
                raise FwError(
                    "denied",
                    f"run {run_id} was not granted {name!r}",
                    hint_with(suggestion, "a run gets the tools of the groups its agent mounted when it started, if its model can call tools"),
                    **suggestion,
                )
            else:
                tool = _granted(home, run, name, sources, watch)
        if not caller.is_manager:
            _still_may_act(home, caller.run, name, args)  # type: ignore[arg-type]
        try:
            _validate_args(tool, args)
        except FwError as exc:  # name the caller's own listing, which a bare `fw tool list` is not
            exc.hint = exc.hint.replace("`fw tool list`", f"`{tool_list_command(caller)}`")
            raise
    except BaseException as exc:
        _audit_failure(home, caller, name, args, via, exc)
        raise
    return tool, caller
