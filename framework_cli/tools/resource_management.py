"""The `resource_management` group: the seven kinds, categories, identities and bindings.

Each handler is a one-line call of the domain function the matching CLI command calls.
"""

from __future__ import annotations

from typing import Any

from ..domain.deletion import resource_delete
from ..domain.identities import (
    agent_bind,
    agent_unbind,
    binding_list,
    principal_create,
    principal_list,
)
from ..domain.probes import provider_models, resource_test
from ..domain.resources import (
    category_create,
    category_delete,
    category_list,
    resource_list,
    resource_read,
    resource_write,
)
from ..domain.tool_types import KIND, NAME, Caller, Tool, object_schema
from ..errors import FwError
from ..home.store import Home
from ..runtime.sessions import set_binding_enabled
from .registry import register


def _principal_create(home: Home, caller: Caller, a: dict[str, Any]) -> dict[str, Any]:
    if not caller.is_manager and a["kind"] != "agent":
        raise FwError(
            "denied",
            f"inside a run only agent identities can be created, not {a['kind']!r}",
            "creating a user or manager identity is for the Manager (`fw principal create`)",
        )
    return principal_create(home, a["name"], a["kind"])


RM = "resource_management"
register(
    Tool("resource_list", RM, "read",
         "List the resources of one kind (provider, model, prompt, skill, mcp, harness, agent) with a short summary of each. Secret values are never shown.",
         object_schema(["kind"], kind=KIND, category={**NAME, "description": "only this category"}), lambda h, c, a: resource_list(h, a["kind"], a.get("category"))),
    Tool("resource_read", RM, "read",
         "Read one resource's definition, and the text (body) of a prompt or skill. A provider shows api_key_set, never its key.",
         object_schema(["kind", "reference"], kind=KIND, reference=NAME), lambda h, c, a: resource_read(h, a["kind"], a["reference"])),
    Tool("resource_write", RM, "write",
         "Create a resource (create=true: data is the whole definition, the name must be new) or update one (create=false: data is a JSON merge patch; null removes a field). A prompt's or skill's text is data.body. A provider's key goes in data.api_key and is stored as a secret. For an agent the result says whether it is enabled and what to do next.",
         object_schema(["kind", "reference", "create", "data"], kind=KIND, reference=NAME, create={"type": "boolean"},
              data={"type": "object"}, category={**NAME, "description": "category to place or move it in"}), lambda h, c, a: resource_write(h, a["kind"], a["reference"], a["data"], create=a["create"], category=a.get("category"))),
    Tool("resource_delete", RM, "dangerous",
         "Delete a resource in two calls. Without confirm: returns the plan (the target and, with recursive, everything that uses it, users first) and what blocks it; nothing is deleted. Then call again with confirm equal to the plan's items in the same order to delete exactly those. A changed home makes the confirmation stale and nothing is deleted.",
         object_schema(["kind", "reference"], kind=KIND, reference=NAME, recursive={"type": "boolean"},
              confirm={"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}],
                       "description": "the plan's items, in the plan's order"}), lambda h, c, a: resource_delete(h, a["kind"], a["reference"], recursive=a.get("recursive", False), confirm=a.get("confirm"))),
    Tool("provider_models", RM, "read",
         "Ask a provider which models it serves (GET {base_url}/models with its stored key). No inference is run.",
         object_schema(["reference"], reference=NAME), lambda h, c, a: provider_models(h, a["reference"])),
    Tool("resource_test", RM, "read",
         "Check a provider's or MCP server's configuration statically: no network call, no process started.",
         object_schema(["kind", "reference"], kind={"type": "string", "enum": ["provider", "mcp"]}, reference=NAME), lambda h, c, a: resource_test(h, a["kind"], a["reference"])),
    Tool("resource_category_list", RM, "read", "List the categories of a kind, default first.",
         object_schema(["kind"], kind=KIND), lambda h, c, a: category_list(h, a["kind"])),
    Tool("resource_category_create", RM, "write", "Create an empty category for a kind.",
         object_schema(["kind", "category"], kind=KIND, category=NAME), lambda h, c, a: category_create(h, a["kind"], a["category"])),
    Tool("resource_category_delete", RM, "dangerous", "Delete an empty category other than default.",
         object_schema(["kind", "category"], kind=KIND, category=NAME), lambda h, c, a: category_delete(h, a["kind"], a["category"])),
    Tool("principal_list", RM, "read", "List the identities (principals) agents run as, with their kind.",
         object_schema([]), lambda h, c, a: principal_list(h)),
    Tool("principal_create", RM, "write",
         "Create an identity. Inside a run only kind agent is allowed; user and manager identities are for the Manager.",
         object_schema(["name", "kind"], name=NAME, kind={"type": "string", "enum": ["user", "agent", "manager"]}), _principal_create),
    Tool("binding_list", RM, "read", "List the bindings: which principal runs which agent, enabled or not, and how.",
         object_schema([]), lambda h, c, a: binding_list(h)),
    Tool("agent_bind", RM, "write",
         "Bind a principal (kind agent) to an agent. A new binding is enabled, runs in the home's folder, with unlimited rounds and policy mentioned. Updating a disabled binding keeps it disabled.",
         object_schema(["principal", "agent"], principal=NAME, agent=NAME, directory={"type": "string", "minLength": 1},
              max_rounds={"type": "integer", "minimum": 1, "description": "model calls a run may make; omit for no limit"}, policy={"type": "string", "enum": ["mentioned", "all"]},
              max_queue={"type": "integer", "minimum": 1, "maximum": 1000000, "description": "waiting work counted as normal (default 100)"}),
         lambda h, c, a: agent_bind(h, a["principal"], a["agent"], a.get("directory"), a.get("max_rounds"), a.get("policy"), a.get("max_queue"),
                                    by="manager (tool)" if c.is_manager else f"{c.identity} (run)")),
    Tool("agent_set_enabled", RM, "write", "Enable or disable a principal's binding. Disabling stops its later managed runs.",
         object_schema(["principal", "enabled"], principal=NAME, enabled={"type": "boolean"}), lambda h, c, a: set_binding_enabled(h, a["principal"], a["enabled"], None if c.is_manager else c.identity,
                                                                                                   by="manager (tool)" if c.is_manager else None)),
    Tool("agent_unbind", RM, "dangerous",
         "Remove a principal's binding (for decommissioning, or before deleting its agent); to pause an agent, disable it instead.",
         object_schema(["principal"], principal=NAME), lambda h, c, a: agent_unbind(h, a["principal"])),
)
