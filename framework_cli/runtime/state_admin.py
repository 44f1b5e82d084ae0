"""`fw state`: which store holds a home's runtime state, and moving it.

- `use`: put the runtime state in a PostgreSQL database (its URL read from standard input; the
  password kept in `secrets/`, the rest in `state.url`), or back in the home's state.db.
- `migrate`: bring the store's schema up to date (every open does it too; this says what it did).
- `check`: can it be reached, at which schema version, which lanes are held and by whom, and
  which serving processes have stopped beating.
- `copy --to URL|PATH`: copy everything of the store in use (with runs and the audit log) into an
  empty PostgreSQL database, or into a SQLite home's folder, and check the counts. It refuses
  while a process serves the source (its rows would change under the copy).
"""

from __future__ import annotations

import os
import re
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ..errors import FwError
from ..home import secrets
from ..home.store import Home
from ..liveness import machine_of
from ..state.location import (
    AUDIT_FILE,
    ENV,
    RUNS_DIR,
    URL_FILE,
    check_url,
    forget_state_urls,
    password_of,
    shown,
    state_url,
    without_password,
)
from ..state.migrations import MIGRATIONS
from ..state.store import STATE_FILE, StateStore
from . import lanes

STALE_SECONDS = 30.0  # a serving process whose heartbeat is older than this has stopped (engine's rule)
LINK_STALE_SECONDS = 60  # a bot's socket row not refreshed for this long was left by a process that died (the onebot adapter's rule)
TABLES = list(dict.fromkeys(re.findall(r"CREATE TABLE (\w+)", " ".join(s for _, stmts in MIGRATIONS for s in stmts))))
SERIAL_TABLES = {"messages": "id", "turns": "id", "tasks": "id", "local_messages": "seq", "local_actions": "seq",
                 "conversations": "id", "bot_events": "id", "audit": "seq"}
RUN_RECORD_RE = re.compile(r"run-[0-9]{8}T[0-9]{6}-[0-9a-f]{8}\.json")


def where(home: Home) -> dict[str, Any]:
    url = state_url(home.root)
    if url is None:
        return {"engine": "sqlite", "location": STATE_FILE}
    return {"engine": "postgresql", "location": shown(url), "from": ENV if os.environ.get(ENV, "").strip() else URL_FILE}


# -- use ------------------------------------------------------------------------------------------
def state_use(home: Home, url: str | None) -> dict[str, Any]:
    """Keep the runtime state in the database at `url` (checked by connecting, and migrated),
    or, with None, in the home's state.db again. Nothing moves: `fw state copy` does that."""
    if url is None:
        with home.locked():
            home.remove(URL_FILE)
            secrets.remove(home, "state", "url")
        forget_state_urls()
        return {"state": where(home), "next_step": None if not os.environ.get(ENV) else f"unset {ENV}: it overrides state.url"}
    url = check_url(url)
    password = password_of(url)
    if password:
        secrets.check_new({"password": password})
        secrets.remember(password)
    from ..state.postgres import PgStore  # lazy: start-up speed (psycopg)

    with PgStore(url) as store:  # reachable, and migrated, before anything is written
        version = store.schema_version()
    with home.locked():
        home.write_text(URL_FILE, without_password(url) + "\n")
        if password:
            secrets.save(home, "state", "url", {"password": password})
        else:
            secrets.remove(home, "state", "url")
    forget_state_urls()
    doc = {"state": {"engine": "postgresql", "location": shown(url), "from": URL_FILE}, "schema_version": version}
    if os.environ.get(ENV, "").strip():
        doc["next_step"] = f"{ENV} is set and wins over state.url: unset it to use what was just stored"
    elif (home.root / STATE_FILE).exists():
        doc["next_step"] = "the home's state.db stays where it was: `fw state copy --to -` (the URL on standard input) moves it"
    return doc


# -- migrate and check ---------------------------------------------------------------------------------
def state_migrate(home: Home) -> dict[str, Any]:
    with StateStore.open(home) as store:  # an open migrates
        applied = sorted(r["name"] for r in store.all("SELECT name FROM migrations"))
    return {"state": where(home), "schema_version": len(applied), "migrations": applied,
            "latest": MIGRATIONS[-1][0], "up_to_date": len(applied) == len(MIGRATIONS)}


def state_check(home: Home) -> dict[str, Any]:
    """Connectivity, schema version, lanes held, serving processes and stale ones."""
    stale_before = (datetime.now(timezone.utc) - timedelta(seconds=STALE_SECONDS)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    with StateStore.open(home) as store:
        version = len(store.all("SELECT name FROM migrations"))
        held = lanes.held_lanes(store)
        serving = store.all("SELECT id, host, heartbeat_at FROM dispatchers ORDER BY started_at")
        owners = store.all("SELECT o.bot, o.owner, o.epoch, MAX(l.seen_at) AS seen_at FROM onebot_owner o LEFT JOIN onebot_links l "
                           "ON l.bot = o.bot AND l.owner = o.owner GROUP BY o.bot, o.owner, o.epoch ORDER BY o.bot")
    stale = [s for s in serving if s["heartbeat_at"] < stale_before]
    problems = []
    if version < len(MIGRATIONS):
        problems.append({"code": "schema", "message": f"the schema is at {version} of {len(MIGRATIONS)} migrations; `fw state migrate`"})
    for s in stale:
        problems.append({"code": "stale_owner", "message": f"{s['id']} on {machine_of(s['host'])} has not beaten since {s['heartbeat_at']}: "
                         "its work is taken back by the next dispatcher or server that looks"})
    link_stale_before = (datetime.now(timezone.utc) - timedelta(seconds=LINK_STALE_SECONDS)).isoformat(timespec="milliseconds")
    for o in owners:
        if not o["seen_at"] or o["seen_at"] < link_stale_before.replace("+00:00", "Z"):
            problems.append({"code": "stale_owner", "message": f"bot {o['bot']}'s socket was held by {o['owner']}, not seen since "
                             f"{o['seen_at'] or 'it connected'}: the next fw bot serve its implementation connects to takes it over"})
    return {"state": where(home), "reachable": True, "schema_version": version, "latest": len(MIGRATIONS),
            "lanes_held": held, "serving": serving, "bot_owners": owners, "stale": [s["id"] for s in stale], "problems": problems}


# -- copy ---------------------------------------------------------------------------------------------
def state_copy(home: Home, to: str) -> dict[str, Any]:
    """Copy the store in use into an empty PostgreSQL database (`to` a URL) or a SQLite home's
    folder (`to` a path); counts printed and checked. Refused while the source is served."""
    source_url = state_url(home.root)
    to = to.strip()
    target_pg = to.startswith(("postgresql://", "postgres://"))
    if target_pg:
        to = check_url(to)
        if password_of(to):
            secrets.remember(password_of(to))
        if source_url is not None and without_password(source_url) == without_password(to):
            raise FwError("invalid", "the copy's target is the store in use", "give another database", field="to")
    else:
        target = Path(to).expanduser()
        if not target.is_dir():
            raise FwError("not_found", f"{to!r} is not a folder", "give a home's folder (the copy writes its state.db, runs/ and audit.jsonl)",
                          field="to")
        if source_url is None and target.resolve() == home.root.resolve():
            raise FwError("invalid", "the copy's target is the store in use", "give another folder", field="to")
    with StateStore.open(home) as source:
        _refuse_if_served(source)
        counts = {table: int(source.one(f"SELECT COUNT(*) AS n FROM {table}")["n"]) for table in TABLES}  # type: ignore[index]
        if source_url is None:  # SQLite: runs and the audit log are files
            outside = _outside_rows(home)
        else:
            outside = {"runs": list(source.rows("SELECT run_id, record FROM runs ORDER BY run_id")),
                       "audit": list(source.rows("SELECT line FROM audit ORDER BY seq"))}
        counts["runs"], counts["audit"] = len(outside["runs"]), len(outside["audit"])
        if target_pg:
            copied = _copy_to_pg(source, to, outside)
        else:
            copied = _copy_to_sqlite(source, Path(to).expanduser(), outside)
    mismatched = {t: (counts[t], copied.get(t, 0)) for t in TABLES if t != "migrations" and counts[t] != copied.get(t, 0)}
    if mismatched:
        raise FwError("internal", f"the copy's counts differ from the source's: {mismatched}", "the target is left as it is; look at it, "
                      "then drop it and copy again")
    return {"from": where(home), "to": shown(to) if target_pg else str(Path(to).expanduser()), "tables": copied,
            "runs": counts["runs"], "audit_lines": counts["audit"], "checked": True}


def _refuse_if_served(store: Any) -> None:
    stale_before = (datetime.now(timezone.utc) - timedelta(seconds=STALE_SECONDS)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    live = [r["id"] for r in store.all("SELECT id, heartbeat_at FROM dispatchers") if r["heartbeat_at"] >= stale_before]
    if live:
        raise FwError("conflict", f"the store is being served ({', '.join(live)}): a copy now would miss what they write",
                      "stop `fw dispatch` and `fw bot serve` on every host, then copy", serving=live)


def _outside_rows(home: Home) -> dict[str, list[dict[str, Any]]]:
    """With SQLite: the run records (runs/) and the audit lines (audit.jsonl), as rows of the
    store's runs and audit tables."""
    runs = []
    folder = home.path(RUNS_DIR)
    for name in sorted(os.listdir(folder)) if folder.is_dir() else []:
        if RUN_RECORD_RE.fullmatch(name):
            runs.append({"run_id": name[:-5], "record": (folder / name).read_text(encoding="utf-8")})
    audit_text = home.read_text(AUDIT_FILE) or ""
    return {"runs": runs, "audit": [{"line": line} for line in audit_text.splitlines() if line.strip()]}


def _copy_to_pg(source: Any, url: str, outside: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    from ..state.postgres import PgStore  # lazy: start-up speed (psycopg)

    copied: dict[str, int] = {}
    with PgStore(url) as target:
        used = [t for t in TABLES if t != "migrations" and target.one(f"SELECT 1 AS yes FROM {t} LIMIT 1")]
        if used:
            raise FwError("not_empty", f"the target database already holds runtime state ({', '.join(used)})",
                          "copy into an empty database (a new one: `createdb`), so that nothing is merged by mistake", tables=used)
        with target.transaction():
            for table in TABLES:
                if table == "migrations":
                    copied[table] = int(target.one("SELECT COUNT(*) AS n FROM migrations")["n"])  # type: ignore[index]
                    continue
                n = 0
                rows = outside[table] if table in outside else source.rows(f"SELECT * FROM {table}")
                for row in rows:
                    target.execute(_insert_sql(table, row), list(row.values()))
                    n += 1
                copied[table] = n
                key = SERIAL_TABLES.get(table)
                if key and n:
                    target.one(f"SELECT setval(pg_get_serial_sequence('{table}', '{key}'), (SELECT MAX({key}) FROM {table}))")
    return copied


def _copy_to_sqlite(source: Any, folder: Path, outside: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    path = folder / STATE_FILE
    if path.exists():
        db = sqlite3.connect(path)
        try:
            found = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            used = [t for t in TABLES if t in found and t != "migrations" and db.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone()]
        finally:
            db.close()
        if used:
            raise FwError("not_empty", f"{path} already holds runtime state ({', '.join(used)})",
                          "copy into a folder without a state.db, so that nothing is merged by mistake", tables=used)
    copied: dict[str, int] = {}
    runs_dir = folder / RUNS_DIR
    with StateStore(path) as target, target.transaction():
        for table in TABLES:
            if table == "migrations":
                copied[table] = int(target.one("SELECT COUNT(*) AS n FROM migrations")["n"])  # type: ignore[index]
                continue
            n = 0
            if table in outside:  # a SQLite home keeps them as files: written below
                continue
            for row in source.rows(f"SELECT * FROM {table}"):
                target.execute(_insert_sql(table, row), list(row.values()))
                n += 1
            copied[table] = n
    runs_dir.mkdir(exist_ok=True)
    for row in outside["runs"]:
        _write_whole(runs_dir / f"{row['run_id']}.json", row["record"])
    copied["runs"] = len(outside["runs"])
    if outside["audit"]:
        with open(folder / AUDIT_FILE, "a", encoding="utf-8") as handle:
            handle.write("".join(row["line"] + "\n" for row in outside["audit"]))
            handle.flush()
            os.fsync(handle.fileno())
    copied["audit"] = len(outside["audit"])
    return copied


def _write_whole(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _insert_sql(table: str, row: dict[str, Any]) -> str:
    return f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})"

