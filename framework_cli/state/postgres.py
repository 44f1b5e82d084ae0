"""The runtime state store on PostgreSQL: the same class of store as SQLite's (state/store.py),
for homes served from several hosts that share one database.

psycopg 3 with a pool a process (`FW_STATE_POOL`, default 10 connections); a store borrows one
connection for as long as it is open. The SQL the rest of fw writes is SQLite's and standard
(`?` parameters, `ON CONFLICT`, `||`); this class turns `?` into psycopg's `%s`, a serial key's
`INSERT` into one that returns it, booleans into 0 and 1, and the schema's types into
PostgreSQL's. A write transaction takes one advisory lock for the whole database, so that writers
are one at a time as they are with SQLite (every rule fw keeps with a read and a write in one
transaction holds unchanged); work is claimed with `FOR UPDATE SKIP LOCKED` (`skip_locked`).
A database that cannot be reached is `unavailable` with `reason: state_store`, its URL shown
without its password.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import FwError
from .clock import now_iso
from .location import pool_size, shown
from .migrations import MIGRATIONS

WRITE_LOCK = 0x66770001  # the advisory lock every write transaction takes: writers one at a time
CONNECT_SECONDS = 10.0
_POOLS: dict[str, Any] = {}
_POOLS_GUARD = threading.Lock()
_MIGRATED: set[str] = set()  # databases this process found up to date
SERIAL = {}  # table -> its serial key column, from the schema
for _name, _statements in MIGRATIONS:
    for _statement in _statements:
        _found = re.match(r"\s*CREATE TABLE (\w+) \(\s*(\w+) INTEGER PRIMARY KEY AUTOINCREMENT", _statement)
        if _found:
            SERIAL[_found.group(1)] = _found.group(2)


def ddl(statement: str) -> str:
    """A statement of the schema in PostgreSQL's types."""
    statement = statement.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    statement = re.sub(r"\bINTEGER\b", "BIGINT", statement)
    return re.sub(r"\bREAL\b", "DOUBLE PRECISION", statement)


_QUESTION = re.compile(r"'(?:[^']|'')*'|\?")  # a quoted string (left alone), or a parameter


@functools.lru_cache(maxsize=1024)
def _sql(sql: str) -> str:
    """SQLite's `?` parameters as psycopg's `%s` (not inside quoted strings), `%` escaped."""
    return _QUESTION.sub(lambda m: "%s" if m.group(0) == "?" else m.group(0), sql.replace("%", "%%"))


def _params(params: Sequence[Any]) -> list[Any]:
    return [int(p) if isinstance(p, bool) else p for p in params]


def unreachable(url: str, exc: BaseException) -> FwError:
    detail = " ".join(str(exc).split())[:300].replace(url, shown(url))
    instead = "unset FW_STATE" if os.environ.get("FW_STATE", "").strip() else "`fw state use --sqlite`"
    return FwError("unavailable", f"the state store {shown(url)} cannot be reached: {detail or type(exc).__name__}",
                   f"check that PostgreSQL runs there and takes fw's connections (`fw state check`), or {instead} "
                   "to use the home's state.db", reason="state_store")


def pool_for(url: str) -> Any:
    with _POOLS_GUARD:
        pool = _POOLS.get(url)
        if pool is None:
            import logging

            from psycopg.rows import dict_row

            logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)  # a failure is fw's one error, not the pool's log lines
            import psycopg

            try:  # one connection first: a database that cannot be reached says why at once, not after the pool's retries
                psycopg.connect(url, connect_timeout=int(CONNECT_SECONDS)).close()
            except psycopg.Error as exc:
                raise unreachable(url, exc) from None
            from psycopg_pool import ConnectionPool

            def configure(conn: Any) -> None:
                conn.execute("SET lock_timeout = '60s'")
                conn.execute("SET client_min_messages = warning")

            pool = ConnectionPool(url, min_size=1, max_size=pool_size(), open=False, configure=configure,
                                  kwargs={"autocommit": True, "row_factory": dict_row, "connect_timeout": int(CONNECT_SECONDS)},
                                  name="fw-state")
            try:
                pool.open(wait=True, timeout=CONNECT_SECONDS)
            except Exception as exc:
                pool.close()
                raise unreachable(url, exc) from None
            _POOLS[url] = pool
        return pool


def close_pools() -> None:
    with _POOLS_GUARD:
        while _POOLS:
            _POOLS.popitem()[1].close()


class _Result:
    def __init__(self, rowcount: int, lastrowid: int | None = None) -> None:
        self.rowcount, self.lastrowid = rowcount, lastrowid


class PgStore:
    engine = "postgresql"
    skip_locked = " FOR UPDATE SKIP LOCKED"

    def __init__(self, url: str, busy_seconds: float | None = None) -> None:
        self.url = url
        self.path = shown(url)
        self.busy_seconds = busy_seconds
        self._depth = 0
        self._lock = threading.RLock()
        self._kept = False
        self._broken = False
        self._file = None
        self._pool = pool_for(url)
        try:
            self.conn = self._pool.getconn(timeout=CONNECT_SECONDS if busy_seconds is None else busy_seconds)
        except Exception as exc:
            raise unreachable(url, exc) from None
        if url not in _MIGRATED:
            self.migrate()
            _MIGRATED.add(url)

    def close(self) -> None:
        conn, self.conn = getattr(self, "conn", None), None
        if conn is not None:
            self._pool.putconn(conn)

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @contextmanager
    def _statement(self) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.errors.DiskFull:
            self._broken = True
            raise FwError("unavailable", f"the state store {self.path} cannot grow: its disk is full; nothing was changed",
                          "free some space on the database server, then run the command again", reason="disk_full") from None
        except psycopg.errors.LockNotAvailable:
            raise FwError("unavailable", f"the state store {self.path} is locked by another writer",
                          "try again once the other fw command has finished", reason="state_busy") from None
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self._broken = True
            raise unreachable(self.url, exc) from None

    # -- transactions ----------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[PgStore]:
        """All or nothing, one writer at a time (the database's advisory lock, held to the
        end); an inner one is a savepoint."""
        with self._lock:
            outermost = self._depth == 0
            self._depth += 1
            savepoint = f"sp{self._depth}"
            try:
                with self._statement():
                    if outermost:
                        self.conn.execute("BEGIN")
                        self.conn.execute(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                    else:
                        self.conn.execute(f"SAVEPOINT {savepoint}")
                try:
                    yield self
                except BaseException:
                    self._roll_back(savepoint, outermost)
                    raise
                else:
                    with self._statement():
                        self.conn.execute("COMMIT" if outermost else f"RELEASE SAVEPOINT {savepoint}")
            finally:
                self._depth -= 1

    def _roll_back(self, savepoint: str, outermost: bool) -> None:
        try:
            if outermost:
                self.conn.execute("ROLLBACK")
            else:
                self.conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                self.conn.execute(f"RELEASE SAVEPOINT {savepoint}")
        except Exception:  # a connection that broke has rolled back already
            self._broken = True

    # -- queries ---------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._lock, self._statement():
            cursor = self.conn.execute(_sql(sql), _params(params))
            return _Result(cursor.rowcount)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock, self._statement():
            return list(self.conn.execute(_sql(sql), _params(params)).fetchall())

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        with self._lock, self._statement():
            return self.conn.execute(_sql(sql), _params(params)).fetchone()  # type: ignore[no-any-return]

    def rows(self, sql: str, params: Sequence[Any] = (), batch: int = 500) -> Iterator[dict[str, Any]]:
        """The rows of a query as they come from the server, a batch at a time."""
        with self._lock, self._statement():
            cursor = self.conn.cursor()
            cursor.execute(_sql(sql), _params(params))
        while True:
            with self._lock, self._statement():
                fetched = cursor.fetchmany(batch)
            if not fetched:
                return
            yield from fetched

    def insert(self, table: str, values: dict[str, Any]) -> int:
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        key = SERIAL.get(table)
        sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})" + (f" RETURNING {key}" if key else "")
        with self._lock, self._statement():
            cursor = self.conn.execute(_sql(sql), _params(list(values.values())))
            row = cursor.fetchone() if key else None
        return int(row[key]) if row else 0

    # -- notices between processes -----------------------------------------------------------
    def notify(self, channel: str, payload: str = "") -> None:
        """Wake the processes that listen on `channel` (sent when the transaction commits)."""
        self.execute("SELECT pg_notify(?, ?)", (channel, payload))

    # -- the schema ------------------------------------------------------------------------
    def migrate(self) -> None:
        """Apply every migration this database lacks, in order, each with its record, one
        process at a time (the write lock)."""
        if self._applied() == {name for name, _ in MIGRATIONS}:
            return
        with self.transaction():
            self.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
            applied = self._applied()
            unknown = applied - {name for name, _ in MIGRATIONS}
            if unknown:
                raise FwError("corrupt", f"the state store {self.path} was written by a newer fw (migrations {', '.join(sorted(unknown))})",
                              "use that version of fw with this database", reason="state_store")
            for name, statements in MIGRATIONS:
                if name in applied:
                    continue
                for statement in statements:
                    self.execute(ddl(statement))
                self.insert("migrations", {"name": name, "applied_at": now_iso()})

    def _applied(self) -> set[str]:
        if self.one("SELECT to_regclass('migrations') AS found")["found"] is None:  # type: ignore[index]
            return set()
        return {row["name"] for row in self.all("SELECT name FROM migrations")}

    def schema_version(self) -> int:
        return len(self._applied())


class PgListener:
    """A connection of its own that LISTENs on one channel: `wait(seconds)` returns True as soon
    as a notice comes, False when the time passes without one."""

    def __init__(self, url: str, channel: str) -> None:
        import psycopg

        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=int(CONNECT_SECONDS))
            self._conn.execute(f"LISTEN {channel}")
        except psycopg.Error as exc:
            raise unreachable(url, exc) from None
        self.url = url

    def wait(self, seconds: float) -> bool:
        import psycopg

        try:
            return any(True for _ in self._conn.notifies(timeout=seconds, stop_after=1))
        except psycopg.Error as exc:
            raise unreachable(self.url, exc) from None

    def close(self) -> None:
        self._conn.close()
