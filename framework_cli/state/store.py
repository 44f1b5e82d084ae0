"""The runtime state store: the only code that opens `state.db`.

Sessions, members, messages, turns, tasks, memory and the local chat platform live in one
SQLite database at the home's root, beside the configuration files. Every change is one
transaction (`BEGIN IMMEDIATE`, so a writer takes the write lock before it reads and never has
to give up half-way); nested transactions are savepoints. Many `fw` processes may write at
once: a writer waits for the lock (the busy timeout) instead of failing with "database is
locked". The schema is versioned by named migrations, each applied in the transaction that
records it, so an older database is brought up to date when it is opened.

The SQL is kept to standard forms where one exists, so that another store (PostgreSQL) could
take this one's place when a deployment outgrows one machine.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import FwError
from .clock import now_iso  # noqa: F401  (the store's clock: `from ..state.store import now_iso`)
from .location import state_url
from .migrations import MIGRATIONS

STATE_FILE = "state.db"
BUSY_TIMEOUT_MS = 60_000  # how long a writer waits for another process's transaction


_WRITERS: dict[str, threading.RLock] = {}  # a database's path -> the lock its writers in this process take
_WRITERS_GUARD = threading.Lock()


_KEPT = threading.local()  # in a thread that keeps its stores open: its connection to each database


def keep_stores_open() -> None:
    """In the calling thread (a serving engine's worker, which does store work all day),
    `StateStore.open` hands back the thread's own connection, kept open between uses: opening
    a connection (and checking its migrations) costs more than most of what is done with it.
    A kept connection whose file was replaced or removed, or that met an error, is opened
    afresh."""
    _KEPT.stores = {}


def _writers(path: str) -> Any:
    with _WRITERS_GUARD:
        lock = _WRITERS.get(path)
        if lock is None:
            lock = _WRITERS[path] = threading.RLock()
        return lock


FULL_BELOW_BYTES = 256 * 1024  # free space under this on the home's disk: an I/O error of SQLite is the full disk


def disk_is_full(path: str) -> bool:
    """Whether the file system that holds `path` has (next to) no room left: SQLite says only
    "disk I/O error" when it cannot grow its shared-memory file, which is no damage."""
    try:
        found = os.statvfs(os.path.dirname(os.path.abspath(path)) or ".")
    except OSError:
        return False
    return found.f_bavail * found.f_frsize < FULL_BELOW_BYTES or (found.f_files > 0 and found.f_favail == 0)


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Poller:
    """What listens with SQLite, which has no notices: `wait(seconds)` sleeps a short while (at
    most `every`) and says False, so its caller looks at the store again."""

    def __init__(self, every: float = 0.1) -> None:
        self.every = every

    def wait(self, seconds: float) -> bool:
        time.sleep(min(seconds, self.every))
        return False

    def close(self) -> None:
        pass


def listener(home: Any, channel: str) -> Any:
    """Something to `wait(seconds)` on for notices on `channel` from other processes (a
    PostgreSQL LISTEN; with SQLite, a short sleep), then `close()`."""
    url = state_url(home.root)
    if url is None:
        return Poller()
    from .postgres import PgListener  # lazy: start-up speed (psycopg)

    return PgListener(url, channel)


def state_exists(home: Any) -> bool:
    """Whether the home has runtime state to read: its state.db, or a PostgreSQL database (a
    read of one that has none yet finds it empty). A read that finds none creates nothing."""
    return state_url(home.root) is not None or (Path(home.root) / STATE_FILE).exists()


class StateStore:
    """One connection to `state.db`, migrated when opened. Not shared between threads:
    each thread (a dispatcher's worker) opens its own."""

    engine = "sqlite"
    skip_locked = ""  # how a query locks the row it reads, skipping one locked: SQLite's writers are one at a time

    def __init__(self, path: Path | str, busy_seconds: float | None = None) -> None:
        self.path = str(path)
        self.busy_seconds = BUSY_TIMEOUT_MS / 1000 if busy_seconds is None else busy_seconds
        try:
            self.db = sqlite3.connect(self.path, timeout=self.busy_seconds, isolation_level=None, check_same_thread=False)
            self.db.row_factory = sqlite3.Row
            self.db.execute(f"PRAGMA busy_timeout = {int(self.busy_seconds * 1000)}")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA foreign_keys = ON")
            self.db.execute("PRAGMA synchronous = NORMAL")  # WAL keeps every commit whole
        except sqlite3.DatabaseError as exc:
            error = self._damaged(exc, "cannot be opened")
            if error.extra.get("reason") == "disk_full":
                self._leave_no_trace()
            raise error from None
        self._depth = 0
        self._lock = threading.RLock()
        self._kept = False  # a thread's kept connection: `close` leaves it open
        self._broken = False  # met an error: not kept
        self.migrate()
        self._file = _file_id(self.path)

    def _leave_no_trace(self) -> None:
        """An open that failed for want of room leaves SQLite's side files half made (an empty
        write-ahead log, a shared-memory file shorter than the 32 KiB any open connection has):
        no connection uses them, so they go, and state.db stands as it was."""
        try:
            self.db.close()
        except (sqlite3.Error, AttributeError):
            pass
        wal, shm = f"{self.path}-wal", f"{self.path}-shm"
        try:
            if os.path.getsize(wal) == 0 and os.path.getsize(shm) < 32768:
                os.unlink(shm)
                os.unlink(wal)
        except OSError:
            pass

    def _damaged(self, exc: sqlite3.DatabaseError, what: str = "is damaged") -> FwError:
        """A database error as fw's: a busy database is `unavailable`; anything else it says
        (malformed pages, not a database, an I/O error) is damage, `corrupt` naming the file."""
        name = getattr(exc, "sqlite_errorname", "")
        if name in ("SQLITE_BUSY", "SQLITE_LOCKED"):
            return FwError("unavailable", f"{self.path} is locked by another process: {exc}",
                           "try again once the other fw command has finished", path=STATE_FILE, reason="state_busy")
        if name == "SQLITE_FULL" or "database or disk is full" in str(exc) or (name.startswith("SQLITE_IOERR") and disk_is_full(self.path)):
            return FwError("unavailable", f"{STATE_FILE} cannot grow: the disk (or the quota) that holds the home is full; "
                           "nothing was changed, and nothing is damaged", "free some space there, then run the command again",
                           path=STATE_FILE, reason="disk_full")
        return FwError("corrupt", f"{self.path} {what}: {exc}",
                       f"`fw home check` reports it; move {STATE_FILE} aside (or restore it from a backup) to start "
                       "again with an empty runtime state: sessions, messages, turns, tasks and memory", path=STATE_FILE)

    @contextmanager
    def _statement(self) -> Iterator[None]:
        """Every statement runs inside this, so damage found by any of them is `corrupt`."""
        try:
            yield
        except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
            raise  # fw's own mistake, not the file's
        except sqlite3.DatabaseError as exc:
            self._broken = True
            raise self._damaged(exc) from None

    @classmethod
    def open(cls, home: Any, busy_seconds: float | None = None) -> StateStore:
        """The home's store; `busy_seconds` bounds how long a writer waits for another's
        transaction (a network door waits little, and answers 503 instead). In a thread that
        keeps its stores open (`keep_stores_open`), the thread's own connection."""
        url = state_url(home.root)
        if url is not None:  # PostgreSQL: its pool keeps the connections
            from .postgres import PgStore  # lazy: start-up speed (psycopg)

            return PgStore(url, busy_seconds)
        path = Path(home.root) / STATE_FILE
        kept = getattr(_KEPT, "stores", None)
        if kept is None or busy_seconds is not None:
            return cls(path, busy_seconds)
        store = kept.get(str(path))
        if store is not None and store._depth > 0:
            return cls(path)  # in a transaction further up this thread: a connection of its own, as ever
        if store is not None and not store._broken and store._file == _file_id(str(path)):
            return store
        if store is not None:  # the file was replaced or removed, or the connection met an error
            store._kept = False
            store.close()
        store = cls(path)
        store._kept = True
        kept[str(path)] = store
        return store

    def close(self) -> None:
        if self._kept and not self._broken:
            return  # the thread's kept connection: open for its next use
        self.db.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- transactions ----------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[StateStore]:
        """All or nothing. The outermost takes the write lock at once (waiting for other
        writers); an inner one is a savepoint that can fail alone. Writers in this process
        wait for each other on a lock of the process first: SQLite's own wait for a busy
        database sleeps for milliseconds at a time, which made a dispatcher's workers slower
        together than one alone. The two waits share `busy_seconds`: a writer that waited for
        the process's lock waits for SQLite only what is left."""
        with self._lock:
            outermost, held, shortened = self._depth == 0, False, False
            try:
                # bounded as SQLite's own wait is: a writer stuck holding it fails the others, never hangs them
                asked = time.monotonic()
                if outermost and not (held := _writers(self.path).acquire(timeout=self.busy_seconds)):
                    raise FwError("unavailable", f"{self.path} is locked by another writer of this process",
                                  "try again once it has finished", path=STATE_FILE, reason="state_busy")
                waited = time.monotonic() - asked
                if outermost and waited > 0.005:  # one budget for both waits: SQLite's gets what is left of it
                    self.db.execute(f"PRAGMA busy_timeout = {max(1, int((self.busy_seconds - waited) * 1000))}")
                    shortened = True
                self._depth += 1
                savepoint = f"sp{self._depth}"
                try:
                    with self._statement():
                        self.db.execute("BEGIN IMMEDIATE" if outermost else f"SAVEPOINT {savepoint}")
                except BaseException:
                    self._depth -= 1
                    raise
                try:
                    yield self
                except BaseException:
                    self._roll_back(savepoint)
                    raise
                else:
                    with self._statement():
                        self.db.execute("COMMIT" if outermost else f"RELEASE {savepoint}")
                finally:
                    self._depth -= 1
            finally:
                if shortened:
                    try:
                        self.db.execute(f"PRAGMA busy_timeout = {int(self.busy_seconds * 1000)}")
                    except sqlite3.Error:
                        pass  # a connection that failed is opened afresh
                if held:
                    _writers(self.path).release()

    def _roll_back(self, savepoint: str) -> None:
        """Undo the transaction (or the savepoint) that failed. A database too damaged to roll
        back has already rolled back: the error that is on its way says why."""
        try:
            if self._depth == 1:
                self.db.execute("ROLLBACK")
            else:
                self.db.execute(f"ROLLBACK TO {savepoint}")
                self.db.execute(f"RELEASE {savepoint}")
        except sqlite3.DatabaseError:
            pass

    def notify(self, channel: str, payload: str = "") -> None:
        """PostgreSQL wakes other processes at once; with SQLite they look again soon instead
        (`listener`), so there is nothing to send."""

    # -- queries ---------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """A statement that changes something (its cursor's `rowcount` and `lastrowid` are
        read); a query goes through `all` or `one`, which read its rows here too."""
        with self._lock, self._statement():
            return self.db.execute(sql, params)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock, self._statement():
            return [dict(row) for row in self.db.execute(sql, params).fetchall()]

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        with self._lock, self._statement():
            row = self.db.execute(sql, params).fetchone()
        return dict(row) if row is not None else None

    def rows(self, sql: str, params: Sequence[Any] = (), batch: int = 500) -> Iterator[dict[str, Any]]:
        """The rows of a query, fetched a batch at a time as the caller consumes them: a
        listing of any length holds one batch in memory. Damage found on the way is `corrupt`."""
        try:
            with self._lock:
                cursor = self.db.execute(sql, params)
            while True:
                with self._lock:
                    fetched = cursor.fetchmany(batch)
                if not fetched:
                    return
                for row in fetched:
                    yield dict(row)
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None

    def insert(self, table: str, values: dict[str, Any]) -> int:
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        cursor = self.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", list(values.values()))
        return int(cursor.lastrowid or 0)

    # -- the schema ------------------------------------------------------------------------
    def migrate(self) -> None:
        """Apply every migration this database lacks, in order, each with its record."""

        if self.one("PRAGMA user_version")["user_version"] == len(MIGRATIONS):  # type: ignore[index]
            return  # up to date (each migration run sets it): opening writes nothing
        if self._applied() == {name for name, _ in MIGRATIONS}:
            return
        with self.transaction():
            self.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
            applied = self._applied()
            known = [name for name, _ in MIGRATIONS]
            unknown = applied - set(known)
            if unknown:
                raise FwError(
                    "corrupt",
                    f"{STATE_FILE} was written by a newer fw (migrations {', '.join(sorted(unknown))})",
                    "use that version of fw with this home",
                    path=STATE_FILE,
                )
            for name, statements in MIGRATIONS:
                if name in applied:
                    continue
                for statement in statements:
                    self.execute(statement)
                self.insert("migrations", {"name": name, "applied_at": now_iso()})
            self.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")

    def _applied(self) -> set[str]:
        if self.one("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'migrations'") is None:
            return set()
        return {row["name"] for row in self.all("SELECT name FROM migrations")}

    @staticmethod
    def problem(path: Path | str) -> str | None:
        """What is wrong with a state database, read only, or None (`fw home check`)."""
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
            try:
                result = db.execute("PRAGMA quick_check").fetchone()[0]
            finally:
                db.close()
        except sqlite3.DatabaseError as exc:
            return str(exc)
        return None if result == "ok" else str(result)

    def schema_version(self) -> int:
        return int(self.one("PRAGMA user_version")["user_version"])  # type: ignore[index]
