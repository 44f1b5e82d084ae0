"""What the page's forms hold, both ways: a stored definition as the values of a form, and
a submitted form as the definition (or merge patch) the domain functions take.

Plain functions on plain data: the page renders what `*_values` give and saves what
`*_definition` give; the domain decides whether it is valid.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ...domain.agent_catalogue import SOURCES
from ...domain.catalogue import EVENT_TOOLS, EVENT_TYPES, PLATFORM_TOOLS, selects
from ...domain.projection import AMBIGUOUS, MCP_PREFIX, PLUGIN_PREFIX, SANDBOX_PREFIX, SKILL_PREFIX, SOURCE_UNAVAILABLE
from ...errors import FwError
from ...home.kinds import DEFAULT_CATEGORY

# A form as the page reads it: each field's values, in the order they came.
Form = dict[str, list[str]]


def form_of(items: Iterable[tuple[str, Any]]) -> Form:
    out: Form = {}
    for key, value in items:
        if isinstance(value, str):
            out.setdefault(key, []).append(value)
    return out


def one(form: Form, key: str) -> str:
    """A single-valued field, its surrounding white space removed ('' when absent)."""
    return (form.get(key) or [""])[0].strip()


def many(form: Form, key: str) -> list[str]:
    """A many-valued field (ticked checkboxes), each once, in order."""
    return list(dict.fromkeys(v for v in form.get(key, []) if v))


def words(text: str) -> list[str]:
    """Event patterns as typed: separated by commas or white space."""
    return list(dict.fromkeys(w for w in re.split(r"[\s,]+", text) if w))


def optional(value: str) -> str | None:
    return value or None


# What each form shows, and so always sends: a field's name (an empty field is still sent), or
# a checkbox group's `sent` marker (a group with nothing ticked sends no value of its own).
AGENT_FIELDS = ("category", "description", "model", "prompt", "harness", "events", "execution.sandbox")
AGENT_GROUPS = ("builtin_tools", "execution.enabled", "execution.network", "sandbox", "sandbox.network", "mcps", "skills",
                "allowed_tools", "allowed_platform_tools")
MODEL_FIELDS = ("category", "provider", "model_id", "description")
MODEL_GROUPS = ("capabilities.tool_call",)
PROVIDER_FIELDS = ("category", "base_url", "api_key", "description")


def require_shown(form: Form, fields: tuple[str, ...], groups: tuple[str, ...] = (), new: bool = False) -> None:
    """A POST that lacks a field its form always sends is not the form's: refused (`invalid`,
    the field named) before anything is written, so that a thin POST wipes nothing."""
    sent = set(form.get("sent", []))
    for field in (("name",) if new else ()) + fields:
        if field not in form:
            raise FwError("invalid", f"the form sent no {field} field; nothing was saved",
                          "save from the page itself: reload it and try again", field=field)
    for group in groups:
        if group not in sent:
            raise FwError("invalid", f"the form sent no {group} field (its checkboxes' marker); nothing was saved",
                          "save from the page itself: reload it and try again", field=group)


# -- agents -------------------------------------------------------------------------------
def agent_values(name: str, category: str, data: dict[str, Any]) -> dict[str, Any]:
    """A stored agent as its form's values."""
    return {
        "name": name,
        "category": category,
        "description": data.get("description") or "",
        "model": data.get("model") or "",
        "prompt": data.get("prompt") or "",
        "harness": data.get("harness") or "",
        "skills": list(data.get("skills") or []),
        "mcps": list(data.get("mcps") or []),
        "builtin_tools": list(data.get("builtin_tools") or []),
        "execution_enabled": bool((data.get("execution") or {}).get("enabled")),
        "execution_sandbox": (data.get("execution") or {}).get("sandbox") or "bubblewrap",
        "execution_network": bool((data.get("execution") or {}).get("network")),
        "sandbox": data.get("sandbox") is not None,
        "sandbox_network": bool((data.get("sandbox") or {}).get("network")),
        "events": " ".join(data.get("events") or []),
        "allowed_platform_tools": list(data.get("allowed_platform_tools") or []),
        "allowed_tools": data.get("allowed_tools"),  # None: every MCP and skill tool
    }


def new_agent_values() -> dict[str, Any]:
    return {**agent_values("", DEFAULT_CATEGORY, {}), "allowed_tools": None}


def agent_form_values(form: Form) -> dict[str, Any]:
    """A submitted agent form as its values, to show again exactly what was typed."""
    return {
        "name": one(form, "name"),
        "category": one(form, "category") or DEFAULT_CATEGORY,
        "description": one(form, "description"),
        "model": one(form, "model"),
        "prompt": one(form, "prompt"),
        "harness": one(form, "harness"),
        "skills": many(form, "skills"),
        "mcps": many(form, "mcps"),
        "builtin_tools": many(form, "builtin_tools"),
        "execution_enabled": bool(form.get("execution.enabled")),
        "execution_sandbox": one(form, "execution.sandbox") or "bubblewrap",  # absent: the safe side
        "execution_network": bool(form.get("execution.network")),
        "sandbox": bool(form.get("sandbox")),
        "sandbox_network": bool(form.get("sandbox.network")),
        "events": one(form, "events"),
        "allowed_platform_tools": many(form, "allowed_platform_tools"),
        "allowed_tools": many(form, "allowed_tools") + many(form, "allowed_tools_kept"),
    }


def agent_definition(values: dict[str, Any]) -> dict[str, Any]:
    """An agent form's values as a whole definition; empty fields are None."""
    return {
        "description": optional(values["description"]),
        "model": optional(values["model"]),
        "prompt": optional(values["prompt"]),
        "harness": optional(values["harness"]),
        "skills": values["skills"],
        "mcps": values["mcps"],
        "builtin_tools": values["builtin_tools"],
        "execution": {"enabled": values["execution_enabled"], "sandbox": values["execution_sandbox"], "network": values["execution_network"]},
        "sandbox": {"backend": "bubblewrap", "network": values["sandbox_network"]} if values["sandbox"] else None,
        "events": words(values["events"]) or None,
        "allowed_platform_tools": values["allowed_platform_tools"] or None,
        "allowed_tools": values["allowed_tools"],
    }


DEFAULTS: dict[str, Any] = {"skills": [], "mcps": [], "builtin_tools": [],
                            "execution": {"enabled": False, "sandbox": "bubblewrap", "network": False}}


def creation(definition: dict[str, Any]) -> dict[str, Any]:
    """A new agent's definition without the fields left at their defaults (allowed_tools is
    always written: the form's ticks are an explicit list)."""
    return {k: v for k, v in definition.items() if k == "allowed_tools" or (v is not None and v != DEFAULTS.get(k))}


def changes(stored: dict[str, Any], definition: dict[str, Any]) -> dict[str, Any]:
    """The merge patch from a stored definition (defaults filled) to a whole one: only the
    fields whose value differs, so a save that changes nothing rewrites nothing."""
    return {k: v for k, v in definition.items() if stored.get(k, DEFAULTS.get(k)) != v}


def kept_order(stored: list[str], ticked: list[str]) -> list[str]:
    """A list as ticked on the page, in its stored order (new entries after): saving the page
    never reorders an agent's `mcps`, whose order decides which tools fall past the cap."""
    return [m for m in stored if m in ticked] + [m for m in ticked if m not in stored]


def tool_source_of(name: str, mcps: list[str], skills: list[str], sandbox: bool = False, plugins: list[str] = ()) -> bool:
    """Whether a model-side tool name comes from one of these sources."""
    return (any(name == f"{SKILL_PREFIX}{s}" for s in skills) or any(name.startswith(f"{MCP_PREFIX}{m}__") for m in mcps)
            or (sandbox and name.startswith(SANDBOX_PREFIX)) or any(name.startswith(f"{PLUGIN_PREFIX}{p}__") for p in plugins))


def event_tools(patterns: list[str]) -> list[dict[str, Any]]:
    """Every event tool, and whether the agent's `events` select it (a run started for an
    event of a type they select may be offered it)."""
    types = [t for t in EVENT_TYPES if selects(patterns, t)]
    return [{"name": t.name, "description": t.description, "risk": t.risk, "selected": any(t.fits(e) for e in types)} for t in EVENT_TOOLS]


def platform_tools(ticked: list[str]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "risk": t.risk, "ticked": t.name in ticked} for t in PLATFORM_TOOLS]


def allowed_tools_view(offered: dict[str, Any], allowed: list[str] | None, shown: list[str] | None,
                       mcps: list[str], skills: list[str], sandbox: bool = False, plugins: list[str] = ()) -> dict[str, Any]:
    """The `allowed_tools` part of the agent form, from what the sources give now
    (`tools_offered_now`): sandbox, MCP, plugin and skill tools. A tool is ticked when the
    agent allows it, when it allows every tool (no `allowed_tools`), or when it was not on the
    page before (`shown`: a source just added). Names allowed from a source that gives nothing
    now are kept as they are."""
    listed = [t["name"] for t in offered["tools"]]
    rows = [{**t, "ticked": allowed is None or t["name"] in allowed or (shown is not None and t["name"] not in shown)}
            for t in offered["tools"]]
    notes, silent_prefixes, silent_names = [], [], set()
    for entry in offered["unavailable"]:
        name = entry["name"]
        if name.endswith("__*"):
            silent_prefixes.append(name[:-1])
            kind, _, owner = name[:-3].partition("__")
            notes.append({"source": f"{'MCP server' if kind == 'mcp' else kind} {owner}", **entry})
        else:
            silent_names.add(name)
            source = (f"skill {name[len(SKILL_PREFIX):]}" if entry["reason"] == SOURCE_UNAVAILABLE and name.startswith(SKILL_PREFIX)
                      else "the sandbox" if name.startswith(SANDBOX_PREFIX) and entry["reason"] == SOURCE_UNAVAILABLE else name)
            notes.append({"source": source, **entry})
    kept = [n for n in allowed or [] if n not in listed and tool_source_of(n, mcps, skills, sandbox, plugins)
            and (n in silent_names or any(n.startswith(prefix) for prefix in silent_prefixes))]
    return {
        "rows": rows,
        "notes": notes,
        "kept": kept,
        "ambiguous": [n for n in notes if n["reason"] == AMBIGUOUS],
        "listed_sources": [f"mcp:{m}" for m in mcps] + [f"skill:{s}" for s in skills] + (["sandbox"] if sandbox else [])
        + [f"plugin:{p}" for p in plugins],
    }


def unlisted_sources(form: Form, mcps: list[str], skills: list[str], sandbox: bool = False,
                     plugins: list[str] = ()) -> dict[str, Any]:
    """The sources the saved form names whose tools the page did not list (added without the
    page refreshing its list, or a plugin enabled since): their tools are allowed, as a new
    source's would be."""
    listed = set(many(form, "listed_sources"))
    return {"mcps": [m for m in mcps if f"mcp:{m}" not in listed], "skills": [s for s in skills if f"skill:{s}" not in listed],
            "sandbox": sandbox and "sandbox" not in listed, "plugins": [p for p in plugins if f"plugin:{p}" not in listed]}


def catalogue_groups(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The catalogue (`fw agent tools`) grouped by source, in the catalogue's order."""
    titles = {"builtin": "Built-in groups", "managed_runtime": "Managed-run tools (every managed run)", "event": "Event tools",
              "platform": "Platform tools", "sandbox": "Sandbox tools", "mcp": "MCP tools", "plugin": "Plugin tools", "skill": "Skills"}
    return [{"source": source, "title": titles[source], "tools": [t for t in tools if t["source"] == source]}
            for source in SOURCES if any(t["source"] == source for t in tools)]


# -- models -------------------------------------------------------------------------------
def model_values(name: str, category: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "category": category,
        "provider": data.get("provider") or "",
        "model_id": data.get("model_id") or "",
        "tool_call": bool((data.get("capabilities") or {}).get("tool_call")),
        "description": data.get("description") or "",
    }


def model_form_values(form: Form) -> dict[str, Any]:
    return {
        "name": one(form, "name"),
        "category": one(form, "category") or DEFAULT_CATEGORY,
        "provider": one(form, "provider"),
        "model_id": one(form, "model_id"),
        "tool_call": bool(form.get("capabilities.tool_call")),
        "description": one(form, "description"),
    }


def model_definition(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "provider": optional(values["provider"]),
        "model_id": optional(values["model_id"]),
        "capabilities": {"tool_call": values["tool_call"]},
        "description": optional(values["description"]),
    }


# -- providers ----------------------------------------------------------------------------
def provider_values(name: str, category: str, data: dict[str, Any]) -> dict[str, Any]:
    """A stored provider as its form's values: never its key, only whether one is stored."""
    return {
        "name": name,
        "category": category,
        "base_url": data.get("base_url") or "",
        "api_key_env": data.get("api_key_env") or "",  # shown as a note, never a field: a CLI/YAML setting
        "description": data.get("description") or "",
        "api_key_set": bool(data.get("api_key_set")),
    }


def provider_form_values(form: Form, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """What was typed, to show again; the key field stays empty, whatever was typed in it."""
    stored = stored or {}
    return {
        "name": one(form, "name"),
        "category": one(form, "category") or DEFAULT_CATEGORY,
        "base_url": one(form, "base_url"),
        "api_key_env": stored.get("api_key_env") or "",
        "description": one(form, "description"),
        "api_key_set": bool(stored.get("api_key_set")),
    }


def provider_definition(form: Form, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """The provider as submitted. The page offers the key itself only (seed A): an empty key
    field keeps what the provider has; a key typed in replaces it, also a key that came from
    an environment variable (`api_key_env`, a CLI/YAML setting the page never sets)."""
    key = one(form, "api_key")
    data: dict[str, Any] = {
        "base_url": optional(one(form, "base_url")),
        "description": optional(one(form, "description")),
    }
    if key:
        data["api_key"] = key
        if (stored or {}).get("api_key_env"):
            data["api_key_env"] = None
    return data


def field_of(error_field: str | None) -> str:
    """The form field an error names: `builtin_tools[1]` is the builtin_tools field."""
    return (error_field or "").split("[", 1)[0].split(" ", 1)[0]


async def checked_form(request: Request) -> Form:
    """The posted form, once its CSRF token is the session's; 403 otherwise, before anything is read or written."""
    form = form_of((await request.form()).multi_items())
    given = one(form, "csrf_token")
    if not given or not hmac.compare_digest(given.encode(), request.scope["state"]["csrf"].encode()):
        raise HTTPException(403, "CSRF token missing or wrong")
    return form
