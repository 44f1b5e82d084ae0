"""The runtime state store on its own: migrations, transactions, savepoints, many writers."""

import sqlite3
import subprocess
import sys

import pytest

from framework_cli.errors import FwError
from framework_cli.state.migrations import MIGRATIONS
from framework_cli.state.store import StateStore


def test_a_new_database_gets_every_migration_once(tmp_path):
    with StateStore(tmp_path / "state.db") as store:
        assert store.schema_version() == len(MIGRATIONS)
        names = [r["name"] for r in store.all("SELECT name FROM migrations ORDER BY name")]
        assert names == sorted(n for n, _ in MIGRATIONS)
        assert store.one("PRAGMA journal_mode")["journal_mode"] == "wal"
    with StateStore(tmp_path / "state.db") as again:  # opening again applies nothing twice
        assert again.one("SELECT count(*) AS n FROM migrations")["n"] == len(MIGRATIONS)


def test_an_older_database_is_brought_up_to_date(tmp_path, monkeypatch):
    import framework_cli.state.migrations as migrations

    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:0])
    StateStore(tmp_path / "state.db").close()
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS)
    with StateStore(tmp_path / "state.db") as store:
        assert store.schema_version() == len(MIGRATIONS)
        store.all("SELECT * FROM sessions")


def test_a_database_from_a_newer_fw_is_refused(tmp_path):
    with StateStore(tmp_path / "state.db") as store:  # as a newer fw leaves it: its migration, and its count
        store.insert("migrations", {"name": "9999_from_the_future", "applied_at": "x"})
        store.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(FwError) as caught:
        StateStore(tmp_path / "state.db")
    assert caught.value.code == "corrupt"


def transactions_and_savepoints(store, duplicate_key_error):
    """A failed transaction changes nothing; a savepoint that fails fails alone."""
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.insert("memory", {"principal": "p", "key": "a", "value": "1", "updated_at": "t"})
            raise RuntimeError("boom")
    assert store.all("SELECT * FROM memory") == []
    with store.transaction():
        store.insert("memory", {"principal": "p", "key": "b", "value": "1", "updated_at": "t"})
        with pytest.raises(duplicate_key_error):
            with store.transaction():
                store.insert("memory", {"principal": "p", "key": "c", "value": "1", "updated_at": "t"})
                store.insert("memory", {"principal": "p", "key": "b", "value": "2", "updated_at": "t"})
    assert [r["key"] for r in store.all("SELECT key FROM memory")] == ["b"]


def test_a_failed_transaction_changes_nothing_and_a_savepoint_fails_alone(tmp_path):
    with StateStore(tmp_path / "state.db") as store:
        transactions_and_savepoints(store, sqlite3.IntegrityError)


WRITER = """
import sys
from framework_cli.state.store import StateStore
store = StateStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    with store.transaction():
        n = store.one("SELECT count(*) AS n FROM memory WHERE principal = ?", (sys.argv[2],))["n"]
        store.insert("memory", {"principal": sys.argv[2], "key": f"k{n:04d}", "value": str(i), "updated_at": "t"})
"""


def test_many_processes_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "state.db"
    StateStore(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), "p", "60"], stderr=subprocess.PIPE, text=True) for _ in range(6)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
    with StateStore(path) as store:
        keys = [r["key"] for r in store.all("SELECT key FROM memory ORDER BY key")]
    assert keys == [f"k{i:04d}" for i in range(360)]  # read-then-write under one lock: no lost update


# -- the same store on PostgreSQL --------------------------------------------------------------------
@pytest.fixture
def pg_url():
    from conftest import pg_cluster

    cluster = pg_cluster()
    name = cluster.new_database()
    yield cluster.url(name)
    from framework_cli.state.postgres import _MIGRATED, close_pools

    close_pools()
    _MIGRATED.clear()
    cluster.drop_database(name)


def test_on_postgresql_a_new_database_gets_every_migration_once_and_a_newer_one_is_refused(pg_url):
    from framework_cli.state import postgres

    with postgres.PgStore(pg_url) as store:
        assert store.schema_version() == len(MIGRATIONS)
        store.migrate()  # again: nothing twice
        assert store.one("SELECT count(*) AS n FROM migrations")["n"] == len(MIGRATIONS)
        store.insert("migrations", {"name": "9999_from_the_future", "applied_at": "x"})
    postgres._MIGRATED.clear()
    with pytest.raises(FwError) as caught:
        postgres.PgStore(pg_url)
    assert caught.value.code == "corrupt" and caught.value.extra["reason"] == "state_store"


def test_on_postgresql_a_failed_transaction_changes_nothing_and_a_savepoint_fails_alone(pg_url):
    import psycopg

    from framework_cli.state.postgres import PgStore

    with PgStore(pg_url) as store:
        transactions_and_savepoints(store, psycopg.errors.UniqueViolation)


PG_WRITER = """
import sys
from framework_cli.state.postgres import PgStore
store = PgStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    with store.transaction():
        n = store.one("SELECT count(*) AS n FROM memory WHERE principal = ?", (sys.argv[2],))["n"]
        store.insert("memory", {"principal": sys.argv[2], "key": f"k{n:04d}", "value": str(i), "updated_at": "t"})
"""


def test_on_postgresql_many_processes_writing_at_once_lose_nothing(pg_url):
    from framework_cli.state.postgres import PgStore

    PgStore(pg_url).close()
    procs = [subprocess.Popen([sys.executable, "-c", PG_WRITER, pg_url, "p", "60"], stderr=subprocess.PIPE, text=True) for _ in range(6)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
    with PgStore(pg_url) as store:
        keys = [r["key"] for r in store.all("SELECT key FROM memory ORDER BY key")]
    assert keys == [f"k{i:04d}" for i in range(360)]  # read-then-write under the write lock: no lost update
