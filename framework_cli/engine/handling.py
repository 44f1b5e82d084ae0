"""Handling an event: decide whether the bot's principal takes it, then start a managed run
with the event frozen in it and, unless an external runner is to drive it, run the agent loop.

The agent's answer text is never sent by itself: a reply reaches the platform only through
the `event_reply` tool, checked and audited like any other call.
"""

from __future__ import annotations

from typing import Any

from ..domain.bots import load_bot
from ..domain.catalogue import selects
from ..domain.identities import get_binding
from ..domain.resources import resource_read
from ..errors import FwError
from ..home import secrets
from ..home.store import Home
from ..platform.bots import adapter_of, bot_self_id, local_platform
from ..platform.events import describe_event, mentions_bot, validate_event
from ..tools.service import open_run
from .agent_run import arun_agent
from .aio import run_front
from .external import GatewayStarter

NOT_SELECTED = "event_not_selected"
BINDING_DISABLED = "binding_disabled"
NOT_MENTIONED = "not_mentioned"


def handle_event(
    home: Home,
    bot_name: str,
    raw_event: Any,
    *,
    run: bool = True,
    principal: str | None = None,
    lease: int | None = None,
    on_event: Any = None,
    gateway: GatewayStarter | None = None,
) -> dict[str, Any]:
    """`{"handled": false, "reason"}`, or `{"handled": true, "run": {...}}` and, when the
    runner ran, its `result`. `principal`, when given, must be the bot's. `gateway` serves an
    external runner's run (see `agent_run`)."""

    bot, event = _checked_event(home, bot_name, raw_event, principal)
    adapter_of(home, bot_name, bot).ingest(event)  # the platform saw it, whoever handles it
    return handle_ingested(home, bot_name, bot, event, run=run, lease=lease, on_event=on_event, gateway=gateway)


def _checked_event(home: Home, bot_name: str, raw_event: Any, principal: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The bot and the event, both checked; `principal`, when given, must be the bot's."""
    bot = load_bot(home, bot_name)
    event = validate_event(raw_event)
    secrets.refuse(home, {"event": event})  # the event is kept in the platform and the run record
    if principal is not None and principal != bot["principal"]:
        raise FwError("invalid", f"bot {bot_name!r} hands its events to principal {bot['principal']!r}, not {principal!r}",
                      f"start it as --principal {bot['principal']}", field="principal")
    return bot, event


def start_event_run(home: Home, bot_name: str, raw_event: Any, *, principal: str, lease: int | None = None) -> dict[str, Any]:
    """`fw run start --principal P --bot B --event E`: the run `fw event handle --no-run`
    starts, as its record. An event the principal does not take is `denied` with its
    `reason`, and then nothing is recorded, not even on the bot's platform."""

    bot, event = _checked_event(home, bot_name, raw_event, principal)
    reason = refusal(home, bot_name, principal, event)
    if reason is not None:
        raise FwError("denied", *_REFUSALS[reason](principal), reason=reason)
    adapter_of(home, bot_name, bot).ingest(event)
    return handle_ingested(home, bot_name, bot, event, run=False, lease=lease)["run"]


# Why a principal does not take an event, in words, with what to do next.
_REFUSALS = {
    NOT_SELECTED: lambda p: (f"the agent bound to {p!r} does not select this event's type, so no run was started",
                             "add the type (or a pattern such as message.*) to the agent's events"),
    BINDING_DISABLED: lambda p: (f"the binding of {p!r} is disabled, so no run was started", f"enable it: `fw binding enable {p}`"),
    NOT_MENTIONED: lambda p: (f"the group message does not mention the bot, and the binding of {p!r} takes only messages that do "
                              "(policy mentioned), so no run was started",
                              f"mention the bot (@ it, or reply to its message), or take every message: `fw binding set {p} --policy all`"),
}


def local_say(home: Home, bot_name: str, user: str, text: str, group: str | None = None, *, run: bool = True,
              on_event: Any = None, gateway: GatewayStarter | None = None) -> dict[str, Any]:
    """`fw bot local say`: the user's message lands on the local platform, and is handled as
    the event it makes: `{"event", "handled", ...}`, and `"offline": true` when the bot was
    set offline (its run's platform tools are then refused with `adapter_offline`)."""

    secrets.refuse(home, {"text": text, "user": user, "group": group})
    platform = local_platform(home, bot_name)
    event = platform.say(user, text, group)
    offline = {} if platform.online() else {"offline": True}  # its platform tools will fail (adapter_offline)
    return {"event": event, **offline, **handle_ingested(home, bot_name, load_bot(home, bot_name), event, run=run,
                                                        on_event=on_event, gateway=gateway)}


def handle_ingested(home: Home, bot_name: str, bot: dict[str, Any], event: dict[str, Any], *, run: bool = True,
                    lease: int | None = None, on_event: Any = None, gateway: GatewayStarter | None = None) -> dict[str, Any]:
    """Handle an event the bot's platform already holds (`fw bot local say` stored it)."""
    reason = refusal(home, bot_name, bot["principal"], event, bot)
    if reason is not None:
        return {"handled": False, "reason": reason}
    context = {"bot": bot_name, "event": event}
    if not run:

        record, sources = open_run(home, principal=bot["principal"], lease=lease, context=context)
        sources.close()
        return {"handled": True, "run": record}
    return _run_loop(home, bot["principal"], event, context, on_event, gateway)


def taken(home: Home, bot_name: str, bot: dict[str, Any], event: dict[str, Any]) -> str | None:
    """Whether the bot's principal takes an event its server received: None, or the reason it
    does not (as `refusal`). An event that holds a stored secret value is `invalid`: it is
    kept nowhere."""
    secrets.refuse(home, {"event": event})
    adapter_of(home, bot_name, bot).ingest(event)
    return refusal(home, bot_name, bot["principal"], event, bot)


def refusal(home: Home, bot_name: str, principal: str, event: dict[str, Any], bot: dict[str, Any] | None = None) -> str | None:
    """Why the principal's binding does not take this event, or None: the agent does not
    select its type; it is a group message that does not mention the bot and the binding's
    policy is `mentioned`; the binding is disabled."""

    binding = get_binding(home, principal)
    if binding is None:
        raise FwError("not_found", f"principal {principal!r}, who handles bot {bot_name!r}'s events, has no binding",
                      f"bind it: `fw binding set {principal} --agent AGENT`")
    definition = resource_read(home, "agent", binding["agent"])["data"]
    if not selects(definition.get("events"), event["type"]):
        return NOT_SELECTED
    if event["type"] == "message.received" and binding.get("policy", "mentioned") == "mentioned":
        self_id = bot_self_id(home, bot_name, bot if bot is not None else load_bot(home, bot_name))
        if not mentions_bot(event, bot_name, self_id):
            return NOT_MENTIONED
    if not binding["enabled"]:
        return BINDING_DISABLED
    return None


def _run_loop(home: Home, principal: str, event: dict[str, Any], context: dict[str, Any], on_event: Any,
              gateway: GatewayStarter | None = None) -> dict[str, Any]:
    return run_front(lambda threads: arun_event(home, principal, event, context, on_event, gateway, threads))


async def arun_event(home: Home, principal: str, event: dict[str, Any], context: dict[str, Any], on_event: Any = None,
                     gateway: GatewayStarter | None = None, run_sync: Any = None, on_started: Any = None) -> dict[str, Any]:
    """Run the principal's agent on an event it takes (`context`: the bot and the event):
    `{"handled": true, "run", "result"}`. Waiting for its model holds no thread; `on_started`
    as `arun_agent` has it."""
    started: dict[str, Any] = {}

    def relay(progress: dict[str, Any]) -> None:
        if progress["type"] == "started":
            started["run"] = progress["run"]
        if on_event is not None:
            on_event(progress)

    result = await arun_agent(home, describe_event(event), principal=principal, context=context, on_event=relay, gateway=gateway,
                              run_sync=run_sync, on_started=on_started)
    outcome = {key: result[key] for key in ("status", "answer", "rounds", "tool_calls")}
    return {"handled": True, "run": started["run"], "result": outcome}
