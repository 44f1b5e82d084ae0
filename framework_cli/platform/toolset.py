"""Event and platform tools as a source of the tool service: what a run started for an event
adds to its projection, and the tool behind each such name when the run calls it.

The tool service authorises (the name must be in the run's tools), validates the parameters
against the schema the run was offered and audits; the handler here then checks what may
have changed since the run started (the bot removed or offline, an API withdrawn) and binds
an event tool to the ids frozen in the run's record, before the adapter is reached at all.
"""

from __future__ import annotations

from typing import Any

from ..domain.bots import find_bot, load_bot
from ..domain.catalogue import CATALOGUE, PlatformTool
from ..domain.tool_types import Tool, long_work
from ..errors import FwError
from ..home import secrets
from ..home.store import Home
from .adapters import supported_apis
from .bots import adapter_of, capabilities
from .events import target_ids
from .projection import project_platform


def add_event_tools(home: Home, projection: Any, gate: str | None, definition: dict[str, Any], context: dict[str, Any]) -> None:
    """Add the event's and the bot's tools to a run's projection (in place)."""

    bot = load_bot(home, context["bot"])
    platform = project_platform(definition, gate, context["event"], capabilities(home, context["bot"], bot))
    projection.tools.extend(platform.tools)
    projection.unavailable.extend(platform.unavailable)
    projection.sources.update(platform.sources)
    projection.record["platform_capabilities"] = platform.capabilities


def granted_tool(run: dict[str, Any], name: str, source: dict[str, Any]) -> Tool:
    """The tool behind an event or platform tool the run's record grants, with the schema
    and description the run was offered."""
    tool = CATALOGUE.get(name)
    if tool is None or tool.is_event_tool != (source.get("source") == "event"):
        rel = f"runs/{run['run_id']}.json"
        raise FwError("corrupt", f"{rel} is corrupt: it grants {name!r}, a tool this version of fw does not know",
                      "this run cannot act; start a new one", path=rel)
    return Tool(name, source["source"], tool.risk, source.get("description") or tool.description,
                source.get("input_schema") or tool.input_schema, lambda home, caller, args: call_platform_tool(home, run, tool, args),
                ahandler=lambda home, caller, args, run_sync: acall_platform_tool(home, run, tool, args, run_sync))


def call_platform_tool(home: Home, run: dict[str, Any], tool: PlatformTool, args: dict[str, Any]) -> dict[str, Any]:
    """The one door of every platform action, whatever the adapter (see `prepared_call`)."""
    adapter, params = prepared_call(home, run, tool, args)
    return adapter.call(tool.api, params)  # type: ignore[no-any-return]


async def acall_platform_tool(home: Home, run: dict[str, Any], tool: PlatformTool, args: dict[str, Any], run_sync: Any) -> dict[str, Any]:
    """`call_platform_tool` from an event loop: the checks on `run_sync` (they read files), the
    action awaited where the adapter can send it without a thread, else on the pool for long
    work (`run_sync.blocking`, where it has one): a platform that stops answering holds it."""
    adapter, params = await run_sync(prepared_call, home, run, tool, args)
    acall = getattr(adapter, "acall", None)
    if acall is None:
        return await long_work(run_sync)(adapter.call, tool.api, params)  # type: ignore[no-any-return]
    return await acall(tool.api, params, run_sync)  # type: ignore[no-any-return]


def prepared_call(home: Home, run: dict[str, Any], tool: PlatformTool, args: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The adapter and the API's parameters of one platform action, once every check passed:
    a stored secret value in any parameter is `invalid` here, so it reaches no platform and no
    platform's log; the bot must still be there, online, and offer the API."""
    secrets.refuse(home, args, "leave the key out: a platform keeps what it is sent")
    name = run.get("bot")
    bot = find_bot(home, name) if isinstance(name, str) else None
    if bot is None:
        raise FwError("unavailable", f"bot {name!r} was removed; its runs can no longer act through it",
                      "add it again with `fw bot add`, then start a new run", reason="adapter_offline")
    adapter = adapter_of(home, name, bot)  # type: ignore[arg-type]
    if not adapter.online():
        hint = getattr(adapter, "offline_hint", None) or f"bring it back with `fw bot set {name} --online`"
        raise FwError("unavailable", f"bot {name!r} is offline", hint, reason="adapter_offline")
    if tool.api not in supported_apis(adapter, bot):
        raise FwError("unavailable", f"bot {name!r} no longer offers {tool.api}, which {tool.name} needs",
                      f"see what it offers with `fw bot show {name}`", reason="adapter_api_unsupported")
    return adapter, api_params(run, tool, args)


def api_params(run: dict[str, Any], tool: PlatformTool, args: dict[str, Any]) -> dict[str, Any]:
    """The adapter API's parameters: a platform tool's arguments as given; an event tool's
    own values with the ids frozen in the run (never an id the caller sent)."""
    if not tool.is_event_tool:
        return dict(args)

    try:
        ids = target_ids(tool.target, run["event"])
    except (KeyError, TypeError):  # the record's event is missing or damaged: trust none of it
        rel = f"runs/{run['run_id']}.json"
        raise FwError("corrupt", f"{rel} is corrupt: its event cannot be read", "this run cannot act; start a new one", path=rel) from None
    if ids is None:
        raise FwError("denied", f"run {run['run_id']} has no event target for {tool.name}",
                      "event tools act only on the ids of the event the run was started for", reason="event_target_unavailable")
    return {**ids, **{key: value for key, value in args.items() if key not in ids}}
