"""`fw agent run`: start a run, let its runner work on the message, end the run.

Two kinds of runner: fw's own model loop (`LocalRunner`), one more front door of the tool
service, where every tool call the model asks for is authorised against the run's snapshot,
validated and audited by `call_tool`, as the run; and an external program a harness of type
`external` names (`ExternalRunner`, engine/external.py), which reaches the run only through the
gateway. The run is ended when its runner stops, however it stops (an answer, the round limit,
a model or program that fails, Ctrl-C).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..dialects import dialect_for
from ..domain.identities import get_binding
from ..domain.probes import provider_key
from ..domain.run_records import run_end, runner_outcome
from ..domain.runs import EXTERNAL, frozen_data, runner_of
from ..domain.tool_types import Caller, CallWatch, long_work
from ..errors import FwError, without_lone_surrogates
from ..home.kinds import KINDS, check_name
from ..home.records import resource_names
from ..home.secrets import redact
from ..home.store import Home
from ..runtime.conversations import conversation_keep, last_conversation
from ..tools.service import WouldWait, acall_tool, list_tools, open_run
from .aio import run_front
from .chat import ChatClient
from .external import DEFAULT_RUNNER_TIMEOUT, ExternalRunner, GatewayStarter, RunJob
from .loop import OnEvent, run_loop

DEFAULT_MODEL_TIMEOUT = 60.0


def agent_run(home: Home, message: str, **options: Any) -> dict[str, Any]:
    """`arun_agent` for a command that drives one run: on an event loop of its own."""
    return run_front(lambda threads: arun_agent(home, message, run_sync=threads, **options))


async def arun_agent(
    home: Home,
    message: str,
    *,
    agent: str | None = None,
    principal: str | None = None,
    max_rounds: int | None = None,
    timeout: float | None = None,
    on_event: OnEvent | None = None,
    context: dict[str, Any] | None = None,
    history: list[dict[str, Any]] | None = None,
    stream: bool = False,
    gateway: GatewayStarter | None = None,
    conversation: str | None = None,
    run_sync: Any = None,
    on_started: Callable[[str], None] | None = None,
    on_ended: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run an agent on one message: `{"run_id", "status", "answer", "rounds", "finish_reason",
    "tool_calls"}`. `context` is recorded with the run (the session it is tied to, the event it
    handles); `history` holds earlier messages of a conversation, put before `message`;
    `stream` asks the model to stream its answers (their text reaches `on_event` as it comes).
    The run's runner does the work: fw's own model loop, or an external program its harness
    names, which reaches the run through its own gateway (`gateway` serves one; the CLI hands
    it in). `timeout` bounds each model answer (default 60 s), or an external runner (600 s).
    `conversation` keeps an explicit run's conversation for later: `new` starts one,
    `continue` carries on the agent's last one (its messages come before `message`; none yet:
    a new one is started). Blocking work (starting the run, the tool calls that block, ending
    it) goes to `run_sync` (the engine's threads); waiting for the model holds no thread.
    `on_started(run_id)` is called on that thread as soon as the run is recorded, in the same
    step as its start (an engine keeps the run's id with its work there; what it raises is
    ignored). `on_ended(result)` is called on the thread that ends a run whose runner returned,
    once it is ended, in the same step (an engine posts a turn's answer there; what it raises
    comes through)."""
    run_sync = run_sync or asyncio.to_thread
    if not isinstance(message, str) or not message.strip():
        raise FwError("invalid", "a message needs some text", "e.g. fw agent run AGENT --message 'what is in this home?'")
    if max_rounds is not None and (isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1):
        raise FwError("invalid", "max_rounds must be a whole number, at least 1", "e.g. --max-rounds 5")
    if timeout is not None:
        check_timeout(timeout)
    if conversation is not None and (principal is not None or conversation not in ("new", "continue")):
        raise FwError("invalid", "only an explicit run (no principal) keeps a conversation to continue",
                      "a managed run's conversation is its session")
    if principal is not None and agent is not None:
        _require_binding_runs(home, principal, agent)
        agent = None  # a managed run runs what its binding names
    context = {**(context or {}), "input": without_lone_surrogates(redact(message))[:INPUT_KEPT]}
    model_timeout = timeout if timeout is not None else DEFAULT_MODEL_TIMEOUT

    model: list[ChatClient] = []  # fw's own loop's, made before the run is recorded

    def ready(start: Any) -> None:
        """Before the run is started: fw's own loop needs a model it can ask (one named, its
        provider's key at hand), or no run is started at all."""
        if runner_of(start.harness, start.definition.get("harness"))["type"] != EXTERNAL:
            frozen = {"agent": start.agent, "definition": start.definition, "snapshot": start.frozen}
            model[:] = [chat_client(home, frozen, model_timeout, stream=stream)]

    def after_start(record: dict[str, Any]) -> Parts | Exception | None:
        """On the thread that started the run, in the same step (one hand-off to the threads and
        back instead of three; the note of its id cannot come after its work is finished): the
        caller's note, then what fw's own model loop needs of the home, or why it cannot be had
        (raised in the run, whose end closes what the start opened)."""
        if on_started is not None:
            try:
                on_started(record["run_id"])
            except Exception:  # e.g. the store busy for a moment: the run goes on, as its work does
                pass
        if (record.get("runner") or {}).get("type") == EXTERNAL:
            return None
        try:
            return _loop_parts(home, record, model[0])
        except Exception as exc:
            return exc

    record, sources, parts = await _opened(home, run_sync, after_start, principal=principal, agent=agent, context=context,
                                           ready=ready)
    token = record.pop("gateway_token", "")  # shown to no one: only an external runner gets it
    run_id = record["run_id"]
    outcome = runner_outcome("interrupted")  # unless it returns or fails: Ctrl-C, a stop, a cancelled task
    then: Callable[[], None] | None = None  # on_ended, once the runner has returned
    try:
        earlier = await run_sync(last_conversation, home, record["agent"]) if conversation == "continue" else None
        if earlier is not None:
            history = [*earlier["messages"], *(history or [])]
        if on_event:
            on_event({"type": "started", "run": record})
        if (record.get("runner") or {}).get("type") == EXTERNAL:
            job = RunJob(home, record, token, sources, message, history, on_event)
            doc = await long_work(run_sync)(ExternalRunner(gateway, timeout if timeout is not None else DEFAULT_RUNNER_TIMEOUT).run, job)
            said = [{"role": "user", "content": message}, {"role": "assistant", "content": doc["answer"]}]
        else:
            turn = Turn(message, history, max_rounds if max_rounds is not None else record.get("max_rounds"), model_timeout, stream)
            assert parts is not None  # read for every run of fw's own loop
            doc = await run_model_loop(home, record, sources, turn, on_event, run_sync, parts)
            said = turn.said
        if conversation is not None:
            await run_sync(conversation_keep, home, record["agent"], earlier["id"] if earlier else None, run_id, said)
        outcome = runner_outcome(doc.get("status") or "completed")
        if on_ended is not None:
            then = lambda: on_ended(doc)  # noqa: E731
        return doc
    except FwError as exc:
        exc.extra.setdefault("run_id", run_id)
        outcome = runner_outcome("interrupted" if exc.code == "interrupted" else "failed", exc)
        raise
    except Exception:
        outcome = runner_outcome("failed", FwError("internal", "an unexpected error in fw"))
        raise
    finally:
        # stopping its MCP servers or plugins may take seconds: on the threads for long work
        closer = long_work(run_sync) if sources.holds_processes else run_sync
        await closer(_close_and_end, home, sources, run_id, outcome, then)


Parts = tuple[ChatClient, str, list[dict[str, Any]]]
AfterStart = Callable[[dict[str, Any]], "Parts | Exception | None"]


async def _opened(home: Home, run_sync: Any, after_start: AfterStart, **start: Any) -> tuple[dict[str, Any], Any, Parts | Exception | None]:
    """The run started, driven by this process, and `after_start(record)` done in the same step:
    on `run_sync` (short work), or on its threads for long work when it starts MCP servers or
    plugins or probes the sandbox (a server that takes a minute to start then holds up only this
    run)."""
    if long_work(run_sync) is run_sync:  # one pool for every kind of work
        return await run_sync(_open, home, after_start, **start)  # type: ignore[no-any-return]
    try:
        return await run_sync(_open, home, after_start, quick=True, **start)  # type: ignore[no-any-return]
    except WouldWait:  # its MCP servers, plugins or sandbox probe may take long
        return await long_work(run_sync)(_open, home, after_start, **start)  # type: ignore[no-any-return]


def _open(home: Home, after_start: AfterStart, **start: Any) -> tuple[dict[str, Any], Any, Parts | Exception | None]:
    record, sources = open_run(home, owned=True, **start)
    return record, sources, after_start(record)


INPUT_KEPT = 65536  # characters of the input text kept in the run record (fw_get_current_event)


@dataclass
class Turn:
    """What a runner is asked to do in a started run."""

    message: str
    history: list[dict[str, Any]] | None
    max_rounds: int | None
    timeout: float
    stream: bool = False
    said: list[dict[str, Any]] = field(default_factory=list)  # by the runner: this turn's messages, the user's first


async def run_model_loop(home: Home, record: dict[str, Any], sources: Any, turn: Turn, on_event: OnEvent | None,
                         run_sync: Any, parts: Parts | Exception) -> dict[str, Any]:
    """The built-in local runner: fw's own model loop over the run's tools, every call through
    the tool service as the run. `parts`: what it needs of the home, read as the run started
    (or why they could not be read)."""
    run_id = record["run_id"]
    if isinstance(parts, Exception):
        raise parts
    client, system, tools = parts
    caller = Caller("run", run_id, record)

    async def call(name: str, args: Any) -> dict[str, Any]:
        return await acall_tool(home, caller, name, args, sources, run_sync=run_sync, watch=_progress_watch(name, on_event))

    result = await run_loop(
        client,
        system=system,
        history=turn.history,
        user=turn.message,
        tools=tools,
        call_tool=call,
        max_rounds=turn.max_rounds,
        on_event=on_event,
    )
    turn.said = result.messages[1 + len(turn.history or []):]  # after the system message and the history
    return result.to_dict(run_id)


def _loop_parts(home: Home, record: dict[str, Any], client: ChatClient) -> Parts:
    """What the loop needs besides its model (read from files): the prompt, the tools."""
    caller = Caller("run", record["run_id"], record)
    return client, system_prompt(home, record), list_tools(home, caller, fresh=True)["tools"]


def _close_and_end(home: Home, sources: Any, run_id: str, outcome: dict[str, Any] | None = None,
                   then: Callable[[], None] | None = None) -> None:
    try:
        sources.close()
    finally:
        _end(home, run_id, outcome)
    if then is not None:
        then()


def _progress_watch(name: str, on_event: OnEvent | None) -> CallWatch | None:
    """A tool call's progress (an MCP server's notifications) as `tool_progress` events."""
    if on_event is None:
        return None
    shown = without_lone_surrogates(redact(name))
    return CallWatch(on_progress=lambda progress: on_event({"type": "tool_progress", "name": shown, **progress}))


def check_timeout(timeout: Any) -> None:
    """How long to wait for a model's answer: a number of seconds above 0, at most an hour."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise FwError("invalid", "the model timeout is a number of seconds above 0, at most 3600", "e.g. --timeout 60")


def _require_binding_runs(home: Home, principal: str, agent: str) -> None:

    check_name(principal, "principal name")
    binding = get_binding(home, principal)
    if binding is not None and binding["agent"] != agent:
        raise FwError("invalid", f"principal {principal!r} runs agent {binding['agent']!r}, not {agent!r}",
                      f"run it as that agent: `fw agent run {binding['agent']} --principal {principal} ...`")


def chat_client(home: Home, run: dict[str, Any], timeout: float, *, stream: bool = False) -> ChatClient:
    """The model the run's agent names, as the run froze it, reached through its provider
    (as frozen) with the provider's key (read now: a key is never in a snapshot)."""
    name = run["definition"].get("model")
    if not name:
        models = sorted(resource_names(home, KINDS["model"]))
        model = models[0] if len(models) == 1 else "MODEL"
        where = "" if len(models) == 1 else ", MODEL one of `fw resource list model`"
        raise FwError("invalid", "the agent has no model, so nothing can answer",
                      f"give it one: `fw agent edit {run['agent']} --model {model}`{where}")
    model = frozen_data(home, run, "model")["data"]
    provider = frozen_data(home, run, "provider")["data"]
    key = provider_key(home, model["provider"], provider)
    return ChatClient(provider["base_url"], key, model["model_id"], timeout=timeout, stream=stream,
                      dialect=dialect_for(provider.get("api")), max_tokens=model.get("max_tokens"), provider=model["provider"])


def system_prompt(home: Home, run: dict[str, Any]) -> str:
    """The agent's prompt text (or the home's default prompt), as the run froze it."""
    return frozen_data(home, run, "prompt").get("body") or ""


def _end(home: Home, run_id: str, outcome: dict[str, Any] | None = None) -> None:

    try:
        run_end(home, run_id, outcome=outcome)
    except FwError:
        pass  # a run whose record was damaged meanwhile cannot act anyway
