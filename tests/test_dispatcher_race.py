"""Dispatchers starting while another serves never fail each other's turns: a turn is answered
once, and its status tells the truth (issue 16, item 6), with real concurrent `fw dispatch`."""

import os
import signal
import subprocess
import time

import pytest
from conftest import fw_bin, fwj
from fakes.chat_server import ChatServer
from test_dispatcher_recovery import rows, wait_for
from test_sessions import messages, post, setup

pytestmark = pytest.mark.engines

AGENTS = tuple("abcdefgh")
TURNS = 100


def test_dispatchers_started_again_and_again_beside_a_serving_one_answer_every_turn_once(home):
    with ChatServer([{"content": "an answer", "sleep": 0.2}], repeat_last=True) as server:
        setup(server.base_url, *AGENTS)
        fwj("session", "create", "s1", "--member", "alice", *sum((["--member", a] for a in AGENTS), []))
        for i in range(300):  # a home with many people: posting an answer reads them all, which takes a while
            (home / "principals" / f"user{i}.yaml").write_text("kind: user\n")
        for i in range(TURNS):
            post("s1", "alice", f"@{AGENTS[i % len(AGENTS)]} question {i}")
        serving = subprocess.Popen([fw_bin(), "dispatch", "--workers", "4"], env={**os.environ, "FW_HOME": str(home)},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_for(lambda: len(server.requests) > 0, 60)
            launched = []
            for _ in range(12):  # each starts, looks for dead dispatchers' work, runs what it can claim, and exits
                launched.append(subprocess.Popen([fw_bin(), "dispatch", "--once", "--workers", "1", "--json"],
                                                 env={**os.environ, "FW_HOME": str(home)}, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True))
                time.sleep(0.7)
            starts = [(p.communicate(timeout=240), p.returncode) for p in launched]
            settled = "SELECT count(*) AS n FROM turns WHERE status IN ('pending', 'running')"
            assert wait_for(lambda: rows(home, settled)[0]["n"] == 0, 240), rows(home, "SELECT id, status FROM turns")
        finally:
            serving.send_signal(signal.SIGINT)
            _, err = serving.communicate(timeout=60)
    assert all(code == 0 for _, code in starts), [out for out, code in starts if code]
    assert "Traceback" not in err
    turns = rows(home, "SELECT id, status, run_id, error FROM turns ORDER BY id")
    assert [t["status"] for t in turns] == ["done"] * TURNS, [t for t in turns if t["status"] != "done"]
    answers = rows(home, "SELECT run_id FROM messages WHERE author != 'alice'")
    assert len(answers) == TURNS  # every turn answered ...
    assert sorted(a["run_id"] for a in answers) == sorted(t["run_id"] for t in turns)  # ... once, by the run its turn records
    assert len(server.requests) == TURNS  # and no turn was run twice


def test_once_runs_the_turn_that_work_ending_while_it_looks_adds(home, monkeypatch):
    """`fw dispatch --once` stops only when nothing is pending and nothing of its own was
    running when it last looked: an answer posted while it looks (its turn ended, a new one
    made) is run too, not left pending. The look is slowed here until the running work ends,
    the interleaving that left turns pending one time in ten under load."""
    import asyncio

    from framework_cli.engine.engine import Engine

    look = Engine._start_what_fits

    async def slow_look(self):
        running = list(self.running)  # what was running when this look began
        started = await look(self)
        if not started and running:
            await asyncio.wait(running, timeout=60)  # the work in progress ends (its answer posted) while this engine looks
        return started

    monkeypatch.setattr(Engine, "_start_what_fits", slow_look)
    # ping's answer takes longer than the dispatcher's poll, so it looks while ping's turn runs
    with ChatServer([{"content": "@pong over to you", "sleep": 0.6}, {"content": "thanks"}]) as server:
        setup(server.base_url, "ping", "pong")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ping", "--member", "pong")
        post("s1", "alice", "@ping hello")
        summary = fwj("dispatch", "--once", "--concurrency", "2")
    assert summary["turns"] == {"run": 2, "answered": 2, "failed": 0, "cancelled": 0}
    shown = fwj("session", "show", "s1")["session"]
    assert [(t["principal"], t["status"]) for t in shown["turns"]] == [("ping", "done"), ("pong", "done")]
    assert messages("s1") == [("alice", "@ping hello"), ("ping", "@pong over to you"), ("pong", "thanks")]
