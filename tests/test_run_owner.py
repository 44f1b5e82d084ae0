"""A run whose driver is killed dies with it (CONTRACT section 11; issue 27 item 10): the owner
process is recorded, and the next fw process that touches the run, or `fw run list`, ends it as
`abandoned`, so its gateway token and every call are refused at once, not when its lease
runs out. A run made for a runner started some other way (`fw run start`) has no owner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import httpx
from conftest import fw, fw_bin, fwj, make_basics, run_record_text, write_run_record
from fakes.chat_server import ChatServer

RUNNER = """
import os, sys, time
import pytest

pytestmark = pytest.mark.engines
open(sys.argv[1], "w").write(os.environ["FW_GATEWAY_TOKEN"])
time.sleep(300)
"""


def active_runs():
    return [r for r in fwj("run", "list")["runs"] if r["status"] == "active"]


def wait_for(condition, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_a_killed_agent_run_ends_its_run_as_abandoned(home):
    with ChatServer([{"content": "late", "sleep": 60}]) as chat:
        make_basics()
        fwj("resource", "write", "provider", "p1", "--data", json.dumps({"base_url": chat.base_url}))
        proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", "--message", "hi", "--json"], env={**os.environ, "FW_HOME": str(home)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        (run,) = wait_for(active_runs)
        wait_for(lambda: chat.requests)
        record = fwj("run", "show", run["run_id"])
        assert record["owner"]["process"].startswith(f"{proc.pid}:") and record["status"] == "active"
        assert fw("tool", "call", "--run", run["run_id"], "framework_session_list").exit_code != 0  # not granted, but the run lives
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        listed = {r["run_id"]: r for r in fwj("run", "list")["runs"]}
        assert listed[run["run_id"]]["status"] == "ended"
        shown = fwj("run", "show", run["run_id"])
        assert shown["end_reason"] == "abandoned" and shown["ended_at"]
        assert listed[run["run_id"]]["outcome"] == "abandoned"


def test_a_runs_outcome_says_what_came_of_its_work_in_the_list_and_the_record(home):
    """Answered, failed (with the code and the redacted message), interrupted: the record keeps
    what its runner said, and `fw run list` shows it in a word."""
    with ChatServer([{"content": "fine"}, {"status": 400, "body": "bad request"}, {"content": "late", "sleep": 60}]) as chat:
        make_basics()
        fwj("resource", "write", "provider", "p1", "--data", json.dumps({"base_url": chat.base_url}))
        done = fwj("agent", "run", "a1", "--message", "one")
        failed = fw("agent", "run", "a1", "--message", "two", "--json")
        assert failed.exit_code == 7
        proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", "--message", "three"], env={**os.environ, "FW_HOME": str(home)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for(lambda: len(chat.requests) == 3)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        assert proc.returncode == 130
    outcomes = {r["run_id"]: r["outcome"] for r in fwj("run", "list")["runs"]}  # ids of one second are in no order
    assert outcomes.pop(done["run_id"]) == "completed" and outcomes.pop(failed.json["error"]["run_id"]) == "failed (unavailable)"
    assert list(outcomes.values()) == ["interrupted"]
    assert fwj("run", "show", done["run_id"])["outcome"] == {"status": "completed"}
    error = fwj("run", "show", failed.json["error"]["run_id"])["outcome"]["error"]
    assert error["code"] == "unavailable" and "answered 400" in error["message"]
    listed = fw("run", "list").stdout
    assert listed.splitlines()[0].split()[5] == "outcome" and "failed (unavailable)" in listed
    assert "outcome: failed (unavailable: " in fw("run", "show", failed.json["error"]["run_id"]).stdout
    fwj("principal", "create", "alice", "--kind", "user")  # a dispatcher stopped while its turn's run waits
    fwj("principal", "create", "bot", "--kind", "agent")
    fwj("binding", "set", "bot", "--agent", "a1")
    fwj("session", "create", "s1", "--member", "alice", "--member", "bot")
    with ChatServer([{"content": "late", "sleep": 60}]) as slow:
        fwj("resource", "write", "provider", "p1", "--data", json.dumps({"base_url": slow.base_url}))
        fwj("message", "post", "s1", "--as", "alice", "@bot hi")
        serving = subprocess.Popen([fw_bin(), "dispatch"], env={**os.environ, "FW_HOME": str(home)},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for(lambda: slow.requests)
        serving.send_signal(signal.SIGINT)
        serving.communicate(timeout=30)
        assert serving.returncode == 130
    (turn,) = fwj("turn", "list")["turns"]
    assert turn["status"] == "cancelled" and fwj("run", "show", turn["run_id"])["outcome"] == {"status": "interrupted"}
    started = fwj("run", "start", "--agent", "a1")  # no runner of fw's: nothing to say
    fwj("run", "end", started["run_id"])
    assert [r["outcome"] for r in fwj("run", "list")["runs"] if r["run_id"] == started["run_id"]] == [None]


def test_a_killed_owner_s_gateway_token_is_refused_at_once(home, tmp_path):
    make_basics()
    token_file = tmp_path / "token"
    data = {"type": "external", "command": [sys.executable, "-c", RUNNER, str(token_file)],
            "capabilities": {"tool_calling": True}, "permissions": {"tools": ["detail", "call"]}}
    fwj("resource", "write", "harness", "ext", "--create", "--data", json.dumps(data))
    fwj("agent", "edit", "a1", "--harness", "ext", "--builtin-tool", "resource_management")
    proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", "--message", "hi"], env={**os.environ, "FW_HOME": str(home)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    token = wait_for(lambda: token_file.exists() and token_file.read_text())
    (run,) = active_runs()
    gateway = subprocess.Popen([fw_bin(), "mcp", "serve", "--http", "--listen", "127.0.0.1:0"], env={**os.environ, "FW_HOME": str(home)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = gateway.stdout.readline().split()[-1]
        hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        assert httpx.post(url, json=hello, headers=headers, timeout=10).status_code == 200  # alive: its token works
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        refused = httpx.post(url, json=hello, headers=headers, timeout=10)
        assert refused.status_code == 401, refused.text  # at once, not when the lease runs out
        assert "abandoned" in refused.json()["error"]["message"]
    finally:
        gateway.terminate()
        gateway.communicate(timeout=30)
    assert fwj("run", "show", run["run_id"])["end_reason"] == "abandoned"
    assert "fwgt_" not in json.dumps(fwj("run", "show", run["run_id"]))


def test_a_run_started_for_a_runner_elsewhere_has_no_owner_and_lives_by_its_lease(home):
    make_basics()
    started = fwj("run", "start", "--agent", "a1", "--lease", "600")
    record = fwj("run", "show", started["run_id"])
    assert "owner" not in record and record["status"] == "active"
    assert fwj("tool", "list", "--run", started["run_id"])["tools"] is not None  # the process that started it has gone: it lives on
    assert active_runs()[0]["run_id"] == started["run_id"]


def test_an_owner_on_another_host_is_judged_by_its_heartbeat(home):
    make_basics()
    started = fwj("run", "start", "--agent", "a1")
    record = json.loads(run_record_text(home, started["run_id"]))
    fresh = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    record["owner"] = {"host": "another-host/boot/ns", "process": "4242:1", "heartbeat_at": fresh}
    write_run_record(home, started["run_id"], json.dumps(record))
    assert fwj("run", "show", started["run_id"])["status"] == "active"  # its heartbeat is fresh: alive
    record["owner"]["heartbeat_at"] = "2020-01-01T00:00:00.000Z"
    write_run_record(home, started["run_id"], json.dumps(record))
    r = fw("tool", "list", "--run", started["run_id"], "--json")
    assert r.exit_code == 5 and r.json["error"]["code"] == "run_ended" and r.json["error"]["end_reason"] == "abandoned", r
    assert "`fw run start --agent a1`" in r.json["error"]["hint"], r  # the run's own agent: the hint works as pasted


def test_an_owned_runs_heartbeat_is_written_only_once_it_is_twenty_seconds_old(home):
    """Its start is its first beat: hundreds of short runs at once are never rewritten for their
    heartbeat; a long one is renewed once its beat is OWNER_BEAT_SECONDS old, well inside the 60 s
    after which another host takes it for abandoned."""
    from framework_cli.domain.run_records import (
        ABANDONED_SECONDS,
        BEAT_LOOK_SECONDS,
        BEATS,
        OWNER_BEAT_SECONDS,
        _OwnerBeats,
        renew_heartbeat,
    )
    from framework_cli.home.store import Home
    from framework_cli.liveness import HOST, me

    assert OWNER_BEAT_SECONDS + BEAT_LOOK_SECONDS < ABANDONED_SECONDS / 2
    make_basics()
    started = fwj("run", "start", "--agent", "a1")
    record = json.loads(run_record_text(home, started["run_id"]))
    record["owner"] = {"host": HOST, "process": me(), "heartbeat_at": "2026-01-01T00:00:00.000Z"}
    write_run_record(home, started["run_id"], json.dumps(record))
    beats = _OwnerBeats()
    now = time.monotonic()
    beats.own(Home(home), started["run_id"], datetime.now(timezone.utc))
    assert beats.due(now + OWNER_BEAT_SECONDS - 1) == []  # just started: its start was its beat
    assert beats.due(now + OWNER_BEAT_SECONDS + 1) == [(started["run_id"], Home(home).root)]
    # a record that waited 15 s for its lock after its start: its beat is 15 s old already
    beats.own(Home(home), started["run_id"], datetime.now(timezone.utc) - timedelta(seconds=15))
    assert beats.due(time.monotonic() + OWNER_BEAT_SECONDS - 14) == [(started["run_id"], Home(home).root)]
    renew_heartbeat(Home(home), started["run_id"])
    assert fwj("run", "show", started["run_id"])["owner"]["heartbeat_at"] > "2026-01-01T00:00:00.000Z"
    beats.disown(started["run_id"])
    assert beats.due(now + 10 * OWNER_BEAT_SECONDS) == []
    # a run whose lease ran out can act no more: not beaten for, and no longer followed
    record = json.loads(run_record_text(home, started["run_id"]))
    record["lease_expires_at"] = "2026-01-01T00:00:00.000Z"
    write_run_record(home, started["run_id"], json.dumps(record))
    BEATS.own(Home(home), started["run_id"], datetime.now(timezone.utc))
    renew_heartbeat(Home(home), started["run_id"])
    assert json.loads(run_record_text(home, started["run_id"])) == record  # not rewritten
    assert started["run_id"] not in [run_id for run_id, _ in BEATS.due(time.monotonic() + 10 * OWNER_BEAT_SECONDS)]
