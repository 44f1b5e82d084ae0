"""Anthropic's Messages API (`api: anthropic`): Claude without a proxy.

`POST {base_url}/messages` with `x-api-key` and `anthropic-version: 2023-06-01`. fw's
conversation becomes the API's shape here: the system messages go to the top-level `system`,
an assistant's tool calls become `tool_use` blocks and the tool messages that answer them one
user message of `tool_result` blocks. `max_tokens` is required by the API (4096 unless the
model sets it). An assistant message fw got from this API is sent back with its content blocks
as they came (thinking blocks and their signatures included, which the API asks for within a
tool loop). `stop_reason` is read as chat completions' `finish_reason`.
"""

from __future__ import annotations

import json
from typing import Any

from .base import (
    HeldSurrogate,
    HttpRequest,
    OnText,
    Reply,
    ServerError,
    ToolCall,
    UnreadableAnswer,
    UnusableAnswer,
    joined,
    json_object,
)

VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
KEPT_BLOCKS = "content_blocks"  # the assistant message's field that holds the blocks as the API gave them
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
                  "refusal": "content_filter"}
MODELS_PAGE = 1000  # the most the API lists at once


class AnthropicMessages:
    api = "anthropic"
    unreadable_hint = "is base_url Anthropic's Messages API (e.g. https://api.anthropic.com/v1)?"

    def chat_request(self, base_url: str, api_key: str, model_id: str, conversation: list[dict[str, Any]],
                     tools: list[dict[str, Any]] | None, *, stream: bool, max_tokens: int | None) -> HttpRequest:
        system = "\n\n".join(m.get("content") or "" for m in conversation if m.get("role") == "system")
        body: dict[str, Any] = {"model": model_id, "max_tokens": max_tokens or DEFAULT_MAX_TOKENS,
                                "messages": wire_messages(conversation)}
        if system.strip():
            body["system"] = system
        if tools:
            body["tools"] = [{"name": t["name"], "description": t.get("description", ""),
                              "input_schema": t["input_schema"]} for t in tools]
        if stream:
            body["stream"] = True
        headers = {**_headers(api_key), "content-type": "application/json"}
        return HttpRequest("POST", _url(base_url, "messages"), headers, body)

    def reply_from_answer(self, payload: Any) -> Reply:
        if not isinstance(payload, dict):
            raise UnreadableAnswer("not a JSON object")
        _raise_for_error(payload)
        if payload.get("type") != "message" and "content" not in payload:
            raise UnreadableAnswer("not a message")
        return _reply(payload.get("content"), payload.get("stop_reason"))

    def streamed_answer(self, on_text: OnText | None) -> StreamedMessage:
        return StreamedMessage(on_text)

    def models_request(self, base_url: str, api_key: str) -> HttpRequest:
        return HttpRequest("GET", _url(base_url, f"models?limit={MODELS_PAGE}"), _headers(api_key))

    def model_ids(self, payload: Any) -> list[str]:
        """`{"data": [{"id", "display_name", ...}], "has_more", ...}`."""
        items = payload["data"] if isinstance(payload, dict) else None
        if not isinstance(items, list):
            raise TypeError("no list of models")
        return sorted(str(m["id"]) for m in items)


def _url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + "/" + path


def _headers(api_key: str) -> dict[str, str]:
    return {"x-api-key": api_key, "anthropic-version": VERSION}


def _raise_for_error(payload: dict[str, Any]) -> None:
    """`{"type": "error", "error": {"type", "message"}}`, in a 2xx answer or an event stream."""
    if payload.get("type") == "error" or ("error" in payload and payload.get("error")):
        raise ServerError(payload.get("error") or payload)


# -- fw's conversation as the API's messages -----------------------------------------------
def wire_messages(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """User and assistant messages only (system goes apart), each turn one message: the API
    wants the roles to alternate, so neighbours of one role are joined, and tool results
    (fw's `tool` messages) are blocks of the user turn that follows the tool calls."""
    out: list[dict[str, Any]] = []
    for message in conversation:
        role = message.get("role")
        if role == "system":
            continue
        if role == "assistant":
            blocks = _assistant_blocks(message)
            if blocks:
                _append(out, "assistant", blocks)
        elif role == "tool":
            _append(out, "user", [{"type": "tool_result", "tool_use_id": str(message.get("tool_call_id") or ""),
                                   "content": str(message.get("content") or "")}])
        elif message.get("content"):  # the API refuses an empty text block
            _append(out, "user", [{"type": "text", "text": str(message["content"])}])
    if out and out[0]["role"] != "user":  # the API's conversation opens with the user
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": "(the conversation so far)"}]})
    return [_plain(m) for m in out]


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": list(blocks)})


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A user turn of one text block as plain text, the API's simplest form."""
    blocks = message["content"]
    if message["role"] == "user" and len(blocks) == 1 and blocks[0]["type"] == "text":
        return {"role": "user", "content": blocks[0]["text"]}
    return message


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    kept = message.get(KEPT_BLOCKS)
    if isinstance(kept, list) and kept:
        return list(kept)  # as the API gave them
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": str(message["content"])})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                       "input": _input(function.get("arguments"))})
    return blocks


def _input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the object `tool_use` needs (arguments fw could not read:
    an empty object; the model read why in the tool's answer)."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# -- answers -------------------------------------------------------------------------------
def _reply(content: Any, stop_reason: Any) -> Reply:
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise UnusableAnswer("its content is not a list of blocks")
    texts, calls = [], []
    for position, block in enumerate(content):
        if block.get("type") == "text":
            if not isinstance(block.get("text"), str):
                raise UnusableAnswer("a text block holds no text")
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append(_tool_call(position, block))
    finish = FINISH_REASONS.get(stop_reason, stop_reason) if isinstance(stop_reason, str) and stop_reason else None
    return Reply("".join(texts) if texts else None, calls, finish, None, {KEPT_BLOCKS: content})


def _tool_call(position: int, block: dict[str, Any]) -> ToolCall:
    name, tool_input = block.get("name"), block.get("input")
    if not isinstance(name, str) or not name:
        raise UnusableAnswer("a tool_use block has no name")
    if isinstance(tool_input, str):  # a streamed call's input text, not yet read
        arguments = tool_input
    elif isinstance(tool_input, dict):
        arguments = json.dumps(tool_input, ensure_ascii=False)
    else:
        raise UnusableAnswer("a tool_use block's input is not an object")
    call_id = block.get("id")
    return ToolCall(call_id if isinstance(call_id, str) and call_id else f"toolu_{position}", name, arguments)


class StreamedMessage:
    """A streamed message as its events come: `message_start`, then for each content block a
    `content_block_start`, its deltas (`text_delta`, `input_json_delta`, `thinking_delta`,
    `signature_delta`) and `content_block_stop`; `message_delta` carries the stop_reason and
    `message_stop` ends it. `ping` and unknown events are passed over; `error` is the server's."""

    def __init__(self, on_text: OnText | None = None) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.pieces: dict[int, list[str]] = {}  # text, thinking or input JSON, by block
        self.stop_reason: str | None = None
        self.started = False
        self.done = False
        self._heard = HeldSurrogate(on_text)

    def add(self, data: str) -> None:
        event = json_object(data, "a streamed event")
        _raise_for_error(event)
        kind = event.get("type")
        if kind == "message_start":
            self.started = True
        elif kind == "content_block_start":
            self._start(event)
        elif kind == "content_block_delta":
            self._delta(event)
        elif kind == "message_delta":
            delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
        elif kind == "message_stop":
            self.done = True

    def _index(self, event: dict[str, Any]) -> int:
        index = event.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise UnusableAnswer("a streamed content block has no index")
        return index

    def _start(self, event: dict[str, Any]) -> None:
        block = event.get("content_block")
        if not isinstance(block, dict):
            raise UnusableAnswer("a streamed content block is not an object")
        index = self._index(event)
        self.blocks[index] = dict(block)
        self.pieces[index] = []

    def _delta(self, event: dict[str, Any]) -> None:
        index, delta = self._index(event), event.get("delta")
        if index not in self.blocks or not isinstance(delta, dict):
            raise UnusableAnswer("a streamed delta belongs to no content block")
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            self.pieces[index].append(delta["text"])
            self._heard(delta["text"])
        elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self.pieces[index].append(delta["partial_json"])
        elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            self.pieces[index].append(delta["thinking"])
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            self.blocks[index]["signature"] = self.blocks[index].get("signature", "") + delta["signature"]

    def reply(self) -> Reply:
        if not self.started:
            raise UnreadableAnswer("the stream held no message")
        content, calls = [], []
        for index in sorted(self.blocks):
            block, text = self.blocks[index], joined(self.pieces[index])
            kind = block.get("type")
            if kind == "text":
                block["text"] = block.get("text", "") + text
            elif kind == "thinking":
                block["thinking"] = block.get("thinking", "") + text
            elif kind == "tool_use":
                calls.append(_tool_call(index, {**block, "input": text if text.strip() else block.get("input") or {}}))
                block["input"] = _input(text) if text.strip() else block.get("input") or {}
            content.append(block)
        reply = _reply([b for b in content if b.get("type") != "tool_use"], self.stop_reason)
        return Reply(reply.content, calls, reply.finish_reason, None, {KEPT_BLOCKS: content})
