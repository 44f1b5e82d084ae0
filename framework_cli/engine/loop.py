"""The model loop: call the model, run the tool calls it asks for, give it the results, and
stop when it asks for none or after `max_rounds` model calls.

A refused or failing tool call never ends the run: it becomes the tool message the model
reads next (the error document), so the model can correct itself. Only the model failing
(`FwError` unavailable from the chat client) ends the loop early. The loop never prints: the
caller follows its progress through `on_event` (each round, each tool call as it starts and as
it ends, the answer). The loop knows no API: it speaks fw's conversation (dialects/base.py),
and each assistant message goes back to the model as its dialect kept it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..dialects.base import Reply, ToolCall, conversation_tool_call
from ..errors import FwError, without_lone_surrogates
from ..home.secrets import redact
from ..runtime.documents import redact_document

# Codes that mean "not allowed" rather than "went wrong": the model should not simply retry.
REFUSAL_CODES = frozenset({"denied", "run_ended", "lease_expired", "session_ended"})
RUN_OVER = frozenset({"run_ended", "lease_expired"})  # a run that can act no more: its loop stops

CallTool = Callable[[str, Any], Awaitable[dict[str, Any]]]
OnEvent = Callable[[dict[str, Any]], None]


class ChatModel(Protocol):
    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       on_event: OnEvent | None = None) -> Reply: ...


@dataclass
class LoopResult:
    status: str  # "completed" or "max_rounds"
    answer: str
    rounds: int  # model calls made
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "outcome", "error"?}
    messages: list[dict[str, Any]] = field(default_factory=list)  # the whole conversation, wire format
    finish_reason: str | None = None  # the model's, for its last answer

    def to_dict(self, run_id: str) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "status": self.status,
            "answer": self.answer,
            "rounds": self.rounds,
            "finish_reason": self.finish_reason,
            "tool_calls": self.tool_calls,
        }


async def run_loop(
    client: ChatModel,
    *,
    system: str,
    user: str,
    tools: list[dict[str, Any]],
    call_tool: CallTool,
    max_rounds: int | None,
    on_event: OnEvent | None = None,
    history: list[dict[str, Any]] | None = None,
) -> LoopResult:
    """Run the conversation to its end; `FwError` unavailable when the model fails.
    `history` (chat messages) comes between the system message and `user`. Waiting for the
    model, or for a tool, holds no thread of the caller's."""
    emit = on_event or (lambda event: None)
    conversation = [{"role": "system", "content": system}, *(history or []), {"role": "user", "content": user}]
    result = LoopResult("max_rounds", "", 0, messages=conversation)
    while max_rounds is None or result.rounds < max_rounds:
        emit({"type": "round", "n": result.rounds + 1})
        reply = await client.complete(result.messages, tools, emit)
        result.rounds += 1
        result.answer = redact(reply.content or reply.refusal or "")  # a refusal's text is the answer
        result.finish_reason = reply.finish_reason
        result.messages.append(assistant_message(reply))
        if not reply.tool_calls:
            result.status = "completed"
            break
        # Every call the model asked for runs, also in the last allowed round: a call such as a
        # reply on a platform is the point of the run even when the model never reads its result.
        for call in reply.tool_calls:
            shown = without_lone_surrogates(redact(call.name))
            emit({"type": "tool_start", "id": call.id, "name": shown})
            started = time.monotonic()
            record, content = await answer_tool_call(call, call_tool)
            result.tool_calls.append(record)
            result.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            emit({"type": "tool_call", "id": call.id, **record, "seconds": round(time.monotonic() - started, 3)})
        over = next((r["error"] for r in result.tool_calls[-len(reply.tool_calls):] if r.get("error") in RUN_OVER), None)
        if over is not None:  # ended meanwhile (a cancelled task, `fw run end`): the model is not asked again
            raise FwError(over, "the run can act no more: it was ended, or its lease ran out, while its agent worked",
                          "start a new run if the work is still wanted")
    emit({"type": "answer", "text": result.answer})
    return result


def assistant_message(reply: Reply) -> dict[str, Any]:
    """The reply as the conversation's next message, with what its dialect keeps of it (a
    thinking model's reasoning, sent back within this loop and never stored)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        # A call whose name or arguments hold a lone surrogate is refused (`invalid`); the
        # model reads it back with U+FFFD in its place, since no request could carry it.
        message["tool_calls"] = [
            conversation_tool_call(ToolCall(call.id, without_lone_surrogates(call.name),
                                            without_lone_surrogates(call.arguments)))
            for call in reply.tool_calls
        ]
    for key, value in reply.kept.items():
        message.setdefault(key, value)
    return message


async def answer_tool_call(call: ToolCall, call_tool: CallTool) -> tuple[dict[str, Any], str]:
    """Run one tool call through the caller's tool service: its record, and the text the model
    reads (the result document, or the error document when it was refused or failed).
    Arguments that are not a JSON object go to the service all the same, as they came: it
    refuses them (and audits the call) unless it refuses the call for a graver reason first;
    the model then reads why its arguments could not be read."""
    name = without_lone_surrogates(redact(call.name))  # as shown and recorded; the service sees the name as sent
    try:
        arguments, unreadable = parse_arguments(call), None
    except FwError as exc:
        arguments, unreadable = _as_sent(call), exc
    try:
        # The service decides about every name, an unknown one too (it answers denied).
        content = json.dumps(redact_document(await call_tool(call.name, arguments)), ensure_ascii=False)
    except FwError as exc:
        return _failed(name, unreadable if unreadable is not None and exc.code == "invalid" else exc)
    except Exception as exc:  # a bug in a tool must not end the run, nor show a traceback
        return _failed(name, FwError("internal", f"unexpected error in tool {name}: {type(exc).__name__}",
                                     "this is a bug in fw; please report it"))
    return {"name": name, "outcome": "ok"}, content


def parse_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as an object; `invalid` (answered to the model) when they are not."""
    text = call.arguments.strip()
    if not text:  # some models send nothing for a tool without parameters
        return {}
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        raise FwError("invalid", f"the arguments of {call.name} are not valid JSON ({getattr(exc, 'msg', exc)})",
                      "send the arguments as one JSON object that fits the tool's input_schema") from None
    if not isinstance(arguments, dict):
        raise FwError("invalid", f"the arguments of {call.name} are not a JSON object",
                      "send the arguments as one JSON object that fits the tool's input_schema")
    return arguments


def _as_sent(call: ToolCall) -> Any:
    """Arguments that are no JSON object: the JSON value they are, or else their text."""
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments


def _failed(name: str, exc: FwError) -> tuple[dict[str, Any], str]:
    outcome = "refused" if exc.code in REFUSAL_CODES else "error"
    content = json.dumps(redact_document(exc.to_dict()), ensure_ascii=False)
    return {"name": name, "outcome": outcome, "error": exc.code}, content
