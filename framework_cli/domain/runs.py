"""Runs: a frozen snapshot of an agent, taken when the run starts, that decides its tools.

A run starts from its agent's definition as it is then, its model, provider, prompt, skills, MCP
servers, harness and the home's enabled plugins, frozen into its record (`run_records.py`
keeps the records and the life of a run after its start). Later edits of the agent change no
started run; a started run reads only its snapshot.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets as pysecrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from ..errors import FwError
from ..home import secrets
from ..home.kinds import DEFAULT_PROMPT, check_name
from ..home.secrets import GATEWAY_TOKEN_PREFIX
from ..home.store import Home
from ..liveness import HOST, me
from .identities import binding_command, binding_directory, get_binding, get_principal, no_principal
from .plugins import frozen_plugins
from .resources import resource_read
from .run_records import (
    BEATS,
    DEFAULT_LEASE_SECONDS,
    MAX_LEASE_SECONDS,
    TOKEN_HASH,
    RunRecords,
    present,
    record_text,
    run_end,
    stamp_of,
    token_hash,
    utc_now,
)


def fingerprint(definition: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of an agent's definition (builtin_tools included)."""
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass
class RunStart:
    """What a run starts from, read before it is recorded: the agent's definition as it is
    now, its model and harness, and where and how long the run may act."""

    mode: str  # "managed" or "explicit"
    identity: str
    agent: str
    definition: dict[str, Any]
    model: dict[str, Any] | None
    harness: dict[str, Any] | None  # None: the built-in local runner
    directory: str  # the binding's working folder (managed), or the home (explicit)
    max_rounds: int | None  # the binding's (managed)
    lease_seconds: int
    # What the run is started for, recorded with it: a session it is tied to, an event, ...
    context: dict[str, Any] = field(default_factory=dict)
    # The definitions of what the agent uses, frozen for the run (see `freeze`).
    frozen: dict[str, Any] = field(default_factory=dict)
    workspace: str = ""  # where exec and the sandbox tools work (see `workspace_for`)

    @property
    def model_tool_call(self) -> bool:
        return bool(((self.model or {}).get("capabilities") or {}).get("tool_call"))


class ProjectionLike(Protocol):
    tools: list[str]
    unavailable: list[dict[str, Any]]
    sources: dict[str, dict[str, Any]]
    record: dict[str, Any]  # more fields the projection adds to the run record


# What decides a run's tools from what it starts from. The tool service supplies it (it knows
# the tools and starts the MCP servers), so this module never imports the registry.
Project = Callable[[RunStart], ProjectionLike]


def _load_part(home: Home, agent: str, kind: str, name: str) -> dict[str, Any]:

    try:
        return resource_read(home, kind, name)["data"]
    except FwError as exc:
        raise FwError(
            "invalid",
            f"agent {agent!r} uses {kind} {name!r}, which cannot be loaded: {exc.message}",
            f"fix the agent's {kind} first (`fw home check` shows what is wrong)",
        ) from None


def prepare_run(
    home: Home,
    principal: str | None = None,
    agent: str | None = None,
    lease: int | None = None,
    context: dict[str, Any] | None = None,
) -> RunStart:
    """Check that a run may start and read what it starts from; nothing is written."""

    if (principal is None) == (agent is None):
        raise FwError("usage", "give exactly one of --principal and --agent", "--principal P starts a managed run, --agent A an explicit one")
    if lease is not None and (not isinstance(lease, int) or isinstance(lease, bool) or not 1 <= lease <= MAX_LEASE_SECONDS):
        raise FwError("invalid", f"the lease must be a whole number of seconds from 1 to {MAX_LEASE_SECONDS}", "e.g. --lease 600")
    directory, max_rounds = str(home.root), None
    if principal is not None:
        check_name(principal, "principal name")
        binding = _enabled_binding(home, principal)
        mode, identity, agent = "managed", principal, binding["agent"]
        directory, max_rounds = binding["directory"], binding["max_rounds"]
    else:
        check_name(agent, "agent reference")
        mode, identity = "explicit", f"runtime:{agent}"
    assert agent is not None
    try:
        definition = resource_read(home, "agent", agent)["data"]
    except FwError as exc:
        if exc.code == "not_found":
            raise FwError("not_found", exc.message, exc.hint.replace("fw resource list agent", "fw agent list"), **exc.extra) from None
        raise
    model = _load_part(home, agent, "model", definition["model"]) if definition.get("model") else None
    harness = _load_part(home, agent, "harness", definition["harness"]) if definition.get("harness") else None
    frozen = freeze(home, definition, model, harness)
    own = binding_directory(home, identity) if mode == "managed" else None
    return RunStart(mode, identity, agent, definition, model, harness, directory, max_rounds, lease or DEFAULT_LEASE_SECONDS,
                    dict(context or {}), frozen, workspace_for(home, mode, identity, agent, own))


WORKSPACES = "workspaces"


def workspace_for(home: Home, mode: str, identity: str, agent: str, binding_directory: str | None) -> str:
    """Where a run's `exec` and sandbox tools work: its binding's directory when it names one,
    else `<home>/workspaces/<principal>` (managed) or `<home>/workspaces/<agent>` (explicit).
    External runners and MCP servers keep the run's working folder (`directory`)."""
    if binding_directory:
        return os.path.abspath(binding_directory)
    return str(home.root.absolute() / WORKSPACES / (identity if mode == "managed" else agent))


def workspace_of(home: Home, run: dict[str, Any]) -> str:
    """The workspace a run records (a record written before runs had one: worked out again)."""
    recorded = run.get("workspace")
    if isinstance(recorded, str) and recorded:
        return recorded
    directory = run.get("directory")
    own = directory if directory and os.path.realpath(directory) != os.path.realpath(home.root) else None
    return workspace_for(home, str(run.get("mode")), str(run.get("identity")), str(run.get("agent")), own)


SECRET_FIELDS = {"mcp": ("env", "headers")}  # left out of a snapshot: read from secrets/ when used


def freeze(home: Home, definition: dict[str, Any], model: dict[str, Any] | None, harness: dict[str, Any] | None) -> dict[str, Any]:
    """The definitions a run uses, as they are when it starts: its model, provider (never the
    key: a provider shows only `api_key_set`), prompt, skills, MCP servers, harness and the
    home's enabled plugins (never their secret settings). Each
    part is `{"name", "data", "body"?}`, or `{"name", "error"}` when it cannot be read (what
    needs it fails with that message: a model or provider of fw's own loop before the run
    starts, a skill or MCP server when it is used). A started run reads only these."""
    frozen: dict[str, Any] = {
        "model": {"name": definition["model"], "data": model} if model is not None else None,
        "harness": {"name": definition["harness"], "data": harness} if harness is not None else None,
        "provider": _frozen(home, "provider", model["provider"]) if model and model.get("provider") else None,
        "prompt": _frozen(home, "prompt", definition.get("prompt") or DEFAULT_PROMPT),
        "skills": {name: _frozen(home, "skill", name) for name in definition.get("skills") or []},
        "mcps": {name: _frozen(home, "mcp", name) for name in definition.get("mcps") or []},
        "plugins": frozen_plugins(home),  # every agent of the home may be offered an enabled plugin's tools
    }
    return frozen


def _frozen(home: Home, kind: str, name: str) -> dict[str, Any]:
    try:
        doc = resource_read(home, kind, name)
    except FwError as exc:
        return {"name": name, "error": exc.message}
    data = {k: v for k, v in doc["data"].items() if k not in SECRET_FIELDS.get(kind, ())}
    # a key written into a prompt or skill by hand never reaches runs/: the model reads it redacted anyway
    body = {"body": secrets.redact(doc["body"])} if isinstance(doc.get("body"), str) else {}
    return {"name": name, "data": data, **body}


def frozen_part(home: Home, run: dict[str, Any], kind: str, name: str | None = None) -> dict[str, Any]:
    """One definition a run uses, from its snapshot: `kind` is model, provider, prompt or
    harness, or skills/mcps with the `name`. `invalid` when it could not be read at the start.
    A record written before runs froze their parts reads the home instead."""
    snapshot = run.get("snapshot")
    if not isinstance(snapshot, dict):
        singular = {"skills": "skill", "mcps": "mcp"}.get(kind, kind)
        return _frozen(home, singular, name) if name else {"name": None, "error": f"the run has no {kind}"}
    part = snapshot.get(kind)
    if name is not None:
        part = (part or {}).get(name) if isinstance(part, dict) else None
    if not isinstance(part, dict):
        label = f"{kind[:-1]} {name!r}" if name else kind
        return {"name": name, "error": f"the run's snapshot holds no {label}"}
    return part


def frozen_data(home: Home, run: dict[str, Any], kind: str, name: str | None = None) -> dict[str, Any]:
    """A frozen part's whole document (`data`, and `body` for a prompt or skill); `invalid` with
    the reason when it could not be read when the run started."""
    part = frozen_part(home, run, kind, name)
    if "error" in part:
        label = kind[:-1] if name else kind
        agent = run.get("agent")
        raise FwError("invalid", f"the {label} of agent {agent!r} cannot be used: {part['error']}" if agent
                      else f"the run's {label} cannot be used: {part['error']}",
                      "fix it (`fw home check` shows what is wrong), then run the agent again")
    return part


def _enabled_binding(home: Home, principal: str) -> dict[str, Any]:

    _require_agent_identity(home, principal)
    binding = get_binding(home, principal)
    if binding is None:
        raise FwError("not_found", f"principal {principal!r} has no binding", f"bind it: {binding_command(home, principal)}")
    if not binding["enabled"]:
        raise FwError("denied", f"the binding of {principal!r} is disabled", f"enable it: `fw binding enable {principal}`",
                      reason="binding_disabled")
    return binding


def run_start(
    home: Home,
    project: Project,
    principal: str | None = None,
    agent: str | None = None,
    lease: int | None = None,
    context: dict[str, Any] | None = None,
    owned: bool = False,
) -> dict[str, Any]:
    """Start a run: read what it starts from, decide its tools (`project`, which may start MCP
    servers and so runs outside the home's lock), then record it, with its `context` (the
    session it is tied to, the event it handles, ...) and, when `owned`, this process as the
    owner that drives it."""
    start = prepare_run(home, principal, agent, lease, context)
    listing = time.monotonic()
    projection = project(start)
    if start.mode == "managed" and time.monotonic() - listing > SLOW_LISTING_SECONDS:
        _same_binding(home, start)  # the binding may have changed while the tools were listed (MCP servers started)
    started = utc_now()
    run_id = f"run-{started.strftime('%Y%m%dT%H%M%S')}-{pysecrets.token_hex(4)}"
    # A new record, under its own lock: the home's lock would make every run's start wait for
    # every other's writes. So the binding is looked at once more after the record is written:
    # one removed, disabled or changed meanwhile (a principal deleted with it) ends the run.
    records = RunRecords(home)
    with records.locked(run_id):
        token = f"{GATEWAY_TOKEN_PREFIX}{run_id}_{pysecrets.token_urlsafe(32)}"
        record = {
            "run_id": run_id,
            "mode": start.mode,
            "identity": start.identity,
            "agent": start.agent,
            "fingerprint": fingerprint(start.definition),
            "definition": start.definition,
            "model_tool_call": start.model_tool_call,
            "tools": projection.tools,
            "unavailable_tools": projection.unavailable,
            "tool_sources": projection.sources,
            "snapshot": start.frozen,
            "directory": start.directory,
            "workspace": start.workspace,
            "max_rounds": start.max_rounds,
            "status": "active",
            "started_at": stamp_of(started),
            "lease_seconds": start.lease_seconds,
            "lease_expires_at": stamp_of(started + timedelta(seconds=start.lease_seconds)),
            "ended_at": None,
            "runner": runner_of(start.harness, start.definition.get("harness")),
            **start.context,
            **projection.record,
            TOKEN_HASH: token_hash(token),
        }
        if owned:
            record["owner"] = {"host": HOST, "process": me(), "heartbeat_at": stamp_of(started)}
        records.write(run_id, record_text(record))
    if owned:
        BEATS.own(home, run_id, started)
    if start.mode == "managed":
        try:
            _same_binding(home, start)
        except FwError:
            run_end(home, run_id)
            raise
    return {**present(record), "gateway_token": token}


# A listing of tools that took longer than this (MCP servers or plugins started) has the binding
# looked at again before the record is written; the look after the write holds in every case.
SLOW_LISTING_SECONDS = 0.05


def _same_binding(home: Home, start: RunStart) -> None:
    binding = _enabled_binding(home, start.identity)
    if binding["agent"] != start.agent:
        raise FwError("conflict", f"the binding of {start.identity!r} changed while the run started", "start the run again")


def runner_of(harness: dict[str, Any] | None, name: str | None) -> dict[str, Any]:
    """Which runner runs an agent: fw's own model loop (`local`), or the program of a harness of
    type `external`, which reaches the run only through the gateway."""
    if harness is not None and harness.get("type") == EXTERNAL:
        return {"type": EXTERNAL, "harness": name, "command": command_argv(harness.get("command"))}
    return {"type": "local", "harness": name}


EXTERNAL = "external"


def command_argv(command: Any) -> list[str]:
    """A harness's command as argv: a list as it is, a string split as a shell would split it
    (no shell runs it)."""
    if isinstance(command, list):
        return [str(part) for part in command]
    try:
        return shlex.split(command or "")
    except ValueError:  # an unclosed quote: the model refuses it on write; a hand-edited file shows as is
        return [command]


def _require_agent_identity(home: Home, principal: str) -> None:
    """A managed run acts as its principal: a missing or damaged identity stops it."""

    who = get_principal(home, principal)  # `corrupt` when the file is damaged
    if who is None:
        raise no_principal(home, principal, f"create it: `fw principal create {principal} --kind agent`")
    if who["kind"] != "agent":
        raise FwError("invalid", f"principal {principal!r} is a {who['kind']}, not an agent identity", "a managed run acts as a principal of kind agent")
