"""What an MCP server says, as fw's documents: a listed tool, a tool's result (its content
redacted, its binary parts apart, cut to what a model reads), and a failure in one line. Plain
functions of the server's JSON, apart from the connections that fetch it (`mcp_client`)."""

from __future__ import annotations

import base64
import json
from typing import Any

from ..errors import refuse_lone_surrogates, without_lone_surrogates
from ..home.secrets import redact
from .documents import redact_document

MESSAGE_CHARS = 300  # of a failure's text shown
STDERR_LINE_CHARS = 500  # of each line of a server's stderr shown, cut after the line was redacted


def tool_entry(raw: Any) -> dict[str, Any]:
    """One listed tool as the server gave it, redacted; the projection judges name and schema."""
    raw = raw if isinstance(raw, dict) else {}
    annotations = raw.get("annotations") if isinstance(raw.get("annotations"), dict) else {}
    name, description, title = raw.get("name"), raw.get("description"), raw.get("title") or annotations.get("title")
    execution = raw.get("execution") if isinstance(raw.get("execution"), dict) else {}
    task_support = execution.get("taskSupport")
    return {
        "name": name if isinstance(name, str) else "",
        "title": without_lone_surrogates(redact(title)) if isinstance(title, str) else None,
        "description": without_lone_surrogates(redact(description)) if isinstance(description, str) else "",
        "input_schema": redact_document(raw.get("inputSchema")),
        "annotations": {k: v for k, v in annotations.items() if k in ("readOnlyHint", "destructiveHint") and isinstance(v, bool)},
        "task_support": task_support if task_support in ("forbidden", "optional", "required") else None,
    }


def tool_result_document(result: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An MCP tool result as fw's document (its content, whether it is an error, and its
    structured content, each redacted), and the bytes of its binary content apart.

    Content as every front door shows it: a text part, or an embedded resource's text, as its
    text; a `resource_link` as `{"type", "uri", "name", "mimeType"?}`; an embedded resource's
    blob as `{"type": "resource", "uri", "mimeType", "size"}`, an image or audio as
    `{"type", "mimeType", "size"}`: their bytes only go on through MCP (`fw mcp serve`)."""
    parts = result.get("content")
    structured = result.get("structuredContent")
    attachments: list[dict[str, Any]] = []
    doc = {
        "content": [_content_item(part, attachments) for part in parts] if isinstance(parts, list) else [],
        "is_error": result.get("isError") is True,
        "structured": redact_document(structured) if structured is not None else None,
    }
    refuse_lone_surrogates(doc, "", "the MCP server's result")
    return doc, attachments


RESULT_CAP = 64 * 1024  # bytes of a tool result a model reads (CONTRACT section 6)


def capped(doc: dict[str, Any], cap: int = RESULT_CAP) -> dict[str, Any]:
    """A tool result document cut to `cap` bytes of text, saying whether it was
    (`truncated`): the text parts first, in order; structured content only if it still fits."""
    left, parts, truncated = cap, [], False
    for item in doc["content"]:
        if not isinstance(item, str):  # an item that stands for binary content or a link: whole, or not at all
            size = len(json.dumps(item, ensure_ascii=False).encode("utf-8"))
            if size > left:
                truncated = True
                break
            parts.append(item)
            left -= size
            continue
        data = item.encode("utf-8")
        if len(data) > left:
            item, truncated = data[:left].decode("utf-8", "ignore"), True
        parts.append(item)
        left -= len(item.encode("utf-8"))
        if truncated:
            break
    structured = doc["structured"]
    if structured is not None and (truncated or len(json.dumps(structured, ensure_ascii=False).encode("utf-8")) > left):
        structured, truncated = None, True
    return {**doc, "content": parts, "structured": structured, "truncated": truncated}


def _content_item(part: Any, attachments: list[dict[str, Any]]) -> Any:
    """One content part of a result, as fw's document shows it (see `tool_result_document`);
    the bytes of binary content go to `attachments`, unless they hold a secret value."""
    part = part if isinstance(part, dict) else {}
    kind = part.get("type") if isinstance(part.get("type"), str) else "content"
    if kind == "text":
        return redact(str(part.get("text", "")))
    if kind == "resource_link":
        link = {"type": kind, "uri": _shown(part.get("uri")), "name": _shown(part.get("name"))}
        if isinstance(part.get("mimeType"), str):
            link["mimeType"] = _shown(part["mimeType"])
        return link
    if kind == "resource":
        resource = part.get("resource") if isinstance(part.get("resource"), dict) else {}
        if isinstance(resource.get("text"), str):
            return redact(resource["text"])
        mime = resource.get("mimeType") or "application/octet-stream"
        item = {"type": kind, "uri": _shown(resource.get("uri")), "mimeType": _shown(mime)}
        return _binary(item, resource.get("blob"), "blob", attachments)
    if kind in ("image", "audio"):
        item = {"type": kind, "mimeType": _shown(part.get("mimeType") or "application/octet-stream")}
        return _binary(item, part.get("data"), "data", attachments)
    return {"type": _shown(kind)[:50]}


def _shown(value: Any) -> str:
    return without_lone_surrogates(redact(value)) if isinstance(value, str) else ""


def _binary(item: dict[str, Any], encoded: Any, key: str, attachments: list[dict[str, Any]]) -> dict[str, Any]:
    """Binary content as its size; its bytes (base64) kept apart for MCP, unless they do not
    decode or hold a secret value (then the item says it was withheld)."""
    try:
        data = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
    except ValueError:
        return {**item, "size": 0, "withheld": "its data is not base64"}
    item["size"] = len(data)
    text = data.decode("latin-1")
    if redact(text) != text:
        return {**item, "withheld": "it holds a secret value"}
    attachments.append({**item, key: encoded})
    return item


def cut_line(line: str) -> str:
    return line if len(line) <= STDERR_LINE_CHARS else line[:STDERR_LINE_CHARS] + "..."
