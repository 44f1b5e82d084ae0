"""A dispatcher that dies holds nothing for long (CONTRACT section 7): its turns and tasks are
taken back by any other dispatcher, starting or serving, and run again (or failed with the
reason once they have been claimed too often); its run is ended; nothing is answered twice."""

import json
import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone

import pytest
from conftest import fw, fw_bin, fwj
from fakes.chat_server import ChatServer
from test_sessions import messages, post, setup

from framework_cli.home.store import Home
from framework_cli.state.store import StateStore

pytestmark = pytest.mark.engines


def stamp(seconds_ago):
    moment = datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def state(home, sql, params=()):
    with StateStore.open(Home(home)) as store, store.transaction():
        store.execute(sql, params)


def rows(home, sql, params=()):
    with StateStore.open(Home(home)) as store:
        return store.all(sql, params)


def held_by(home, table, item_id, owner, heartbeat_ago, attempts=1, run_id=None):
    """As a dispatcher on another host left it: the item running under its claim."""
    fwj("session", "list")  # the state database exists and is migrated
    state(home, "DELETE FROM dispatchers WHERE id = ?", (owner,))
    state(home, "INSERT INTO dispatchers (id, host, process, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?)",
          (owner, "elsewhere/boot/pid", "4242:1", stamp(3600), stamp(heartbeat_ago)))
    state(home, f"UPDATE {table} SET status = 'running', owner = ?, attempts = ?, run_id = ?, started_at = ? WHERE id = ?",
          (owner, attempts, run_id, stamp(heartbeat_ago), item_id))


def turn_rows(home):
    return rows(home, "SELECT id, principal, status, run_id, error, attempts FROM turns ORDER BY id")


def wait_for(condition, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_a_dispatcher_killed_mid_turn_is_taken_back_by_the_next_one_and_its_run_ended(home):
    script = [{"sleep": 120, "content": "too late"}, {"content": "answered after all"}]
    with ChatServer(script) as server:
        setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        post("s1", "alice", "@ops hello")
        proc = subprocess.Popen([fw_bin(), "dispatch", "--workers", "1"], env={**os.environ, "FW_HOME": str(home)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_for(lambda: len(server.requests) == 1), "the first dispatcher never asked the model"
            first_run = turn_rows(home)[0]["run_id"]
            assert first_run and fwj("run", "show", first_run)["status"] == "active"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        summary = fwj("dispatch", "--once")  # at once: its process is gone from this host
    turn = turn_rows(home)[0]
    assert (turn["status"], turn["attempts"]) == ("done", 2), turn
    assert summary["turns"] == {"run": 1, "answered": 1, "failed": 0, "cancelled": 0}
    assert messages("s1") == [("alice", "@ops hello"), ("ops", "answered after all")]
    assert fwj("run", "show", first_run)["status"] == "ended" and fwj("run", "show", first_run)["end_reason"] == "abandoned"
    assert turn["run_id"] != first_run and fwj("run", "show", turn["run_id"])["status"] == "ended"
    outcomes = {r["run_id"]: r["outcome"] for r in fwj("run", "list")["runs"]}
    assert (outcomes[first_run], outcomes[turn["run_id"]]) == ("abandoned", "completed")
    assert rows(home, "SELECT * FROM dispatchers") == []


def test_a_stale_heartbeat_from_another_host_gives_its_work_back_and_a_fresh_one_keeps_it(home):
    with ChatServer([{"content": "done it"}], repeat_last=True) as server:
        setup(server.base_url, "ops", "helper")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops", "--member", "helper")
        post("s1", "alice", "@ops one")
        post("s1", "alice", "@helper two")
        post("s1", "alice", "@helper three")
        left_run = fwj("run", "start", "--principal", "ops")["run_id"]
        held_by(home, "turns", 1, "gone-host-1", heartbeat_ago=120, run_id=left_run)
        held_by(home, "turns", 2, "busy-host-1", heartbeat_ago=1)
        summary = fwj("dispatch", "--once")
    by_id = {t["id"]: t for t in turn_rows(home)}
    assert by_id[1]["status"] == "done" and fwj("run", "show", left_run)["status"] == "ended"
    assert by_id[2]["status"] == "running"  # its dispatcher lives (a fresh heartbeat): never run twice at once
    assert by_id[3]["status"] == "pending"  # one turn at a time per principal, across dispatchers
    assert summary["turns"]["answered"] == 1 and len(server.requests) == 1
    assert [r["id"] for r in rows(home, "SELECT id FROM dispatchers")] == ["busy-host-1"]


def test_work_whose_dispatchers_died_three_times_is_failed_with_the_reason(home):
    with ChatServer([{"content": "fine"}], repeat_last=True) as server:
        setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        post("s1", "alice", "@ops poison")
        held_by(home, "turns", 1, "gone-host-2", heartbeat_ago=300, attempts=3)
        summary = fwj("dispatch", "--once")
    turn = turn_rows(home)[0]
    assert turn["status"] == "failed" and "3 times" in turn["error"], turn
    assert summary["turns"]["run"] == 0 and server.requests == []
    shown = fwj("session", "show", "s1")["session"]["turns"][0]
    assert shown["status"] == "failed" and "dispatcher stopped" in shown["error"]


def test_a_task_of_a_dead_dispatcher_is_run_again_and_done(home):
    with ChatServer([{"content": "the result"}], repeat_last=True) as server:
        setup(server.base_url, "child", builtin=("task_collaboration",))
        made = json.loads(fw("tool", "call", "--manager", "task_delegate", "--args",
                             json.dumps({"principal": "child", "instructions": "work"})).stdout)
        task_id = made["task"]["id"]
        left_run = fwj("run", "start", "--principal", "child")["run_id"]
        held_by(home, "tasks", task_id, "gone-host-3", heartbeat_ago=90, run_id=left_run)
        summary = fwj("dispatch", "--once")
    task = fwj("task", "show", str(task_id))["task"]
    assert (task["status"], task["result"]) == ("done", "the result"), task
    assert task["run_id"] != left_run and fwj("run", "show", left_run)["status"] == "ended"
    assert summary["tasks"]["done"] == 1
    late = fw("tool", "call", "--run", left_run, "framework_task_report", "--args",
              json.dumps({"task_id": task_id, "status": "failed", "result": "zombie"}))
    assert late.json["error"]["code"] == "run_ended"  # the dead dispatcher's run acts no more
    assert fwj("task", "show", str(task_id))["task"]["result"] == "the result"


def test_a_serving_dispatcher_takes_back_a_dead_ones_work_within_a_minute(home):
    with ChatServer([{"content": "picked up"}], repeat_last=True) as server:
        setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        proc = subprocess.Popen([fw_bin(), "dispatch", "--workers", "1"], env={**os.environ, "FW_HOME": str(home)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_for(lambda: rows(home, "SELECT id FROM dispatchers") != [], 30)
            with StateStore.open(Home(home)) as store, store.transaction():  # posted and claimed by a dispatcher that then died
                store.execute("INSERT INTO dispatchers VALUES ('gone-host-4', 'elsewhere', '1:1', ?, ?)", (stamp(600), stamp(120)))
                store.execute("INSERT INTO messages (session, author, text, mentions, hop, created_at) "
                              "VALUES ('s1', 'alice', '@ops still there?', '[\"ops\"]', 0, ?)", (stamp(100),))
                store.execute("INSERT INTO turns (session, message_id, principal, status, hop, created_at, started_at, owner, attempts) "
                              "VALUES ('s1', 1, 'ops', 'running', 0, ?, ?, 'gone-host-4', 1)", (stamp(100), stamp(100)))
            assert wait_for(lambda: len(messages("s1")) == 2, 60), turn_rows(home)
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
    assert messages("s1")[-1] == ("ops", "picked up")
    assert proc.returncode == 0 and "Traceback" not in err
    assert rows(home, "SELECT id FROM dispatchers") == []
