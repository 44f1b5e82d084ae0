"""Redaction of whole JSON documents, value by value.

Redacting a document's JSON text would miss a secret that JSON escapes (a quote, a backslash,
a control character): its escaped form no longer matches. So each string is redacted before
the document is serialised.
"""

from __future__ import annotations

from typing import Any

from ..home.secrets import redact


def redact_document(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): redact_document(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_document(item) for item in value]
    return value
