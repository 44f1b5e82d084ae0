"""Bot records: `bots/<name>.yaml`, each naming its adapter and the principal whose binding
handles its events. Reading them and checking them is the domain's; talking to the platform
behind a bot is `platform/`'s.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import FwError
from ..home import secrets
from ..home.kinds import check_name
from ..home.records import load_record
from ..home.store import Home
from ..suggest import did_you_mean, hint_with
from .identities import get_principal

BOTS = "bots"
BOT_SECRETS = "bot"  # secrets/bot/<name>.json: a onebot bot's access_token and X-Signature secret


def bot_rel(name: str) -> str:
    return f"{BOTS}/{name}.yaml"


def load_bot(home: Home, name: str) -> dict[str, Any]:
    """A bot's definition; `not_found`, or `corrupt` with the path and field."""
    check_name(name, "bot name")
    if not home.exists(bot_rel(name)):
        suggestion = did_you_mean(name, bot_names(home))
        raise FwError("not_found", f"no bot named {name!r}",
                      hint_with(suggestion, "see them with `fw bot list`, or `fw bot add --help` to add one"), **suggestion)
    return load_record(home, "bot", name, bot_rel(name))


def find_bot(home: Home, name: str) -> dict[str, Any] | None:
    """A bot's definition, or None when it was removed."""
    try:
        return load_bot(home, name)
    except FwError as exc:
        if exc.code == "not_found":
            return None
        raise


def bot_names(home: Home) -> list[str]:
    try:
        files = os.listdir(home.path(BOTS))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(f[:-5] for f in files if f.endswith(".yaml") and not f.startswith("."))



def check_bots(home: Home) -> list[dict[str, Any]]:
    """`fw home check`: each bot file parses, names a principal that exists and, for a onebot
    bot, can be reached (a url, or an access token for the reverse WebSocket)."""
    problems = []
    for name in bot_names(home):
        try:
            bot = load_bot(home, name)
        except FwError as exc:
            problems.append({"code": "corrupt", "message": exc.message, "path": bot_rel(name)})
            continue
        try:
            missing = get_principal(home, bot["principal"]) is None
        except FwError:
            missing = False  # a damaged principal file is reported on its own
        if missing:
            problems.append({"code": "dangling", "path": bot_rel(name), "message": f"bot {name!r} names principal {bot['principal']!r}, which does not exist",
                             "reference": f"principal/{bot['principal']}"})
        if bot["adapter"] == "onebot" and not bot.get("url") and not _stored_token(home, name):
            problems.append({"code": "unreachable", "path": bot_rel(name),
                             "message": f"onebot bot {name!r} has neither a url nor an access token, so nothing can reach it",
                             "hint": f"give it a url (edit {bot_rel(name)}), or remove it and add it again with --access-token-stdin"})
    return problems


def _stored_token(home: Home, name: str) -> bool:
    try:
        return bool(secrets.load(home, BOT_SECRETS, name).get("access_token"))
    except FwError:
        return True  # a damaged secret file is reported on its own
