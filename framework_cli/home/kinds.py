"""The seven resource kinds: where they live on disk and how they refer to each other.

This module is imported on every path, so it holds plain data only; the pydantic models
that validate a definition live in `models.py` and load only when something is validated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import FwError
from ..suggest import did_you_mean, hint_with

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
DEFAULT_CATEGORY = "default"
DEFAULT_PROMPT = "default"

BUILTIN_GROUPS = ("resource_management", "task_collaboration", "local_execution")
# Groups that can be mounted but have no tools in this version; a test keeps this in step
# with the tool registry, which the domain does not import.
GROUPS_WITHOUT_TOOLS: tuple[str, ...] = ()


@dataclass(frozen=True)
class KindSpec:
    name: str
    folder: str
    layout: str  # "yaml" (<name>.yaml), "markdown" (<name>.md) or "skill" (<name>/SKILL.md)
    # (field, kind, is_list): the references a definition of this kind makes.
    refs: tuple[tuple[str, str, bool], ...] = ()
    # Fields whose values are secrets, kept under secrets/ only.
    secret_fields: tuple[str, ...] = ()
    # Fields shown by `resource list`, after name and category.
    summary: tuple[str, ...] = ("description",)

    @property
    def has_body(self) -> bool:
        return self.layout in ("markdown", "skill")

    def relpath(self, category: str, name: str) -> str:
        if self.layout == "yaml":
            return f"{self.folder}/{category}/{name}.yaml"
        if self.layout == "markdown":
            return f"{self.folder}/{category}/{name}.md"
        return f"{self.folder}/{category}/{name}/SKILL.md"


KINDS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        KindSpec(
            "provider",
            "providers",
            "yaml",
            secret_fields=("api_key",),
            summary=("base_url", "api_key_env", "api_key_set", "description"),
        ),
        KindSpec(
            "model",
            "models",
            "yaml",
            refs=(("provider", "provider", False),),
            summary=("provider", "model_id", "capabilities", "description"),
        ),
        KindSpec("prompt", "prompts", "markdown"),
        KindSpec("skill", "skills", "skill"),
        KindSpec(
            "mcp",
            "mcps",
            "yaml",
            secret_fields=("env", "headers"),
            summary=("transport", "command", "url", "description"),
        ),
        KindSpec(
            "harness",
            "harnesses",
            "yaml",
            summary=("type", "command", "capabilities", "description"),
        ),
        KindSpec(
            "agent",
            "agents",
            "yaml",
            refs=(
                ("model", "model", False),
                ("prompt", "prompt", False),
                ("skills", "skill", True),
                ("mcps", "mcp", True),
                ("harness", "harness", False),
            ),
            summary=("model", "prompt", "builtin_tools", "description"),
        ),
    )
}

KIND_NAMES = tuple(KINDS)


def kind_spec(kind: str) -> KindSpec:
    try:
        return KINDS[kind]
    except (KeyError, TypeError):

        suggestion = did_you_mean(kind, KIND_NAMES)
        raise FwError(
            "invalid",
            f"unknown kind {kind!r}",
            hint_with(suggestion, f"the kinds are {', '.join(KIND_NAMES)}"),
            **suggestion,
        ) from None


def check_name(name: object, what: str = "name") -> str:
    """Refuse anything that is not a plain name before it comes near a path."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise FwError(
            "invalid",
            f"invalid {what} {name!r}",
            "names are 1-63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
        )
    return name


def is_reserved(principal: str) -> bool:
    """`manager` and `runtime*` name the Manager and explicit runs (`runtime:AGENT`) in the
    audit; an identity of that name would make the audit's caller ambiguous."""
    return principal == "manager" or principal.startswith("runtime")
