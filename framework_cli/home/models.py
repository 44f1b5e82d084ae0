"""Strict pydantic models, one a kind. The JSON Schemas under `schemas/` are generated from them."""

from __future__ import annotations

import os
import shlex
from typing import Annotated, Any, Literal

# fw uses no pydantic plugin: skip pydantic's scan of every installed package's entry points
# for one (16 to 27 ms a process), unless the user asked for some plugins by name.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from pydantic import (  # noqa: E402
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..errors import FwError  # noqa: E402
from ..suggest import article, closest  # noqa: E402
from .kinds import BUILTIN_GROUPS  # noqa: E402

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
# No user:password@ in the authority: credentials belong in secrets (a key, or mcp headers).
URL_PATTERN = r"^https?://[^\s/?#@]+(?:[/?#]\S*)?$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]
Url = Annotated[str, Field(pattern=URL_PATTERN)]
EnvName = Annotated[str, Field(pattern=ENV_NAME_PATTERN)]
# A model-side tool name: letters, digits, '_' and '-' (as the chat completions API allows).
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
ToolName = Annotated[str, Field(pattern=TOOL_NAME_PATTERN)]
# An event type (message.received) or a shell-style pattern of them (message.*).
EVENT_PATTERN_PATTERN = r"^[a-z0-9_.*?\[\]!-]{1,64}$"
EventPattern = Annotated[str, Field(pattern=EVENT_PATTERN_PATTERN)]
# A semantic API of the platform catalogue (send_message); checked against it on write.
API_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
ApiName = Annotated[str, Field(pattern=API_NAME_PATTERN)]
BuiltinGroup = Literal["resource_management", "task_collaboration", "local_execution"]
assert set(BuiltinGroup.__args__) == set(BUILTIN_GROUPS)  # type: ignore[attr-defined]


class Strict(BaseModel):
    # strict: "yes", 1 or "true" are not booleans, "5" is not a number; what is stored is
    # what the published schema accepts, and what fw reads is what the file says.
    # defer_build: a model's validator is built when it is first used, not when this module
    # is imported, so a command pays only for the kinds it validates.
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


def _no_duplicates(values: list[str], field: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{field} lists {value!r} twice")
        seen.add(value)


class Provider(Strict):
    """A model API's endpoint, the dialect it speaks and the key that opens it."""

    base_url: Url = Field(description="http(s) URL of the API, e.g. https://api.openai.com/v1")
    api: Literal["openai", "anthropic"] | None = Field(
        None,
        description="the API it speaks: openai (chat completions; the default when absent) or anthropic "
        "(the Messages API, e.g. base_url https://api.anthropic.com/v1)",
    )
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
    max_tokens: int | None = Field(
        None, ge=1, description="the most tokens an answer may hold; absent: 4096 for an anthropic provider, "
        "and none sent to an openai one",
    )
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
    timeout_seconds: float | None = Field(
        None, gt=0, le=86400, description="a tool call's idle limit: given up (and cancelled) after this long without "
        "an answer or a progress notification; absent: 60",
    )
    startup_seconds: float | None = Field(
        None, gt=0, le=3600, description="how long the server gets to start and list its tools; absent: 10",
    )
    max_seconds: float | None = Field(
        None, gt=0, le=864000,
        description="a tool call's hard limit, progress or not; absent: 10 times timeout_seconds",
    )
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
        if self.max_seconds is not None and self.max_seconds < (self.timeout_seconds or 60):
            raise ValueError("max_seconds must be at least timeout_seconds (60 when absent)")
        return self


class HarnessCapabilities(Strict):
    tool_calling: bool = False


class HarnessPermissions(Strict):
    tools: list[Literal["detail", "call"]] = Field(default_factory=list)


class Harness(Strict):
    """The runner that executes an agent. `type: external` runs agents with its `command` (a
    string split as a shell would, no shell; or a list), which reaches each run through the
    gateway; any other type runs them in fw's own model loop."""

    type: str = Field(min_length=1)
    command: str | list[Annotated[str, Field(min_length=1)]] | None = None
    capabilities: HarnessCapabilities = Field(default_factory=HarnessCapabilities)
    permissions: HarnessPermissions = Field(default_factory=HarnessPermissions)
    description: str | None = None

    @model_validator(mode="after")
    def _external_has_a_command(self) -> Harness:
        if self.type != "external":
            return self
        try:
            argv = shlex.split(self.command) if isinstance(self.command, str) else list(self.command or [])
        except ValueError:
            raise ValueError("command has an unclosed quote") from None
        if not argv:
            raise ValueError("a harness of type external needs a command: the program that runs its agents")
        return self


class Execution(Strict):
    """`framework_exec` of the local_execution group: on or off, in the sandbox or not, with the network or not."""

    enabled: bool = False
    sandbox: Literal["bubblewrap", "none"] = Field(
        "bubblewrap",
        description="bubblewrap: every command runs confined to the run's workspace (see docs/sandbox.md); "
        "none: on the host as fw's user, unconfined",
    )
    network: bool = Field(False, description="whether a command in the sandbox may reach the network")


class Sandbox(Strict):
    """The sandbox tools (sandbox__exec, sandbox__read_file, ...): files and commands confined to the run's workspace."""

    backend: Literal["bubblewrap"] = "bubblewrap"
    network: bool = Field(False, description="whether sandbox__exec may reach the network")


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
    sandbox: Sandbox | None = Field(
        None, description="With this block the agent's runs get the sandbox tools (sandbox__exec, sandbox__read_file, ...)."
    )
    allowed_tools: list[ToolName] | None = Field(
        None,
        description="Sandbox, MCP, plugin and skill tools a run may be offered (sandbox__exec, mcp__SERVER__TOOL, "
        "plugin__PLUGIN__TOOL, skill__NAME): absent, every one; a list, only those; [], none. "
        "Built-in groups are governed by builtin_tools.",
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
    max_queue: int = Field(100, ge=1, le=1_000_000)  # waiting work counted as normal (`fw status` flags more)
    enabled_by: str | None = None  # written by fw: who last turned `enabled` on or off ("alice (fw)", "ops (run)")
    enabled_at: str | None = None  # written by fw: when (UTC, ISO 8601)


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
        # A onebot bot without a url acts over the reverse WebSocket of `fw bot serve`.
        if self.adapter == "local" and self.url is not None:
            raise ValueError("url is for the onebot adapter only")
        return self


# A plugin setting's name, as `--setting NAME=VALUE` gives it.
SETTING_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
SettingName = Annotated[str, Field(pattern=SETTING_NAME_PATTERN)]
MAX_PLUGIN_TIMEOUT = 3600


class Plugin(Strict):
    """A plugin enabled in this home (plugins/<name>.yaml): its settings (those it declares
    secret are kept under secrets/, never here), whether its process runs in the sandbox, and
    how long one call may take."""

    settings: dict[SettingName, str | bool | int | float] = Field(
        default_factory=dict, description="the plugin's settings, as it declares them; never a secret value")
    sandbox: bool = Field(False, description="run the plugin's process in the sandbox (no network, no file of this machine but "
                          "the system's and Python's, read-only)")
    timeout_seconds: float = Field(60, gt=0, le=MAX_PLUGIN_TIMEOUT, description="a call that takes longer is cut off")


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
    "plugin": Plugin,
}


# What each pattern of the models accepts, in words: a regular expression is no message.
PATTERN_WORDS = {
    URL_PATTERN: "an http or https URL without user:password@ (e.g. https://api.openai.com/v1)",
    NAME_PATTERN: "a name: 1-63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
    ENV_NAME_PATTERN: "an environment variable's name: letters, digits and '_', not starting with a digit",
    TOOL_NAME_PATTERN: "a tool's name: letters, digits, '_' and '-' (e.g. mcp__files__read)",
    EVENT_PATTERN_PATTERN: "an event type or pattern in lower case (e.g. message.received or message.*)",
    API_NAME_PATTERN: "an API's name in lower case (e.g. send_message)",
    SETTING_NAME_PATTERN: "a setting's name: letters, digits, '_', '.' and '-'",
}
# pydantic's wording for the other kinds of error, in plain words: what the field must be.
TYPE_WORDS = {
    "missing": "is required",
    "bool_type": "must be true or false",
    "int_type": "must be a whole number",
    "float_type": "must be a number",
    "string_type": "must be text",
    "list_type": "must be a list",
    "dict_type": "must be a mapping of fields",
    "model_type": "must be a mapping of fields",
    "string_too_short": "must not be empty",
}


def field_path(loc: tuple[Any, ...]) -> str:
    """`capabilities.tool_call`, `builtin_tools[0]`, `env.1A (a name)`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " (a name)"
        else:
            out += f".{part}" if out else str(part)
    return out


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _plain_words(err: dict[str, Any]) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        return f"must be {PATTERN_WORDS.get(ctx.get('pattern'), 'in the documented form')}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected', 'one of the documented values')}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}"
    if kind == "greater_than":
        return f"must be more than {_number(ctx.get('gt'))}"
    if kind == "less_than_equal":
        return f"must be at most {_number(ctx.get('le'))}"
    if kind in TYPE_WORDS:
        return TYPE_WORDS[kind]
    return str(err["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")


def describe_error(exc: ValidationError) -> tuple[str, str]:
    """The first problem as (field, message). Input values are never quoted: they may be keys."""
    err = exc.errors(include_url=False, include_input=False)[0]
    field = field_path(err["loc"])
    if err["type"] == "extra_forbidden":
        return field, f"unknown field {field!r}"
    if err["type"] == "value_error":
        return field, str(err["msg"]).removeprefix("Value error, ")
    return field, f"{field or 'the definition'} {_plain_words(err)}"


WRITTEN_BY_FW = {"binding": ("enabled_by", "enabled_at")}  # fields fw keeps itself: no hint offers them


def accepted_fields(kind: str) -> str:
    """The fields a kind takes, in words, for a hint."""

    given = [f for f in MODELS[kind].model_fields if f not in WRITTEN_BY_FW.get(kind, ())]
    fields = ", ".join([*given, *(["body (its text)"] if kind in ("prompt", "skill") else [])])
    more = f"; see each with `fw resource schema {kind}`" if kind not in ("principal", "binding") else ""
    return f"{article(kind)} takes {fields}{more}"


def validate(kind: str, data: Any, where: str = "") -> Strict:
    """Validate a definition of `kind`; raise `invalid` naming the field at fault."""
    if not isinstance(data, dict):
        raise FwError("invalid", f"{where or kind} must be a mapping of fields, not {type(data).__name__}", accepted_fields(kind))
    try:
        return MODELS[kind].model_validate(data)
    except ValidationError as exc:
        field, message = describe_error(exc)
        near = _nearest_field(kind, exc.errors(include_url=False, include_input=False)[0]) or _nearest_value(exc)
        accepted = accepted_fields(kind)
        raise FwError(
            "invalid",
            f"{where + ': ' if where else ''}{message}",
            f"did you mean {near!r}? {accepted[0].upper()}{accepted[1:]}" if near else accepted,
            field=field,
        ) from None


def _nearest_value(exc: ValidationError) -> str | None:
    """For a value not among a field's choices, the choice a typo away (`resource_management`
    for `resource_mgmt`); only the choice is ever shown, never the value given."""
    err = exc.errors(include_url=False)[0]
    if err["type"] != "literal_error" or not isinstance(err.get("input"), str):
        return None
    import re

    return closest(err["input"], re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", ""))))


def _nearest_field(kind: str, err: Any) -> str | None:
    """For an unknown field, the known one a typo away (`capabilities.tool_call` for
    `capabilities.tool_cal`), as its whole path; None when there is none."""
    if err["type"] != "extra_forbidden" or not err["loc"] or not isinstance(err["loc"][-1], str):
        return None
    model: Any = MODELS[kind]
    for part in err["loc"][:-1]:  # down the nested models to the one that refused the field
        info = model.model_fields.get(part) if isinstance(part, str) and hasattr(model, "model_fields") else None
        inner = [a for a in getattr(info.annotation, "__args__", (info.annotation,)) if hasattr(a, "model_fields")] if info else []
        if not inner:
            return None
        model = inner[0]
    found = closest(err["loc"][-1], [f for f in model.model_fields if f not in WRITTEN_BY_FW.get(kind, ())])
    return field_path((*err["loc"][:-1], found)) if found else None


def dump(obj: Strict) -> dict[str, Any]:
    """A validated definition as plain data, defaults filled, unset optionals left out."""
    return obj.model_dump(mode="json", exclude_none=True)


def json_schema(kind: str) -> dict[str, Any]:
    schema = MODELS[kind].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"{kind}.json"
    return schema


SHORT_PATTERN_WORDS = {
    URL_PATTERN: "an http or https URL without user:password@",
    NAME_PATTERN: "a name (a-z, 0-9, '_', '-')",
    ENV_NAME_PATTERN: "an environment variable's name",
    TOOL_NAME_PATTERN: "a tool's name",
    EVENT_PATTERN_PATTERN: "an event type or pattern",
    API_NAME_PATTERN: "an API's name",
    SETTING_NAME_PATTERN: "a setting's name",
}


def _accepts(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """What a JSON Schema property accepts, in words."""
    if "$ref" in prop:
        sub = defs[prop["$ref"].rsplit("/", 1)[1]]
        inner = "; ".join(f"{k}: {_accepts(v, defs)}" for k, v in sub["properties"].items())
        return f"a mapping ({inner})"
    options = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
    if len(options) != 1:
        return " or ".join(_accepts(p, defs) for p in options)
    prop = options[0]
    if "$ref" in prop:  # an optional block (`sandbox`)
        return _accepts(prop, defs)
    if "enum" in prop:
        return "one of " + ", ".join(map(str, prop["enum"]))
    if "const" in prop:
        return str(prop["const"])
    if "pattern" in prop:
        return SHORT_PATTERN_WORDS.get(prop["pattern"], "text")
    kind = prop.get("type")
    if kind == "array":
        return f"a list, each {_accepts(prop.get('items', {}), defs)}"
    if kind == "object":
        return f"a mapping of names to {_accepts(prop.get('additionalProperties') or {'type': 'string'}, defs)}"
    words = {"boolean": "true or false", "integer": "a whole number", "number": "a number", "string": "text"}
    return words.get(kind or "", "any value")


def field_table(kind: str) -> list[dict[str, Any]]:
    """Each field a kind takes: whether it is required, what it accepts, what it is for."""
    schema = json_schema(kind)
    required, defs = set(schema.get("required", [])), schema.get("$defs", {})
    return [
        {"field": name, "required": name in required, "accepts": _accepts(prop, defs), "description": prop.get("description", "")}
        for name, prop in schema["properties"].items()
    ]
