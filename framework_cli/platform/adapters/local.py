"""The `local` adapter: a small chat platform inside `state.db`, so a bot can be tried with no
network. It has users, friends, groups and their members, messages, mutes, friend requests and
group invites, one platform per local bot, and it implements every API of the catalogue.

`fw bot local say` puts a message on it as a user; every API call it serves is logged
(`fw bot local log`), a failed one with its error code. A bot set offline refuses every call
(the tool service checks `online()` before it calls).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from ...domain.catalogue import APIS
from ...errors import FwError
from ...home.store import Home
from ...state.store import StateStore, now_iso
from ..events import validate_event

DEFAULT_MUTE_SECONDS = 600  # what `duration: 0` means here


def make(home: Home, bot_name: str, bot: dict[str, Any]) -> LocalPlatform:
    return LocalPlatform(home, bot_name)


def _later(seconds: int) -> str:
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LocalPlatform:
    name = "local"
    declared_apis = APIS

    def __init__(self, home: Home, bot: str) -> None:
        self.home = home
        self.bot = bot

    @contextmanager
    def _transaction(self) -> Iterator[StateStore]:
        with StateStore.open(self.home) as store, store.transaction():
            yield store

    # -- the bot's connection ------------------------------------------------------------
    def online(self) -> bool:
        with StateStore.open(self.home) as store:
            row = store.one("SELECT online FROM local_bots WHERE bot = ?", (self.bot,))
        return row is None or bool(row["online"])

    def set_online(self, online: bool) -> None:
        with self._transaction() as store:
            store.execute(
                "INSERT INTO local_bots (bot, online, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (bot) DO UPDATE SET online = excluded.online, updated_at = excluded.updated_at",
                (self.bot, int(online), now_iso()),
            )

    # -- API calls -----------------------------------------------------------------------
    def call(self, api: str, params: dict[str, Any]) -> dict[str, Any]:
        """Serve one API call and log it, in one transaction; a refused call changes nothing
        but is logged with its error code."""
        serve = getattr(self, f"_api_{api}", None)
        if api not in self.declared_apis or serve is None:
            raise FwError("unavailable", f"the local adapter has no API {api!r}", "", reason="adapter_api_unsupported")
        with StateStore.open(self.home) as store:
            try:
                with store.transaction():
                    result = serve(store, **params)
                    self._log(store, api, params, None)
            except FwError as exc:
                with store.transaction():
                    self._log(store, api, params, exc.code)
                raise
        return result  # type: ignore[no-any-return]

    def _log(self, store: StateStore, api: str, params: dict[str, Any], error: str | None) -> None:
        store.insert("local_actions", {"bot": self.bot, "api": api, "params": json.dumps(params, ensure_ascii=False),
                                       "error": error, "time": now_iso()})

    def log(self) -> dict[str, Any]:
        """Every API call served, oldest first."""
        with StateStore.open(self.home) as store:
            rows = store.all("SELECT api, params, error, time FROM local_actions WHERE bot = ? ORDER BY seq", (self.bot,))
        actions = []
        for row in rows:
            action = {"api": row["api"], "params": json.loads(row["params"]), "time": row["time"]}
            if row["error"]:
                action["error"] = row["error"]
            actions.append(action)
        return {"bot": self.bot, "actions": actions}

    # -- what happens on the platform ----------------------------------------------------
    def say(self, user: str, text: str, group: str | None = None) -> dict[str, Any]:
        """A user posts a message (to the bot, or in a group); the users and the group named are
        created on first use. The event the bot receives."""

        event: dict[str, Any] = {"type": "message.received", "actor": {"id": user}, "message": {"id": "0", "text": text}}
        if group is not None:
            event["group"] = {"id": group}
        validate_event(event)  # ids of the right shape before anything is stored
        with self._transaction() as store:
            self._ensure_user(store, user)
            if group is not None:
                self._ensure_group(store, group)
                self._ensure_member(store, group, user)
                self._refuse_muted(store, group, user)
            chat = ("group", group) if group is not None else ("person", user)
            event["message"]["id"] = self._store_message(store, *chat, user, text)
            event["actor"]["name"] = self._user(store, user)["name"]
        return validate_event(event)

    def ingest(self, event: dict[str, Any]) -> None:
        """Record an event handled for this bot (`fw event handle`) as if it had happened
        here: its user, group, membership, message or request."""
        actor, group = event["actor"], (event.get("group") or {}).get("id")
        with self._transaction() as store:
            self._ensure_user(store, actor["id"], actor.get("name"))
            kind = event["type"]
            if group is not None and kind != "bot.invited_to_group":
                self._ensure_group(store, group)
                if kind == "group.member_left":
                    self._remove_member(store, group, actor["id"])
                else:
                    self._ensure_member(store, group, actor["id"])
            if kind == "message.received" and not self._message_row(store, event["message"]["id"]):
                chat = ("group", group) if group is not None else ("person", actor["id"])
                self._insert_message(store, event["message"]["id"], *chat, actor["id"], event["message"]["text"])
            request = event.get("request_id")
            if kind == "friend.request_received" and request:
                store.execute("INSERT INTO local_friend_requests (bot, id, user_id, status, created_at) VALUES (?, ?, ?, 'pending', ?) "
                              "ON CONFLICT DO NOTHING", (self.bot, request, actor["id"], now_iso()))
            if kind == "bot.invited_to_group" and request and group is not None:
                self._ensure_group(store, group, joined=False)
                store.execute("INSERT INTO local_group_invites (bot, id, group_id, inviter, status, created_at) "
                              "VALUES (?, ?, ?, ?, 'pending', ?) ON CONFLICT DO NOTHING",
                              (self.bot, request, group, actor["id"], now_iso()))

    # -- rows ------------------------------------------------------------------------------
    def _ensure_user(self, store: StateStore, user: str, name: str | None = None) -> None:
        store.execute("INSERT INTO local_users (bot, id, name, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                      (self.bot, user, name or user, now_iso()))
        if name:
            store.execute("UPDATE local_users SET name = ? WHERE bot = ? AND id = ?", (name, self.bot, user))

    def _ensure_group(self, store: StateStore, group: str, joined: bool = True) -> None:
        store.execute("INSERT INTO local_groups (bot, id, name, joined, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                      (self.bot, group, group, int(joined), now_iso()))

    def _ensure_member(self, store: StateStore, group: str, user: str) -> None:
        store.execute("INSERT INTO local_members (bot, group_id, user_id, joined_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                      (self.bot, group, user, now_iso()))

    def _remove_member(self, store: StateStore, group: str, user: str) -> None:
        store.execute("DELETE FROM local_members WHERE bot = ? AND group_id = ? AND user_id = ?", (self.bot, group, user))
        store.execute("DELETE FROM local_mutes WHERE bot = ? AND group_id = ? AND user_id = ?", (self.bot, group, user))

    def _refuse_muted(self, store: StateStore, group: str, user: str) -> None:
        until = self._muted_until(store, group, user)
        if until:
            raise FwError("denied", f"{user!r} is muted in group {group!r} until {until}", "wait, or unmute them")

    def _muted_until(self, store: StateStore, group: str, user: str) -> str | None:
        row = store.one("SELECT until FROM local_mutes WHERE bot = ? AND group_id = ? AND user_id = ? AND until > ?",
                        (self.bot, group, user, now_iso()))
        return row["until"] if row else None

    def _store_message(self, store: StateStore, chat_type: str, chat_id: str, sender: str | None, text: str) -> str:
        """A new message with the next free id (ids are numbers as text, as on OneBot)."""
        row = store.one("SELECT COALESCE(MAX(seq), 0) + 1 AS n FROM local_messages")
        number = int(row["n"]) if row else 1
        while self._message_row(store, str(number)):
            number += 1
        self._insert_message(store, str(number), chat_type, chat_id, sender, text)
        return str(number)

    def _insert_message(self, store: StateStore, message_id: str, chat_type: str, chat_id: str, sender: str | None, text: str) -> None:
        store.insert("local_messages", {"bot": self.bot, "id": message_id, "chat_type": chat_type, "chat_id": chat_id,
                                        "sender": sender, "text": text, "deleted": 0, "created_at": now_iso()})

    def _message_row(self, store: StateStore, message_id: str) -> dict[str, Any] | None:
        return store.one("SELECT * FROM local_messages WHERE bot = ? AND id = ?", (self.bot, message_id))

    def _user(self, store: StateStore, user: str) -> dict[str, Any]:
        row = store.one("SELECT id, name FROM local_users WHERE bot = ? AND id = ?", (self.bot, user))
        if row is None:
            raise FwError("not_found", f"no user {user!r} on this platform", "users appear when they first speak (`fw bot local say`)")
        return row

    def _group(self, store: StateStore, group: str) -> dict[str, Any]:
        row = store.one("SELECT id, name, joined FROM local_groups WHERE bot = ? AND id = ?", (self.bot, group))
        if row is None or not row["joined"]:
            raise FwError("not_found", f"the bot is not in a group {group!r}", "see its groups with platform_get_group_list")
        return row

    def _member(self, store: StateStore, group: str, user: str) -> dict[str, Any]:
        self._group(store, group)
        row = store.one("SELECT m.user_id, u.name FROM local_members m JOIN local_users u ON u.bot = m.bot AND u.id = m.user_id "
                        "WHERE m.bot = ? AND m.group_id = ? AND m.user_id = ?", (self.bot, group, user))
        if row is None:
            raise FwError("not_found", f"{user!r} is not a member of group {group!r}", "see the members with platform_get_group_member_list")
        return self._member_doc(store, group, row)

    def _member_doc(self, store: StateStore, group: str, row: dict[str, Any]) -> dict[str, Any]:
        doc = {"user_id": row["user_id"], "name": row["name"]}
        until = self._muted_until(store, group, row["user_id"])
        if until:
            doc["muted_until"] = until
        return doc

    def _group_doc(self, store: StateStore, group: dict[str, Any]) -> dict[str, Any]:
        count = store.one("SELECT count(*) AS n FROM local_members WHERE bot = ? AND group_id = ?", (self.bot, group["id"]))
        return {"group_id": group["id"], "name": group["name"], "member_count": count["n"] if count else 0}

    def _chat_message(self, store: StateStore, chat_type: str, chat_id: str, message_id: str) -> dict[str, Any]:
        row = self._message_row(store, message_id)
        kind = "group" if chat_type == "group" else "person"
        if row is None or row["deleted"] or row["chat_type"] != kind or row["chat_id"] != chat_id:
            raise FwError("not_found", f"no message {message_id!r} in that chat", "check the chat and the message id")
        return row

    def _pending(self, store: StateStore, table: str, request: str) -> dict[str, Any]:
        row = store.one(f"SELECT * FROM {table} WHERE bot = ? AND id = ?", (self.bot, request))
        if row is None:
            raise FwError("not_found", f"no request {request!r}", "a request id comes from the event that carried it")
        if row["status"] != "pending":
            raise FwError("conflict", f"request {request!r} was already answered ({row['status']})", "")
        return row

    # -- the APIs --------------------------------------------------------------------------
    def _api_send_message(self, store: StateStore, target_type: str, target_id: str, text: str, reply_to: str | None = None,
                          temp_group_id: str | None = None) -> dict[str, Any]:
        if target_type == "group":
            self._group(store, target_id)
        else:
            self._user(store, target_id)
        message_id = self._store_message(store, target_type, target_id, None, text)
        return {"message_id": message_id, "target_type": target_type, "target_id": target_id}

    def _api_get_message(self, store: StateStore, chat_type: str, chat_id: str, message_id: str) -> dict[str, Any]:
        row = self._chat_message(store, chat_type, chat_id, message_id)
        sender = {"user_id": row["sender"]} if row["sender"] is not None else {"bot": True}
        return {"message": {"message_id": row["id"], "chat_type": row["chat_type"], "chat_id": row["chat_id"],
                            "sender": sender, "text": row["text"], "time": row["created_at"]}}

    def _api_delete_message(self, store: StateStore, chat_type: str, chat_id: str, message_id: str) -> dict[str, Any]:
        self._chat_message(store, chat_type, chat_id, message_id)
        store.execute("UPDATE local_messages SET deleted = 1 WHERE bot = ? AND id = ?", (self.bot, message_id))
        return {"deleted": True, "message_id": message_id}

    def _api_get_group_info(self, store: StateStore, group_id: str) -> dict[str, Any]:
        return {"group": self._group_doc(store, self._group(store, group_id))}

    def _api_get_group_list(self, store: StateStore) -> dict[str, Any]:
        rows = store.all("SELECT id, name FROM local_groups WHERE bot = ? AND joined = 1 ORDER BY id", (self.bot,))
        return {"groups": [self._group_doc(store, row) for row in rows]}

    def _api_get_group_member_list(self, store: StateStore, group_id: str) -> dict[str, Any]:
        self._group(store, group_id)
        rows = store.all("SELECT m.user_id, u.name FROM local_members m JOIN local_users u ON u.bot = m.bot AND u.id = m.user_id "
                         "WHERE m.bot = ? AND m.group_id = ? ORDER BY m.user_id", (self.bot, group_id))
        return {"group_id": group_id, "members": [self._member_doc(store, group_id, row) for row in rows]}

    def _api_get_group_member_info(self, store: StateStore, group_id: str, user_id: str) -> dict[str, Any]:
        return {"group_id": group_id, "member": self._member(store, group_id, user_id)}

    def _api_set_group_name(self, store: StateStore, group_id: str, name: str) -> dict[str, Any]:
        self._group(store, group_id)
        store.execute("UPDATE local_groups SET name = ? WHERE bot = ? AND id = ?", (name, self.bot, group_id))
        return {"group": self._group_doc(store, self._group(store, group_id))}

    def _api_mute_member(self, store: StateStore, group_id: str, user_id: str, duration: int = 0) -> dict[str, Any]:
        self._member(store, group_id, user_id)
        until = _later(duration or DEFAULT_MUTE_SECONDS)
        store.execute("INSERT INTO local_mutes (bot, group_id, user_id, until) VALUES (?, ?, ?, ?) "
                      "ON CONFLICT (bot, group_id, user_id) DO UPDATE SET until = excluded.until", (self.bot, group_id, user_id, until))
        return {"muted": True, "group_id": group_id, "user_id": user_id, "until": until}

    def _api_unmute_member(self, store: StateStore, group_id: str, user_id: str) -> dict[str, Any]:
        self._member(store, group_id, user_id)
        store.execute("DELETE FROM local_mutes WHERE bot = ? AND group_id = ? AND user_id = ?", (self.bot, group_id, user_id))
        return {"muted": False, "group_id": group_id, "user_id": user_id}

    def _api_kick_member(self, store: StateStore, group_id: str, user_id: str) -> dict[str, Any]:
        self._member(store, group_id, user_id)
        self._remove_member(store, group_id, user_id)
        return {"kicked": True, "group_id": group_id, "user_id": user_id}

    def _api_leave_group(self, store: StateStore, group_id: str) -> dict[str, Any]:
        self._group(store, group_id)
        store.execute("UPDATE local_groups SET joined = 0 WHERE bot = ? AND id = ?", (self.bot, group_id))
        return {"left": True, "group_id": group_id}

    def _api_get_user_info(self, store: StateStore, user_id: str) -> dict[str, Any]:
        user = self._user(store, user_id)
        friend = store.one("SELECT remark FROM local_friends WHERE bot = ? AND user_id = ?", (self.bot, user_id))
        return {"user": {"user_id": user["id"], "name": user["name"], "is_friend": friend is not None}}

    def _api_get_friend_list(self, store: StateStore) -> dict[str, Any]:
        rows = store.all("SELECT f.user_id, u.name, f.remark FROM local_friends f JOIN local_users u ON u.bot = f.bot AND u.id = f.user_id "
                         "WHERE f.bot = ? ORDER BY f.user_id", (self.bot,))
        return {"friends": [{k: v for k, v in row.items() if v is not None} for row in rows]}

    def _api_approve_friend_request(self, store: StateStore, request_id: str, approve: bool, remark: str | None = None) -> dict[str, Any]:
        request = self._pending(store, "local_friend_requests", request_id)
        store.execute("UPDATE local_friend_requests SET status = ? WHERE bot = ? AND id = ?",
                      ("approved" if approve else "rejected", self.bot, request_id))
        if approve:
            store.execute("INSERT INTO local_friends (bot, user_id, remark, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                          (self.bot, request["user_id"], remark, now_iso()))
        return {"request_id": request_id, "approved": approve, "user_id": request["user_id"]}

    def _api_approve_group_invite(self, store: StateStore, request_id: str, approve: bool) -> dict[str, Any]:
        invite = self._pending(store, "local_group_invites", request_id)
        store.execute("UPDATE local_group_invites SET status = ? WHERE bot = ? AND id = ?",
                      ("approved" if approve else "rejected", self.bot, request_id))
        if approve:
            store.execute("UPDATE local_groups SET joined = 1 WHERE bot = ? AND id = ?", (self.bot, invite["group_id"]))
        return {"request_id": request_id, "approved": approve, "group_id": invite["group_id"]}
