"""Adapters: one a platform. An adapter only translates (a semantic API call into its
platform's own, a platform report into an event); the tool service decides who may call what.

Each adapter module exposes `make(home, bot_name, bot) -> Adapter`; this registry only maps
an adapter's name to its module, imported when a bot of that kind is used.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from ...errors import FwError
from ...home.store import Home

ADAPTER_MODULES = {"local": f"{__name__}.local", "onebot": f"{__name__}.onebot"}


class Adapter(Protocol):
    name: str
    declared_apis: tuple[str, ...]  # the catalogue's APIs this adapter implements

    def online(self) -> bool: ...

    def call(self, api: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def ingest(self, event: dict[str, Any]) -> None: ...


def adapter_for(home: Home, bot_name: str, bot: dict[str, Any]) -> Adapter:
    module = ADAPTER_MODULES.get(bot["adapter"])
    if module is None:  # the bot model admits only the adapters above
        raise FwError("invalid", f"unknown adapter {bot['adapter']!r}", f"use one of: {', '.join(ADAPTER_MODULES)}", field="adapter")
    return importlib.import_module(module).make(home, bot_name, bot)  # type: ignore[no-any-return]


def supported_apis(adapter: Adapter, bot: dict[str, Any]) -> list[str]:
    """What the bot offers its runs: the adapter's APIs less those the bot withholds."""
    withheld = set(bot.get("unsupported_apis") or ())
    return [api for api in adapter.declared_apis if api not in withheld]
