"""Bots: `bots/<name>.yaml`, each naming its adapter and the principal whose binding handles
its events. Not a resource kind: a bot is the home's door to a chat platform, configured by
the operator (`fw bot ...`), never by an agent's tools.
"""

from __future__ import annotations

from typing import Any

from ..domain.bots import BOT_SECRETS, bot_names, bot_rel, load_bot
from ..domain.catalogue import APIS
from ..domain.identities import get_principal, principal_names
from ..errors import FwError
from ..home import secrets
from ..home.kinds import check_name
from ..home.records import edit_record, validate_record
from ..home.store import Home
from ..suggest import did_you_mean, hint_with
from .adapters import ADAPTER_MODULES, adapter_for, onebot_state, supported_apis


def adapter_of(home: Home, name: str, bot: dict[str, Any]) -> Any:

    return adapter_for(home, name, bot)


def bot_self_id(home: Home, name: str, bot: dict[str, Any]) -> str | None:
    """The bot's own id on its platform, where fw has learnt it (a onebot bot: from its
    reports, its socket's handshake or `get_login_info`)."""
    if bot.get("adapter") != "onebot":
        return None
    from .adapters.onebot_state import status_view  # lazy: start-up speed (only onebot bots pay for it)

    return status_view(home, name)["self_id"]


def capabilities(home: Home, name: str, bot: dict[str, Any]) -> dict[str, Any]:
    """What the bot offers now: its adapter's APIs less those it withholds."""

    adapter = adapter_of(home, name, bot)
    return {"bot": name, "adapter": bot["adapter"], "supported_apis": supported_apis(adapter, bot)}


def bot_show(home: Home, name: str) -> dict[str, Any]:
    """A bot's definition, the APIs it offers its runs and whether it is online; a onebot bot
    also its own id and when its last event and heartbeat came (`fw bot serve` keeps them)."""
    bot = load_bot(home, name)
    offered = capabilities(home, name, bot)["supported_apis"]
    adapter = adapter_of(home, name, bot)
    doc = {"name": name, **bot, "supported_apis": offered, "online": adapter.online()}
    if bot["adapter"] == "onebot":
        from .adapters.onebot_state import status_view  # lazy: start-up speed (only onebot bots pay for it)

        stored = secrets.load(home, BOT_SECRETS, name)
        doc.update(connection=adapter.connection, access_token_set=bool(stored.get("access_token")),
                   secret_set=bool(stored.get("secret")), **status_view(home, name))
        if not doc["online"]:
            doc["note"] = adapter.offline_hint
    return doc


def bot_list(home: Home) -> dict[str, Any]:
    """Every bot as `bot_show` shows it. A bot reached over HTTP without heartbeats is asked
    whether it is online (up to STATUS_TIMEOUT when it does not answer): the bots are asked
    at once, so a list waits for the slowest, not for the sum."""
    names = bot_names(home)
    if len(names) < 2:
        return {"bots": [_listed(home.root, name) for name in names]}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(LIST_THREADS, len(names)), thread_name_prefix="fw-bot-list") as pool:
        return {"bots": list(pool.map(lambda name: _listed(home.root, name), names))}


LIST_THREADS = 16  # bots asked at once by a listing


def _listed(root: Any, name: str) -> dict[str, Any]:
    home = Home(root)  # each thread its own: a Home's index is not shared between threads
    try:
        return bot_show(home, name)
    except FwError as exc:
        return {"name": name, "error": {"code": exc.code, "message": exc.message, "path": bot_rel(name)}}


def _check_principal(home: Home, principal: str) -> None:

    check_name(principal, "principal name")
    who = get_principal(home, principal)
    if who is None:
        suggestion = did_you_mean(principal, principal_names(home))
        raise FwError("invalid", f"no principal named {principal!r}",
                      hint_with(suggestion, f"create it first: `fw principal create {principal} --kind agent`"), field="principal", **suggestion)
    if who["kind"] != "agent":
        raise FwError("invalid", f"principal {principal!r} is a {who['kind']}, not an agent identity",
                      "a bot's events are handled by a principal of kind agent", field="principal")


def bot_add(home: Home, name: str, adapter: str, principal: str, *, url: str | None = None,
            description: str | None = None, access_token: str | None = None, secret: str | None = None) -> dict[str, Any]:
    """Add a bot. Everything is checked before anything is written: a refused add leaves
    no file behind."""

    check_name(name, "bot name")
    if adapter not in ADAPTER_MODULES:
        raise FwError("invalid", f"unknown adapter {adapter!r}", f"use one of: {', '.join(ADAPTER_MODULES)}", field="adapter")
    if adapter == "local" and (url is not None or access_token is not None or secret is not None):
        raise FwError("invalid", "a url, an access token and a secret are for onebot bots only", "a local bot needs none of them",
                      field="url")
    if adapter == "onebot":
        _check_reachable(url, access_token)
        _check_secret(secret, name)
    stored = {k: v for k, v in (("access_token", access_token), ("secret", secret)) if v}
    secrets.check_new(stored)
    _check_principal(home, principal)
    data: dict[str, Any] = {"adapter": adapter, "principal": principal}
    if url is not None:
        data["url"] = url
    if description:
        data["description"] = description
    with home.locked():
        if home.exists(bot_rel(name)):
            raise FwError("exists", f"bot {name!r} already exists", f"change it with `fw bot set {name}`, or remove it first")
        if home.exists(bot_rel(name)):
            raise FwError("exists", f"bot {name!r} already exists", f"change it with `fw bot set {name}`, or remove it first")
        validate_record(home, "bot", data)  # the url too, before anything is written
        if stored:
            secrets.save(home, BOT_SECRETS, name, stored)
        edit_record(home, "bot", bot_rel(name), data)
    if home.is_dry_run:  # state.db is not the home's files: a dry run leaves it alone too
        return {"name": name, **data, "created": True}
    if adapter == "local":
        adapter_of(home, name, data).set_online(True)  # a new bot starts online
    return {**bot_show(home, name), "created": True}


def _check_reachable(url: str | None, access_token: str | None) -> None:
    """A onebot bot is reached over HTTP (its url), or over the reverse WebSocket, whose
    handshake carries its access token: it needs one or the other."""
    if access_token is not None and not access_token:
        raise FwError("invalid", "the access token read from standard input is empty",
                      "pipe the token in: `printf %s \"$TOKEN\" | fw bot add ... --access-token-stdin`", field="access_token")
    if url is None and not access_token:
        raise FwError("invalid", "a onebot bot needs a --url (its HTTP API) or an access token (for the reverse WebSocket)",
                      "give --url http://HOST:PORT of the implementation's HTTP server, or --access-token-stdin "
                      "with the token its WebSocket client will send", field="url")


def local_platform(home: Home, name: str) -> Any:
    """The platform of a local bot (`fw bot local ...`)."""
    bot = load_bot(home, name)
    if bot["adapter"] != "local":
        raise FwError("invalid", f"bot {name!r} uses the {bot['adapter']} adapter, not local", "`fw bot local` works on local bots")
    return adapter_of(home, name, bot)


def bot_remove(home: Home, name: str) -> dict[str, Any]:
    """Remove the bot's file. Its runs can no longer act through it (`adapter_offline`); a
    local bot's platform and log stay in state.db, for a bot added again under its name."""
    with home.locked():
        bot = load_bot(home, name)
        home.remove(bot_rel(name))
        secrets.remove(home, BOT_SECRETS, name)  # a bot added again under its name is given its token again
        if bot["adapter"] == "onebot":
            onebot_state.forget_bot(home, name)
    return {"bot": name, "removed": True}


def check_apis(apis: list[str]) -> list[str]:
    wanted = [api for api in apis if api != ""]  # '' alone clears the list
    seen: set[str] = set()
    for api in wanted:
        if api not in APIS:
            raise FwError("invalid", f"unknown API {api!r}", f"use one of: {', '.join(APIS)}", field="unsupported_apis")
        if api in seen:
            raise FwError("invalid", f"API {api!r} is given twice", "name each API once", field="unsupported_apis")
        seen.add(api)
    return wanted


def _check_secret(secret: str | None, name: str) -> None:
    if secret is not None and not secret:
        raise FwError("invalid", "the secret read from standard input is empty",
                      f"pipe the secret in: `printf %s \"$SECRET\" | fw bot set {name} --secret-stdin`", field="secret")


def bot_set(home: Home, name: str, *, unsupported_apis: list[str] | None = None, online: bool | None = None,
            secret: str | None = None, url: str | None = None, access_token: str | None = None) -> dict[str, Any]:
    """Withhold APIs from the bot's runs (the list replaces the old one), take a local bot
    online or offline, set a onebot bot's url (`""` removes it: the reverse WebSocket alone),
    access token or X-Signature secret. All apply at once, to runs already started too; every
    change is checked before any is written."""

    wanted = check_apis(unsupported_apis) if unsupported_apis is not None else None
    with home.locked():
        bot = load_bot(home, name)
        if online is not None and bot["adapter"] != "local":
            raise FwError("invalid", "--online and --offline are for local bots", "a onebot bot is online when its platform answers")
        onebot_only = [flag for flag, value in (("--secret-stdin", secret), ("--url", url), ("--access-token-stdin", access_token))
                       if value is not None]
        if onebot_only and bot["adapter"] != "onebot":
            raise FwError("invalid", f"{onebot_only[0]} is for onebot bots", "a local bot takes no url, token or secret")
        _check_secret(secret, name)
        if access_token is not None and not access_token:
            raise FwError("invalid", "the access token read from standard input is empty",
                          f"pipe the token in: `printf %s \"$TOKEN\" | fw bot set {name} --access-token-stdin`", field="access_token")
        stored = secrets.load(home, BOT_SECRETS, name)
        values = {**stored, **({"secret": secret} if secret else {}), **({"access_token": access_token} if access_token else {})}
        secrets.check_new(values, stored)
        patch: dict[str, Any] = {}
        if wanted is not None:
            patch["unsupported_apis"] = wanted or None
        if url is not None:
            patch["url"] = url or None
            if not url and not values.get("access_token"):
                raise FwError("invalid", "without a url, a onebot bot is reached only through its reverse WebSocket, which needs an access token",
                              f"give it one in the same command: `... | fw bot set {name} --url '' --access-token-stdin`", field="url")
        if patch:
            validate_record(home, "bot", {**bot, **patch, **({"url": None} if url == "" else {})})
        if values != stored:
            secrets.save(home, BOT_SECRETS, name, values)
        if patch:
            edit_record(home, "bot", bot_rel(name), patch)
        if url is not None and (url or None) != bot.get("url") and not home.is_dry_run:
            onebot_state.forget_self_id(home, name)  # another implementation, maybe another account
        if online is not None and not home.is_dry_run:
            adapter_of(home, name, bot).set_online(online)
    shown = bot_show(home, name)
    if online is not None and home.is_dry_run and shown["online"] != online:  # kept in state.db, not in a file
        state = "online" if online else "offline"
        shown = {**shown, "online": online, "state_changes": [f"bot {name} would go {state} (its state is kept in state.db)"]}
    return shown
