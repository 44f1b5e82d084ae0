"""Strict pydantic models, one a kind. The JSON Schemas under `schemas/` are generated from them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..errors import FwError
from .kinds import BUILTIN_GROUPS

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$", max_length=63)]
# No user:password@ in the authority: credentials belong in secrets (a key, or mcp headers).
Url = Annotated[str, Field(pattern=r"^https?://[^\s/?#@]+(?:[/?#]\S*)?$")]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# A model-side tool name: letters, digits, '_' and '-' (as the chat completions API allows).
ToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,128}$")]
# An event type (message.received) or a shell-style pattern of them (message.*).
EventPattern = Annotated[str, Field(pattern=r"^[a-z0-9_.*?\[\]!-]{1,64}$")]
# A semantic API of the platform catalogue (send_message); checked against it on write.
ApiName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
BuiltinGroup = Literal["resource_management", "task_collaboration", "local_execution"]
assert set(BuiltinGroup.__args__) == set(BUILTIN_GROUPS)  # type: ignore[attr-defined]


class Strict(BaseModel):
    # strict: "yes", 1 or "true" are not booleans, "5" is not a number; what is stored is
    # what the published schema accepts, and what fw reads is what the file says.
    model_config = ConfigDict(extra="forbid", strict=True)


def _no_duplicates(values: list[str], field: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{field} lists {value!r} twice")
        seen.add(value)


class Provider(Strict):
    """An OpenAI-compatible endpoint and the key that opens it."""

    base_url: Url = Field(description="http(s) URL of the API, e.g. https://api.openai.com/v1")
    api_key_env: EnvName | None = Field(None, description="environment variable holding the key")
    api_key: str | None = Field(
        None,
        description="the key itself; write-only, stored under secrets/ and never shown",
        json_schema_extra={"writeOnly": True},
    )
    description: str | None = None

    @model_validator(mode="after")
    def _one_key_source(self) -> Provider:
        if self.api_key is not None and self.api_key_env is not None:
            raise ValueError("api_key and api_key_env exclude each other: give one")
        return self


class ModelCapabilities(Strict):
    tool_call: bool = False


class Model(Strict):
    """A model served by a provider."""

    provider: Name
    model_id: str = Field(min_length=1)
    capabilities: ModelCapabilities = Field(default_factory=ModelCapabilities)
    description: str | None = None


class Prompt(Strict):
    """Front matter of a prompt; the prompt text is the Markdown body."""

    description: str | None = None


class Skill(Strict):
    """Front matter of SKILL.md (the Agent Skills convention); instructions are the body."""

    name: Name
    description: str = Field(min_length=1)


class Mcp(Strict):
    """An MCP server, started over stdio or reached over http."""

    transport: Literal["stdio", "http"]
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[EnvName, str] = Field(default_factory=dict, description="values are secrets")
    url: Url | None = None
    headers: dict[str, str] = Field(default_factory=dict, description="values are secrets")
    description: str | None = None

    @model_validator(mode="after")
    def _transport_fields(self) -> Mcp:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("a stdio mcp needs a command")
            if self.url is not None or self.headers:
                raise ValueError("url and headers are for transport http only")
        else:
            if not self.url:
                raise ValueError("an http mcp needs a url")
            if self.command is not None or self.args or self.env:
                raise ValueError("command, args and env are for transport stdio only")
        return self


class HarnessCapabilities(Strict):
    tool_calling: bool = False


class HarnessPermissions(Strict):
    tools: list[Literal["detail", "call"]] = Field(default_factory=list)


class Harness(Strict):
    """The runner that executes an agent."""

    type: str = Field(min_length=1)
    command: str | None = None
    capabilities: HarnessCapabilities = Field(default_factory=HarnessCapabilities)
    permissions: HarnessPermissions = Field(default_factory=HarnessPermissions)
    description: str | None = None


class Execution(Strict):
    enabled: bool = False


class Agent(Strict):
    """An agent: a model, a prompt, what it may use, and the built-in tool groups mounted on it."""

    description: str | None = None
    model: Name | None = None
    prompt: Name | None = None
    skills: list[Name] = Field(default_factory=list)
    mcps: list[Name] = Field(default_factory=list)
    harness: Name | None = None
    builtin_tools: list[BuiltinGroup] = Field(default_factory=list)
    execution: Execution = Field(default_factory=Execution)
    allowed_tools: list[ToolName] | None = Field(
        None,
        description="MCP and skill tools a run may be offered (mcp__SERVER__TOOL, skill__NAME): "
        "absent, every one; a list, only those; [], none. Built-in groups are governed by builtin_tools.",
    )
    events: list[EventPattern] | None = Field(
        None,
        description="The chat-platform event types it handles, or patterns of them (message.*); "
        "absent or empty, none. The event tools that fit the event are offered with it.",
    )
    allowed_platform_tools: list[ToolName] | None = Field(
        None,
        description="The platform_ tools of the catalogue (`fw tool catalogue`) its event runs may be offered.",
    )

    @field_validator("builtin_tools", "skills", "mcps", "allowed_tools", "events", "allowed_platform_tools")
    @classmethod
    def _no_duplicate_entries(cls, values: list[str] | None, info: ValidationInfo) -> list[str] | None:
        _no_duplicates(values or [], info.field_name or "")
        return values


class Principal(Strict):
    """An identity that agents run as."""

    kind: Literal["user", "agent", "manager"]
    description: str | None = None


class Binding(Strict):
    """The run settings that make a principal run an agent."""

    agent: Name
    enabled: bool = True
    directory: str | None = None
    max_rounds: int | None = Field(None, ge=1)
    policy: Literal["mentioned", "all"] = "mentioned"


class Bot(Strict):
    """A chat-platform bot (bots/<name>.yaml): the adapter that reaches it and the principal
    whose binding handles its events."""

    adapter: Literal["local", "onebot"]
    principal: Name
    url: Url | None = Field(None, description="onebot: the base URL of its HTTP API")
    unsupported_apis: list[ApiName] = Field(default_factory=list, description="APIs to withhold from its runs")
    description: str | None = None

    @field_validator("unsupported_apis")
    @classmethod
    def _no_duplicate_apis(cls, values: list[str]) -> list[str]:
        _no_duplicates(values, "unsupported_apis")
        return values

    @model_validator(mode="after")
    def _url_for_onebot(self) -> Bot:
        if self.adapter == "onebot" and not self.url:
            raise ValueError("a onebot bot needs a url")
        if self.adapter == "local" and self.url is not None:
            raise ValueError("url is for the onebot adapter only")
        return self


MODELS: dict[str, type[Strict]] = {
    "provider": Provider,
    "model": Model,
    "prompt": Prompt,
    "skill": Skill,
    "mcp": Mcp,
    "harness": Harness,
    "agent": Agent,
    "principal": Principal,
    "binding": Binding,
    "bot": Bot,
}


def describe_error(exc: ValidationError) -> tuple[str, str]:
    """The first problem as (field, message). Input values are never quoted: they may be keys."""
    err = exc.errors(include_url=False, include_input=False)[0]
    field = ".".join(str(part) for part in err["loc"])
    if err["type"] == "extra_forbidden":
        return field, f"unknown field {field!r}"
    msg = err["msg"].removeprefix("Value error, ")
    return field, (f"{field}: {msg}" if field else msg)


def validate(kind: str, data: Any, where: str = "") -> Strict:
    """Validate a definition of `kind`; raise `invalid` naming the field at fault."""
    if not isinstance(data, dict):
        raise FwError("invalid", f"{where or kind} must be a mapping, not {type(data).__name__}")
    try:
        return MODELS[kind].model_validate(data)
    except ValidationError as exc:
        field, message = describe_error(exc)
        raise FwError(
            "invalid",
            f"{where + ': ' if where else ''}{message}",
            f"see schemas/{kind}.json for the fields a {kind} takes",
            field=field,
        ) from None


def dump(obj: Strict) -> dict[str, Any]:
    """A validated definition as plain data, defaults filled, unset optionals left out."""
    return obj.model_dump(mode="json", exclude_none=True)


def json_schema(kind: str) -> dict[str, Any]:
    schema = MODELS[kind].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"{kind}.json"
    return schema
