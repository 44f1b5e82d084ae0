"""Principals (the identities agents run as) and bindings (which agent a principal runs, how)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import FwError
from ..home.kinds import KINDS, check_name, is_reserved
from ..home.records import (
    edit_record,
    find_one,
    find_record,
    load_record,
    read_definition,
    refuse_secret_values,
    resource_names,
)
from ..home.store import Home
from ..state.clock import now_iso
from ..suggest import did_you_mean, hint_with
from .projection import Snapshot, mount_notes

PRINCIPALS = "principals"
BINDINGS = "bindings"
DEFAULT_MAX_QUEUE = 100  # waiting work of a principal counted as normal


def _load_yaml_dir(home: Home, folder: str, kind: str) -> list[tuple[str, dict[str, Any] | None, str]]:
    """(name, validated data or None when corrupt, relative path) of each file of a folder."""

    out = []
    try:
        entries = sorted(e.name for e in os.scandir(home.path(folder)) if e.name.endswith(".yaml"))
    except FileNotFoundError:
        return []
    for filename in entries:
        if filename.startswith("."):
            continue
        name, rel = filename[:-5], f"{folder}/{filename}"
        try:
            out.append((name, load_record(home, kind, name, rel), rel))
        except FwError:
            out.append((name, None, rel))
    home.keep_refreshed_index()
    return out


def principal_list(home: Home) -> dict[str, Any]:
    items = []
    for name, data, rel in _load_yaml_dir(home, PRINCIPALS, "principal"):
        if data is None:
            items.append({"name": name, "kind": None, "error": {"code": "corrupt", "path": rel}})
        else:
            items.append({"name": name, "kind": data["kind"]})
    return {"principals": items}


def principal_names(home: Home, folder: str = PRINCIPALS) -> list[str]:
    """The names of the principals (or, with folder BINDINGS, of the bound ones), unread."""
    try:
        return sorted(e.name[:-5] for e in os.scandir(home.path(folder)) if e.name.endswith(".yaml") and not e.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []


def no_binding(home: Home, principal: str, hint: str) -> FwError:
    """`not_found` for a binding, with the closest bound principal when there is one."""
    suggestion = did_you_mean(principal, principal_names(home, BINDINGS))
    return FwError("not_found", f"principal {principal!r} has no binding", hint_with(suggestion, hint), **suggestion)


def no_principal(home: Home, name: str, hint: str) -> FwError:
    """`not_found` for a principal, with the closest existing name when there is one."""
    suggestion = did_you_mean(name, principal_names(home))
    return FwError("not_found", f"no principal named {name!r}", hint_with(suggestion, hint), **suggestion)


def get_principal(home: Home, name: str) -> dict[str, Any] | None:

    record = find_record(home, "principal", name, f"{PRINCIPALS}/{name}.yaml")
    if record is not None:
        home.keep_refreshed_index()
    return record


def principal_create(home: Home, name: str, kind: str) -> dict[str, Any]:
    from ..home.models import validate  # lazy: start-up speed

    check_name(name, "principal name")
    if is_reserved(name):
        raise FwError(
            "invalid",
            f"the principal name {name!r} is reserved",
            "'manager' and names starting with 'runtime' name the Manager and explicit runs in the audit; pick another name",
            field="name",
        )
    validate("principal", {"kind": kind})  # refuse a bad kind before taking the lock
    with home.locked():
        if home.exists(f"{PRINCIPALS}/{name}.yaml"):
            raise FwError("exists", f"principal {name!r} already exists", "see them with `fw principal list`")
        data = edit_record(home, "principal", f"{PRINCIPALS}/{name}.yaml", {"kind": kind})
    return {"principal": {"name": name, "kind": data["kind"]}, "created": True}


def principal_delete(home: Home, name: str) -> dict[str, Any]:
    """Delete an identity; refused (`in_use`) while a binding makes it run an agent."""
    check_name(name, "principal name")
    with home.locked():
        if not home.exists(f"{PRINCIPALS}/{name}.yaml"):
            raise no_principal(home, name, "see them with `fw principal list`")
        if home.exists(f"{BINDINGS}/{name}.yaml"):
            raise FwError(
                "in_use",
                f"principal {name!r} is in use: a binding makes it run an agent",
                f"remove the binding first: `fw binding remove {name}`",
                items=[f"binding/{name}"],
            )
        home.remove(f"{PRINCIPALS}/{name}.yaml")
    return {"principal": name, "deleted": True}


def _present_binding(home: Home, principal: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "principal": principal,
        "agent": data["agent"],
        "enabled": data["enabled"],
        "directory": data.get("directory") or str(home.root),
        "max_rounds": data.get("max_rounds"),
        "policy": data["policy"],
        "max_queue": data.get("max_queue", DEFAULT_MAX_QUEUE),
        "enabled_by": data.get("enabled_by"),
        "enabled_at": data.get("enabled_at"),
    }


def binding_list(home: Home) -> dict[str, Any]:
    items = []
    for principal, data, rel in _load_yaml_dir(home, BINDINGS, "binding"):
        if data is None:
            items.append({"principal": principal, "error": {"code": "corrupt", "path": rel}})
        else:
            items.append(_present_binding(home, principal, data))
    return {"bindings": items}


def _binding_record(home: Home, principal: str) -> dict[str, Any] | None:
    """The stored binding (validated; `corrupt` if it is not), or None."""

    record = find_record(home, "binding", principal, f"{BINDINGS}/{principal}.yaml")
    if record is not None:
        home.keep_refreshed_index()
    return record


def get_binding(home: Home, principal: str) -> dict[str, Any] | None:
    record = _binding_record(home, principal)
    return None if record is None else _present_binding(home, principal, record)


def binding_directory(home: Home, principal: str) -> str | None:
    """The folder a binding names itself, or None when it names none (a run's workspace is
    then one of the home's own)."""
    record = _binding_record(home, principal)
    return (record or {}).get("directory") or None


def agent_bindings_of(home: Home, names: list[str]) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Of these principals: which are of kind agent, and the binding of each of those whose
    binding can be read. Reads only their files (a corrupt one counts as absent), so it costs
    the same in a home of thousands of principals."""
    agents: set[str] = set()
    bindings: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            principal = find_record(home, "principal", name, f"{PRINCIPALS}/{name}.yaml")
            if principal is None or principal.get("kind") != "agent":
                continue
            agents.add(name)
            binding = find_record(home, "binding", name, f"{BINDINGS}/{name}.yaml")
            if binding is not None:
                bindings[name] = _present_binding(home, name, binding)
        except FwError:
            continue  # a corrupt file: `fw home check` names it
    home.keep_refreshed_index()
    return bindings, agents


class AgentBindings:
    """Every binding of the home, read once, by the agent it runs; corrupt binding files
    apart, since they might run any agent."""

    def __init__(self, home: Home) -> None:
        self.by_agent: dict[str, list[dict[str, Any]]] = {}
        self.corrupt: list[dict[str, Any]] = []
        for principal, data, rel in _load_yaml_dir(home, BINDINGS, "binding"):
            if data is None:
                self.corrupt.append({"principal": principal, "corrupt": True, "path": rel})
            else:
                self.by_agent.setdefault(data["agent"], []).append(_present_binding(home, principal, data))


def activation(home: Home, agent: str, definition: dict[str, Any] | None = None) -> dict[str, Any]:
    """Whether an agent will actually run, and what is left to do. Never "ready" by default.
    With its definition, also what each mounted tool group grants, or why it grants nothing."""
    bindings = AgentBindings(home).by_agent.get(agent, [])
    enabled = any(b["enabled"] for b in bindings)
    steps: list[dict[str, Any]] = []
    if not bindings:
        name, exists = _identity_for(home, agent)
        steps = [] if exists else [
            {
                "tool": "principal_create",
                "args": {"name": name, "kind": "agent"},
                "command": f"fw principal create {name} --kind agent",
                "why": "an agent runs as an identity; create one for it (or reuse an agent principal)",
            },
        ]
        steps.append({
            "tool": "agent_bind",
            "args": {"principal": name, "agent": agent},
            "command": f"fw binding set {name} --agent {agent}",
            "why": "a binding makes the identity run this agent; it is enabled when created",
        })
    elif not enabled:
        principal = bindings[0]["principal"]
        steps = [
            {
                "tool": "agent_set_enabled",
                "args": {"principal": principal, "enabled": True},
                "command": f"fw binding enable {principal}",
                "why": "every binding of this agent is disabled",
            }
        ]
    if definition is not None and not definition.get("model") and not definition.get("harness"):
        models = resource_names(home, KINDS["model"])
        model = next(iter(models)) if len(models) == 1 else "MODEL"
        steps.insert(0, {"tool": "resource_write", "args": {"kind": "agent", "reference": agent, "create": False, "data": {"model": model}},
                         "command": f"fw agent edit {agent} --model {model}",
                         "why": "fw's own loop asks a model, and this agent names none"
                                + ("" if model != "MODEL" else "; MODEL one of `fw resource list model`")})
    doc = {"configured": True, "enabled": enabled, "bindings": bindings, "next_steps": steps}
    if definition is not None:
        doc["tool_groups"] = tool_groups(home, definition, agent)
    return doc


def _identity_for(home: Home, agent: str) -> tuple[str, bool]:
    """The principal an unbound agent's next steps name, and whether it exists: the agent's
    own name when that is free or an unbound agent principal, else a free one beside it."""
    stem = agent[:63 - len("-agent-99")]  # a name is at most 63 characters
    for name in (agent, f"{stem}-agent", *(f"{stem}-agent-{n}" for n in range(2, 100))):
        try:
            principal, binding = get_principal(home, name), get_binding(home, name)
        except FwError:  # a damaged file of that name: another name
            continue
        if binding is not None:  # bound (or a binding left without its principal): binding it again would re-point it
            continue
        if principal is None:
            return name, False
        if principal.get("kind") == "agent":
            return name, True
    return f"{stem}-agent-100", False


def tool_groups(home: Home, definition: dict[str, Any], agent: str = "AGENT") -> list[dict[str, Any]]:
    """What each mounted group grants a run of this definition, or why it grants nothing."""
    def load(kind: str) -> dict[str, Any] | None:
        try:
            return read_definition(home, KINDS[kind], definition[kind])[1] if definition.get(kind) else None
        except FwError:
            return None

    model, harness = load("model"), load("harness")
    tool_call = bool(((model or {}).get("capabilities") or {}).get("tool_call"))
    return mount_notes(definition, Snapshot(definition, tool_call, harness, {}), agent)


def binding_command(home: Home, principal: str) -> str:
    """`fw binding set P --agent A`, with the agent named when the home says which: one of
    P's name, or the only agent there is."""

    agents = resource_names(home, KINDS["agent"])
    agent = principal if principal in agents else next(iter(agents)) if len(agents) == 1 else None
    if agent is None:
        return f"`fw binding set {principal} --agent AGENT`, AGENT one of `fw agent list`"
    return f"`fw binding set {principal} --agent {agent}`"


def _binding_next_step(principal: str, enabled: bool) -> dict[str, Any]:
    if enabled:
        return {"command": f"fw run start --principal {principal}", "why": "the binding is enabled: start a managed run"}
    return {
        "tool": "agent_set_enabled",
        "args": {"principal": principal, "enabled": True},
        "command": f"fw binding enable {principal}",
        "why": "the binding is disabled: enable it to let it run",
    }


def agent_bind(
    home: Home,
    principal: str,
    agent: str,
    directory: str | None = None,
    max_rounds: int | None = None,
    policy: str | None = None,
    max_queue: int | None = None,
    by: str | None = None,
) -> dict[str, Any]:
    """Create or update a binding. A new one is enabled (directory: the home, rounds:
    unlimited, policy: mentioned, max_queue: 100), `by` noted as who enabled it and when; an
    update changes only what is given, never `enabled`."""

    check_name(principal, "principal name")
    check_name(agent, "agent reference")
    with home.locked():
        who = get_principal(home, principal)
        if who is None:
            raise no_principal(home, principal, f"create it first: `fw principal create {principal} --kind agent`")
        if who["kind"] != "agent":
            raise FwError("invalid", f"principal {principal!r} is a {who['kind']}, not an agent identity", "bind an identity of kind agent")
        try:
            find_one(home, KINDS["agent"], agent)
        except FwError as exc:
            if exc.code != "not_found":
                raise
            raise FwError("invalid", exc.message, exc.hint.replace("fw resource list agent", "fw agent list"), **exc.extra) from None
        if directory is not None:
            refuse_secret_values(home, {"directory": directory}, None)  # before anything quotes it
        if directory is not None and not os.path.isdir(directory):
            raise FwError("invalid", "the folder given as directory does not exist (or is not a folder)",
                          "create it first, or give an existing folder", field="directory")
        patch: dict[str, Any] = {"agent": agent}
        if _binding_record(home, principal) is None:
            patch.update(enabled=True, policy="mentioned", enabled_by=by or "fw", enabled_at=now_iso())
        for key, value in (("directory", directory), ("max_rounds", max_rounds), ("policy", policy), ("max_queue", max_queue)):
            if value is not None:
                patch[key] = value
        binding = _present_binding(home, principal, edit_record(home, "binding", f"{BINDINGS}/{principal}.yaml", patch))
    return {"binding": binding, "enabled": binding["enabled"], "next_step": _binding_next_step(principal, binding["enabled"])}


def operator(door: str = "fw") -> str:
    """Who a person at this machine is, as `enabled_by` notes it: their login and the door they
    used (`alice (fw)`, `alice (fw web)`)."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user} ({door})"


def agent_set_enabled(home: Home, principal: str, enabled: bool, by: str | None = None) -> dict[str, Any]:
    """Turn a binding on or off; a change notes `by` as `enabled_by`, with `enabled_at` (a
    binding already so is left as it is)."""
    check_name(principal, "principal name")
    if not isinstance(enabled, bool):
        raise FwError("invalid", "enabled must be true or false")
    with home.locked():
        current = _binding_record(home, principal)
        if current is None:
            raise no_binding(home, principal, f"bind it first: {binding_command(home, principal)}")
        patch: dict[str, Any] = {"enabled": enabled}
        if current.get("enabled") != enabled:
            patch.update(enabled_by=by or "fw", enabled_at=now_iso())
        record = edit_record(home, "binding", f"{BINDINGS}/{principal}.yaml", patch)
    return {"binding": _present_binding(home, principal, record), "enabled": enabled}


def agent_unbind(home: Home, principal: str) -> dict[str, Any]:
    check_name(principal, "principal name")
    with home.locked():
        if not home.exists(f"{BINDINGS}/{principal}.yaml"):
            raise no_binding(home, principal, "see them with `fw binding list`")
        home.remove(f"{BINDINGS}/{principal}.yaml")
    return {"principal": principal, "unbound": True}
