"""`fw dispatch --processes N`: a dispatch run by several processes, so that more than one core
starts and ends runs. Each process claims the principals of its own share (a principal's work
stays in one process), the first starts and waits for the others and adds their counts to its
summary; stopped, every process ends its runs; killed, it takes the others with it; one of
them gone, the first takes its share over. Driven through the installed `fw`."""

import json
import os
import signal
import subprocess
import time
import zlib

import pytest
from conftest import fw_bin, fwj, processes_with, snapshot, wait_until_gone
from fakes.chat_server import ChatServer
from test_dispatcher_recovery import wait_for
from test_sessions import post

from framework_cli.engine.shares import RUNS_PER_PROCESS, default_processes, shares_of
from framework_cli.home.store import Home
from framework_cli.state.store import StateStore

pytestmark = pytest.mark.engines

NAMES = [f"p{i}" for i in range(8)]


def share_of(name, count=2):
    return zlib.crc32(name.encode()) % count


def setup_home(base_url, names=NAMES, busy=0):
    """One agent, bound to each principal, each in a session of its own with alice; one message
    each, and `busy` more to p0."""
    fwj("resource", "write", "provider", "p", "--create", "--data", json.dumps({"base_url": base_url, "api_key_env": "LLM_KEY"}))
    fwj("resource", "write", "model", "m", "--create", "--data", json.dumps({"provider": "p", "model_id": "m-1"}))
    fwj("agent", "create", "a", "--model", "m")
    fwj("principal", "create", "alice", "--kind", "user")
    for name in names:
        fwj("principal", "create", name, "--kind", "agent")
        fwj("binding", "set", name, "--agent", "a")
        fwj("session", "create", f"s-{name}", "--member", "alice", "--member", name)
        post(f"s-{name}", "alice", f"@{name} hello")
    for n in range(busy):
        post(f"s-{names[0]}", "alice", f"@{names[0]} more {n}")
    assert {share_of(n) for n in names} == {0, 1}, "the names fall in both shares"


def rows(home, sql):
    with StateStore.open(Home(home)) as store:
        return store.all(sql)


def dispatch(home, *args, **popen):
    env = {**os.environ, "FW_HOME": str(home), "LLM_KEY": "k"}
    return subprocess.Popen([fw_bin(), "dispatch", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_two_processes_share_the_work_answer_each_turn_once_and_keep_a_principals_order(home):
    with ChatServer([{"echo": "re: ", "sleep": 0.3}], repeat_last=True) as server:
        setup_home(server.base_url, busy=3)
        proc = dispatch(home, "--once", "--processes", "2", "--json")
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["turns"] == {"run": 11, "answered": 11, "failed": 0, "cancelled": 0}  # the other process's counts added
    turns = rows(home, "SELECT principal, owner, status, started_at, ended_at FROM turns ORDER BY id")
    assert all(t["status"] == "done" for t in turns)
    owners = {share_of(t["principal"]): set() for t in turns}
    for t in turns:
        owners[share_of(t["principal"])].add(t["owner"])
    assert len(owners[0]) == 1 and len(owners[1]) == 1 and owners[0] != owners[1]  # each share in one process
    assert len(server.requests) == 11  # none asked twice
    for name in NAMES[1:]:
        assert [m["text"] for m in fwj("message", "list", f"s-{name}")["messages"]] == [f"@{name} hello", f"re: alice: @{name} hello"]
    busy = [m["text"] for m in fwj("message", "list", "s-p0")["messages"] if m["author"] == "p0"]
    assert busy == ["re: alice: @p0 hello", *(f"re: alice: @p0 more {n}" for n in range(3))]  # in order
    spans = [(t["started_at"], t["ended_at"]) for t in turns if t["principal"] == "p0"]
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))  # one at a time
    assert rows(home, "SELECT * FROM dispatchers") == []
    assert wait_until_gone(f"--part 1/2/{proc.pid}") == []


def test_stopped_every_process_ends_its_runs_and_puts_nothing_off(home):
    with ChatServer([{"content": "late", "sleep": 60}], repeat_last=True) as server:
        setup_home(server.base_url)
        proc = dispatch(home, "--processes", "2")
        try:
            assert wait_for(lambda: len(server.requests) == len(NAMES)), "not every run asked its model"
            helper = processes_with(f"--part 1/2/{proc.pid}")
            assert len(helper) == 1
            proc.send_signal(signal.SIGTERM)  # to the first process only: it stops the others
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 130, err
    assert "serving" in err and "up to 256 turns or tasks at once" in err  # the whole dispatch's bound
    assert wait_until_gone(f"--part 1/2/{proc.pid}") == []
    turns = rows(home, "SELECT principal, status, error FROM turns")
    assert {t["status"] for t in turns} == {"cancelled"} and len(turns) == len(NAMES)
    assert all(r["status"] == "ended" for r in fwj("run", "list")["runs"])
    assert rows(home, "SELECT * FROM dispatchers") == []


def test_stopped_with_nothing_in_flight_every_process_ends_with_its_summary(home):
    """Told to stop once each, the others end with their summaries, and the dispatch exits 0
    (a second SIGTERM would have interrupted one as it printed its summary: exit 130)."""
    fwj("session", "list")
    for _ in range(2):
        proc = dispatch(home, "--processes", "2", "--json")
        try:
            assert wait_for(lambda: len(rows(home, "SELECT id FROM dispatchers")) == 2), "the processes never served"
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        assert json.loads(out)["turns"]["run"] == 0 and "ended with exit code" not in err
        assert wait_until_gone(f"--part 1/2/{proc.pid}") == []


def test_killed_the_first_process_takes_the_others_with_it(home, monkeypatch):
    script = [{"content": "late", "sleep": 60}] * len(NAMES) + [{"echo": "re: "}]
    with ChatServer(script, repeat_last=True) as server:
        setup_home(server.base_url)
        proc = dispatch(home, "--processes", "2")
        try:
            assert wait_for(lambda: len(server.requests) == len(NAMES)), "not every run asked its model"
            assert processes_with(f"--part 1/2/{proc.pid}")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        assert wait_until_gone(f"--part 1/2/{proc.pid}") == []  # told by its death signal: it ended its runs and went
        helper_turns = [t for t in rows(home, "SELECT principal, status FROM turns") if share_of(t["principal"]) == 1]
        assert helper_turns and {t["status"] for t in helper_turns} == {"cancelled"}
        monkeypatch.setenv("LLM_KEY", "k")
        summary = fwj("dispatch", "--once")  # the first process's work: taken back at once (its process is gone)
    assert summary["turns"]["answered"] == len(NAMES) - len(helper_turns)
    assert {t["status"] for t in rows(home, "SELECT status FROM turns")} == {"done", "cancelled"}
    assert all(r["status"] == "ended" for r in fwj("run", "list")["runs"])


def test_a_process_that_dies_leaves_its_share_to_the_first(home):
    script = [{"echo": "re: ", "sleep": 2}] * len(NAMES) + [{"echo": "re: "}]
    with ChatServer(script, repeat_last=True) as server:
        setup_home(server.base_url)
        proc = dispatch(home, "--once", "--processes", "2", "--json")
        try:
            assert wait_for(lambda: len(server.requests) == len(NAMES)), "not every run asked its model"
            helper = processes_with(f"--part 1/2/{proc.pid}")
            assert len(helper) == 1
            os.kill(int(helper[0].split()[0]), signal.SIGKILL)
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    turns = rows(home, "SELECT principal, status FROM turns")
    assert {t["status"] for t in turns} == {"done"}  # the dead one's running turns taken back, run again
    for name in NAMES:
        answers = [m for m in fwj("message", "list", f"s-{name}")["messages"] if m["author"] == name]
        assert [m["text"] for m in answers] == [f"re: alice: @{name} hello"]  # each answered once
    assert json.loads(out)["turns"]["answered"] == len(NAMES)  # the dead one printed nothing: the first ran them all
    assert "fw dispatch: process 2 of 2 of this dispatch ended with exit code -9" in err  # and it says so
    assert rows(home, "SELECT * FROM dispatchers") == []


def test_a_process_starts_its_own_work_while_the_oldest_is_the_others(home):
    """The oldest work all in the other process's share, that one busy: this one's own is
    started at once all the same, not after the other's."""
    theirs = [n for n in (f"q{i}" for i in range(40)) if share_of(n) == 1][:4]
    mine = [n for n in (f"q{i}" for i in range(40)) if share_of(n) == 0][:4]
    with ChatServer([{"echo": "re: ", "sleep": 0.5}], repeat_last=True) as server:
        setup_home(server.base_url, names=theirs + mine)  # the other share's messages posted first
        proc = dispatch(home, "--once", "--processes", "2", "--concurrency", "2", "--json")
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    turns = rows(home, "SELECT principal, started_at, ended_at FROM turns")
    first_of_mine = min(t["started_at"] for t in turns if t["principal"] in mine)
    first_of_theirs_ended = min(t["ended_at"] for t in turns if t["principal"] in theirs)
    assert first_of_mine < first_of_theirs_ended  # the two shares ran side by side from the start
    assert json.loads(out)["turns"]["answered"] == 8


def test_ctrl_c_as_it_starts_stops_every_process_without_a_traceback(home):
    with ChatServer([{"content": "late", "sleep": 60}], repeat_last=True) as server:
        setup_home(server.base_url)
        for delay in (0.15, 0.4, 1.5):
            proc = dispatch(home, "--processes", "2", start_new_session=True)
            time.sleep(delay)
            os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the whole foreground group
            out, err = proc.communicate(timeout=60)
            assert "Traceback" not in err and "Traceback" not in out, (delay, err)
            assert proc.returncode in (0, 130), (delay, proc.returncode, err)
            assert wait_until_gone(f"--part 1/2/{proc.pid}") == []
    assert all(r["status"] == "ended" for r in fwj("run", "list")["runs"])


def test_the_other_processes_never_run_a_framework_cli_folder_of_the_current_one(home, tmp_path):
    planted = tmp_path / "here" / "framework_cli"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text("")
    (planted / "__main__.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
    with ChatServer([{"echo": "re: ", "sleep": 0.2}], repeat_last=True) as server:
        setup_home(server.base_url)
        proc = dispatch(home, "--once", "--processes", "2", "--json", cwd=str(tmp_path / "here"))
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert not (tmp_path / "ran").exists()
    assert json.loads(out)["turns"]["answered"] == len(NAMES) and "ended with exit code" not in err


def test_a_bad_number_of_processes_is_refused_and_changes_nothing(home):
    fwj("session", "list")
    before = snapshot(home)
    for args in (["--processes", "0"], ["--processes", "3", "--concurrency", "2"], ["--processes", "65", "--concurrency", "1000"]):
        doc = fwj("dispatch", "--once", *args, code=4)
        assert doc["error"]["code"] == "invalid" and doc["error"]["field"] == "processes", args
        assert "--processes" in doc["error"]["hint"]
    assert fwj("dispatch", "--once", "--part", "1/1/1", code=2)["error"]["code"] == "usage"
    by_hand = fwj("dispatch", "--once", "--part", "1/2/1", code=2)["error"]  # not started by process 1
    assert "did not start this one" in by_hand["message"] and "leave --part out" in by_hand["hint"]
    assert fwj("dispatch", "--once", "--part-progress", code=2)["error"]["code"] == "usage"
    assert snapshot(home) == before
    proc = dispatch(home, "--once", "--processes", "2", "--concurrency", "600", "--timeout", "2h", "--json")
    out, _ = proc.communicate(timeout=60)  # the other was started, and stopped
    error = json.loads(out)["error"]
    assert proc.returncode == 4 and error["code"] == "invalid" and "3600" in error["message"]
    assert processes_with(f"--part 1/2/{proc.pid}") == [] and snapshot(home) == before


def test_by_default_one_process_for_every_256_in_flight_up_to_the_cores():
    cores = len(os.sched_getaffinity(0))
    assert default_processes(256) == 1 and default_processes(RUNS_PER_PROCESS - 1) == 1
    assert default_processes(1000) == min(cores, 3)
    assert shares_of(1000, 3) == [334, 333, 333] and sum(shares_of(7, 2)) == 7
