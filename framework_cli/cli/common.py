"""Pieces every command module shares."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from ..home.kinds import KIND_NAMES
from ..home.store import Home

KindName = Enum("KindName", {k: k for k in KIND_NAMES}, type=str)  # type: ignore[misc]

KindArg = Annotated[
    KindName,
    typer.Argument(help="provider, model, prompt, skill, mcp, harness or agent.", show_default=False),
]


def home_of(ctx: typer.Context) -> Home:
    from ..home import secrets

    root = ctx.find_root()
    home = Home.open((root.obj or {}).get("home"))
    secrets.remember_home(home)  # every output of this command is redacted of every stored secret
    return home
