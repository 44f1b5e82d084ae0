"""Creating a home and checking one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import FwError
from .kinds import DEFAULT_CATEGORY, DEFAULT_PROMPT, KINDS
from .store import SECRETS_DIR, Home, is_home, resolve_home_path

DEFAULT_PROMPT_TEXT = """---
description: The default system prompt, used by agents that name no other. It cannot be deleted.
---
You are a helpful assistant working inside an agent framework.
Answer clearly, say when you are unsure, and never reveal secrets such as API keys.
"""

EXTRA_DIRS = ("principals", "bindings", "runs")


def init_home(path: str | None) -> dict[str, Any]:
    root = resolve_home_path(path)
    existing = is_home(root)
    if root.exists() and not root.is_dir():
        raise FwError("exists", f"{str(root)!r} exists and is not a folder", "pick another path")
    if root.is_dir() and not existing and any(not p.name.startswith(".") for p in root.iterdir()):
        raise FwError(
            "exists",
            f"{str(root)!r} is not empty and is not a framework home",
            "pick an empty or new folder",
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
        return _fill_home(root, existing)
    except OSError as exc:
        raise FwError(
            "invalid",
            f"cannot create a framework home at {str(root)!r}: {exc.strerror or type(exc).__name__}",
            "pick a path inside a folder you can write to",
        ) from None


def _fill_home(root: Path, existing: bool) -> dict[str, Any]:
    home = Home(root)
    created: list[str] = []
    with home.locked():
        for spec in KINDS.values():
            rel = f"{spec.folder}/{DEFAULT_CATEGORY}"
            if not home.path(rel).is_dir():
                home.make_dir(rel)
                created.append(rel + "/")
        for rel in EXTRA_DIRS:
            if not home.path(rel).is_dir():
                home.make_dir(rel)
                created.append(rel + "/")
        secrets_dir = home.path(SECRETS_DIR)
        if not secrets_dir.is_dir():
            secrets_dir.mkdir(mode=0o700)
            created.append(SECRETS_DIR + "/")
        os.chmod(secrets_dir, 0o700)
        prompt = KINDS["prompt"].relpath(DEFAULT_CATEGORY, DEFAULT_PROMPT)
        if not home.locate(KINDS["prompt"], DEFAULT_PROMPT):
            home.write_text(prompt, DEFAULT_PROMPT_TEXT)
            created.append(prompt)
    return {"home": str(root), "created": created, "initialized": not existing}
