"""The conversations of explicit runs, kept in `state.db` so that `fw agent run NAME --continue`
carries on the agent's last one, as `llm -c` does. Not sessions (those are between
principals): a conversation belongs to one agent and is only ever read back into its model's
context. Each message is kept as fw's conversation holds it (role, content, tool calls), with
every text redacted; a model's reasoning and a dialect's extra fields are never kept.
"""

from __future__ import annotations

import json
from typing import Any

from ..dialects.base import stored_message
from ..errors import without_lone_surrogates
from ..home.store import Home
from ..state.store import StateStore, now_iso
from .documents import redact_document


def last_conversation(home: Home, agent: str) -> dict[str, Any] | None:
    """The agent's conversation added to last: `{"id", "messages"}`, or None when it has none."""
    with StateStore.open(home) as store:
        row = store.one("SELECT id FROM conversations WHERE agent = ? ORDER BY updated_at DESC, id DESC LIMIT 1",
                        (agent,))
        if row is None:
            return None
        rows = store.all("SELECT message FROM conversation_messages WHERE conversation = ? ORDER BY id", (row["id"],))
    return {"id": row["id"], "messages": [json.loads(r["message"]) for r in rows]}


def conversation_keep(home: Home, agent: str, conversation: int | None, run_id: str,
                      messages: list[dict[str, Any]]) -> int:
    """Add a run's messages to the conversation (None: a new one); its id."""
    now = now_iso()
    kept = [_kept(message) for message in messages]
    with StateStore.open(home) as store, store.transaction():
        if conversation is None or store.one("SELECT id FROM conversations WHERE id = ?", (conversation,)) is None:
            conversation = store.insert("conversations", {"agent": agent, "created_at": now, "updated_at": now})
        else:
            store.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation))
        for text in kept:
            store.insert("conversation_messages",
                         {"conversation": conversation, "run_id": run_id, "message": text, "created_at": now})
    return conversation


def _kept(message: dict[str, Any]) -> str:
    """A message as it is stored: its plain fields only, every text redacted and whole text."""
    text = json.dumps(redact_document(stored_message(message)), ensure_ascii=False)
    return without_lone_surrogates(text)
