"""Damage inside state.db is `corrupt` (exit 4) naming the file and how to recover, from any
statement, not only when the database is opened (CONTRACT section 7)."""

import sqlite3

import pytest
from conftest import fw, fwj
from fakes.chat_server import ChatServer
from test_tasks_exec import bound_agent, provider_and_model


def overwrite_pages_of(home, table):
    """Overwrite the root page of `table` (its data, for a small table) with junk."""
    db = sqlite3.connect(home / "state.db")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    with open(home / "state.db", "r+b") as handle:
        handle.seek((root - 1) * size)
        handle.write(b"\xa5" * size)


@pytest.fixture
def session_with_a_pending_turn(home):
    with ChatServer([]) as server:
        provider_and_model("x", server.base_url)
    bound_agent("ops", "m-x")
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    for n in range(3):
        fwj("message", "post", "s1", "--as", "alice", f"@ops message {n}")
    return home


@pytest.mark.parametrize("table, command", [
    ("messages", ["message", "list", "s1"]),
    ("messages", ["message", "post", "s1", "--as", "alice", "one more"]),
    ("turns", ["dispatch", "--once"]),
])
def test_damaged_pages_are_corrupt_naming_the_file_and_the_way_out(session_with_a_pending_turn, table, command):
    home = session_with_a_pending_turn
    overwrite_pages_of(home, table)
    r = fw(*command, "--json")
    assert r.exit_code == 4, r
    error = r.json["error"]
    assert error["code"] == "corrupt" and error["path"] == "state.db"
    assert str(home / "state.db") in error["message"] and "bug" not in error["hint"]
    assert "move state.db aside" in error["hint"]
    human = fw(*command)
    assert human.exit_code == 4 and "state.db" in human.stderr and "Traceback" not in human.output
