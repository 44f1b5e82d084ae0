"""Where a home's runtime state lives: SQLite's `state.db` at its root (the default), or a
PostgreSQL database.

`FW_STATE=postgresql://...` wins; otherwise `fw state use` keeps the URL without its password in
`state.url` at the home's root (a plain file, safe to show and to copy to each host) and the
password in `secrets/state/url.json` (a secret file, as every other). A URL is shown only
without its password (`shown`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..errors import FwError

ENV = "FW_STATE"
POOL_ENV = "FW_STATE_POOL"
URL_FILE = "state.url"
RUNS_DIR = "runs"  # with SQLite: a run record a file (with PostgreSQL: the store's runs table)
AUDIT_FILE = "audit.jsonl"  # with SQLite: the audit log (with PostgreSQL: the store's audit table)
PASSWORD_FILE = "secrets/state/url.json"  # the secret store's layout: secrets/<kind>/<name>.json
SCHEMES = ("postgresql", "postgres")


def check_url(url: str) -> str:
    """A PostgreSQL URL as fw takes it; `invalid` otherwise (saying so without the password)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in SCHEMES or not (parts.hostname or "host=" in parts.query or parts.path.strip("/")):
        raise FwError("invalid", f"{shown(url)!r} is not a PostgreSQL URL",
                      "give postgresql://USER:PASSWORD@HOST:PORT/DATABASE (or ?host=/path/of/the/socket)", field="url")
    return url.strip()


def password_of(url: str) -> str | None:
    parts = urlsplit(url)
    return unquote(parts.password) if parts.password else None


def without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[1]}"))


def with_password(url: str, password: str | None) -> str:
    if not password:
        return url
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)
    user = host[0] if len(host) == 2 else ""
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host[-1]}"))


def shown(url: str) -> str:
    """The URL as it may be printed: its password replaced."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


# What each home's state.url said when this process first looked (None: SQLite), by root. A
# run's start and end open the store half a dozen times; each would read the file again.
_READ: dict[str, str | None] = {}


def state_url(root: Path | str) -> str | None:
    """The PostgreSQL URL (password included) of the home at `root`, or None for SQLite.
    `FW_STATE` is looked at every time; `state.url` once a process (once a command, for a
    process that runs several): a serving process keeps the store it started with, and `fw
    state use` applies to the commands started after it (`forget_state_urls`)."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return check_url(env)
    key = os.fspath(root)
    if key in _READ:
        return _READ[key]
    url = _read_state_url(root)
    _READ[key] = url
    return url


def forget_state_urls() -> None:
    """Read every home's state.url again at its next use (a new command; a store just changed)."""
    _READ.clear()


def _read_state_url(root: Path | str) -> str | None:
    try:
        with open(os.path.join(root, URL_FILE), encoding="utf-8") as handle:
            url = handle.read().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FwError("unavailable", f"{URL_FILE} cannot be read: {exc.strerror}", "check the home's permissions",
                      reason="state_store") from None
    if not url:
        return None
    url = check_url(url)
    try:
        with open(os.path.join(root, PASSWORD_FILE), encoding="utf-8") as handle:
            password = json.load(handle).get("password")
    except FileNotFoundError:
        password = None
    except (OSError, ValueError, AttributeError):
        raise FwError("corrupt", f"{PASSWORD_FILE} is not a JSON object of secret values",
                      "store the URL again: `printf %s \"$URL\" | fw state use`", path=PASSWORD_FILE) from None
    return with_password(url, password if isinstance(password, str) else None)


def pool_size() -> int:
    raw = os.environ.get(POOL_ENV, "").strip()
    if not raw:
        return 10
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise FwError("invalid", f"{POOL_ENV} is a whole number from 1 to 1000, not {raw!r}", f"e.g. {POOL_ENV}=10", field=POOL_ENV)
    return int(raw)
