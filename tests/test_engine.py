"""Hundreds of slow conversations at once (CONTRACT section 7; issue 31): turns, tasks and event
runs wait without holding a thread, a principal's turns (and a conversation's event runs) run
one at a time in order, everyone else runs beside them, a hung MCP server stalls only its own
run, and work over the bound waits in state.db, never dropped, shown by `fw status`.

The model is a scripted server that answers after a while with the text it was asked (so each
answer says which message it answers), and records when each request came and was answered."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import CANARY, fw, fw_bin, fwj, processes_with, snapshot, state_execute, state_rows, wait_until_gone
from fakes.chat_server import ChatServer
from fakes.onebot_server import SELF_ID, ok
from serving import Served
from test_sessions import messages, post, setup
from test_tasks_exec import bound_agent
from websockets.sync.client import connect

from framework_cli.engine.aio import ENGINE_THREADS

pytestmark = pytest.mark.engines

SLOW_MCP = str(Path(__file__).parent / "fakes" / "slow_mcp_server.py")
TOKEN = "engine-tok-5c7e9a1b3d"


def asked(request) -> str:
    """The text of a model request's last user message."""
    users = [m for m in request["json"]["messages"] if m["role"] == "user"]
    return users[-1]["content"]


def overlapping(a, b) -> bool:
    return a["started"] < b["ended"] and b["started"] < a["ended"]


def wait_for(condition, seconds=60, what="the condition"):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.05)


# -- turns: in order per principal, side by side across principals --------------------------------
def test_a_principals_turns_run_one_at_a_time_in_order_while_other_principals_run_beside_them(home):
    with ChatServer([{"echo": "re: ", "sleep": 0.3}], repeat_last=True) as server:
        setup(server.base_url, "a", "b", "c")
        fwj("session", "create", "s1", "--member", "alice", "--member", "a", "--member", "b", "--member", "c")
        for i in range(5):
            post("s1", "alice", f"@a q{i}")
            if i < 2:
                post("s1", "alice", f"@b q{i}")
                post("s1", "alice", f"@c q{i}")
        summary = fwj("dispatch", "--once", "--concurrency", "16")
    assert summary["turns"] == {"run": 9, "answered": 9, "failed": 0, "cancelled": 0}
    assert summary["queue_at_start"] == {"turns": 9, "tasks": 0, "backlog": 0, "over_max_queue": []}
    said = messages("s1")
    assert [text for who, text in said if who == "a"] == [f"re: alice: @a q{i}" for i in range(5)]  # answered in the order posted
    of_a = sorted((r for r in server.requests if "@a" in asked(r)), key=lambda r: r["started"])
    assert [asked(r) for r in of_a] == [f"alice: @a q{i}" for i in range(5)]  # run in the order posted ...
    assert not any(overlapping(x, y) for x, y in zip(of_a, of_a[1:]))  # ... one at a time
    others = [r for r in server.requests if "@a" not in asked(r)]
    assert any(overlapping(of_a[0], r) for r in others)  # b and c did not wait for a
    firsts = [r for r in server.requests if asked(r).endswith("q0")]
    assert all(overlapping(firsts[0], r) for r in firsts)  # the three principals' first turns ran at once


def test_two_dispatchers_at_once_keep_each_principal_in_order_and_never_overlap_its_turns(home):
    with ChatServer([{"echo": "re: ", "sleep": 0.2}], repeat_last=True) as server:
        setup(server.base_url, "a", "b")
        fwj("session", "create", "s1", "--member", "alice", "--member", "a", "--member", "b")
        for i in range(6):
            post("s1", "alice", f"@a q{i}")
            post("s1", "alice", f"@b q{i}")
        procs = [subprocess.Popen([fw_bin(), "dispatch", "--once", "--concurrency", "8", "--json"], env={**os.environ, "FW_HOME": str(home)},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    answered = sum(json.loads(out)["turns"]["answered"] for out, _ in outs)
    assert answered == 12 and len(server.requests) == 12  # every turn answered once, none run twice
    said = messages("s1")
    for who in ("a", "b"):
        assert [text for author, text in said if author == who] == [f"re: alice: @{who} q{i}" for i in range(6)]
        runs = sorted((r for r in server.requests if f"@{who}" in asked(r)), key=lambda r: r["started"])
        assert [asked(r) for r in runs] == [f"alice: @{who} q{i}" for i in range(6)]
        assert not any(overlapping(x, y) for x, y in zip(runs, runs[1:]))


# -- a slow or dead source stalls only its own run --------------------------------------------------
def test_a_principal_whose_mcp_server_hangs_holds_up_no_one_else_and_leaves_nothing_behind(home, tmp_path):
    marker = f"--fw-test-hung-{os.getpid()}-{time.monotonic_ns()}"
    record = tmp_path / "slow.record"
    fwj("resource", "write", "mcp", "slow", "--create", "--data", json.dumps(
        {"transport": "stdio", "command": sys.executable, "args": [SLOW_MCP, marker], "env": {"FAKE_MCP_RECORD": str(record)},
         "timeout_seconds": 600}))
    stuck = [{"tool_calls": [{"name": "mcp__slow__sleep", "arguments": {"seconds": 600}}]}, {"content": "never"}]
    with ChatServer(stuck) as hung_model, ChatServer([{"echo": "re: ", "sleep": 0.1}], repeat_last=True) as model:
        setup(model.base_url, "quick")
        fwj("resource", "write", "provider", "p2", "--create", "--data", json.dumps({"base_url": hung_model.base_url, "api_key": CANARY}))
        fwj("resource", "write", "model", "m2", "--create", "--data",
            json.dumps({"provider": "p2", "model_id": "model-y", "capabilities": {"tool_call": True}}))
        fwj("agent", "create", "stuck", "--model", "m2", "--mcp", "slow")
        fwj("principal", "create", "stuck", "--kind", "agent")
        fwj("binding", "set", "stuck", "--agent", "stuck")
        fwj("session", "create", "s1", "--member", "alice", "--member", "stuck", "--member", "quick")
        post("s1", "alice", "@stuck please wait")
        serving = subprocess.Popen([fw_bin(), "dispatch", "--json"], env={**os.environ, "FW_HOME": str(home)},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: record.exists() and '"call"' in record.read_text(), what="the hung call at the server")
            for i in range(5):  # while stuck's call hangs, quick's turns come and are answered
                post("s1", "alice", f"@quick q{i}")
            wait_for(lambda: len([m for m in messages("s1") if m[0] == "quick"]) == 5, what="quick's five answers")
            status = fwj("status")
            by = {p["principal"]: p for p in status["principals"]}
            assert (by["stuck"]["running"], by["quick"]["running"], by["quick"]["pending"]) == (1, 0, 0)
            assert [s["command"] for s in status["serving"]] == ["fw dispatch"]
            assert status["serving"][0]["process"].split(":")[0] == str(serving.pid)
            line = [row for row in fw("status").stdout.splitlines() if row.startswith("fw dispatch")][0]
            # the host as its name, and the pid: the boot id and namespace of `host` stay in --json
            assert line.split()[2:4] == [socket.gethostname(), str(serving.pid)] and "pid:[" not in line
        finally:
            serving.send_signal(signal.SIGINT)
            _, err = serving.communicate(timeout=60)
    assert serving.returncode == 130 and "Traceback" not in err  # a run was in flight: ended
    assert [t for t in fwj("session", "show", "s1")["session"]["turns"] if t["principal"] == "stuck"][0]["status"] == "cancelled"
    assert wait_until_gone(marker) == []


class ExecModel(ChatServer):
    """A model that has each run call `framework_exec` with `argv`, then says "done"."""

    def __init__(self, argv):
        super().__init__([])
        self.argv = argv

    def next_step(self, request):
        with self._lock:
            self.requests.append(request)
        if request["json"]["messages"][-1]["role"] == "tool":
            return {"content": "done"}
        return {"tool_calls": [{"name": "framework_exec", "arguments": {"argv": self.argv, "timeout_seconds": 120}}]}


def test_more_blocking_tool_calls_than_the_engine_has_threads_hold_up_no_one_else(home, tmp_path):
    mark = f"fw-test-blocking-{os.getpid()}-{time.monotonic_ns()}"
    workers = [f"w{i}" for i in range(ENGINE_THREADS + 2)]  # more exec calls than the engine's threads for short work
    work = tmp_path / "work"
    work.mkdir()
    with ExecModel(["python3", "-c", "import time; time.sleep(120)", mark]) as slow, \
            ChatServer([{"echo": "re: ", "sleep": 0.1}], repeat_last=True) as model:
        setup(model.base_url, "quick")
        fwj("resource", "write", "provider", "p2", "--create", "--data", json.dumps({"base_url": slow.base_url, "api_key": CANARY}))
        fwj("resource", "write", "model", "m2", "--create", "--data",
            json.dumps({"provider": "p2", "model_id": "model-y", "capabilities": {"tool_call": True}}))
        for name in workers:
            bound_agent(name, "m2", "local_execution", directory=work, execution=True)
        fwj("session", "create", "s1", "--member", "alice", "--member", "quick", *sum((["--member", w] for w in workers), []))
        for name in workers:
            post("s1", "alice", f"@{name} sleep")
        quick_answered_while(home, mark, len(workers))  # every exec call blocks a thread meanwhile


def quick_answered_while(home, mark: str, count: int) -> None:
    """Under `fw dispatch`, once `count` processes marked `mark` run (each holding up a run),
    quick's three turns are answered while they still run; then the dispatcher is stopped
    with Ctrl-C (130: work was in flight) and leaves nothing behind."""
    serving = subprocess.Popen([fw_bin(), "dispatch", "--json"], env={**os.environ, "FW_HOME": str(home)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(processes_with(mark)) >= count, what=f"{count} processes marked {mark}")
        for i in range(3):
            post("s1", "alice", f"@quick q{i}")
        wait_for(lambda: len([m for m in messages("s1") if m[0] == "quick"]) == 3, seconds=30, what="quick's three answers")
        assert len(processes_with(mark)) >= count  # answered while they still ran
    finally:
        serving.send_signal(signal.SIGINT)
        _, err = serving.communicate(timeout=60)
    assert serving.returncode == 130 and "Traceback" not in err
    assert wait_until_gone(mark) == []


def test_more_mcp_servers_slow_to_start_than_the_engine_has_threads_hold_up_no_one_else(home):
    """A run's MCP servers are started as it starts (each given its `startup_seconds`): runs
    whose servers never answer wait for them on threads of their own, not the ones every
    run's short steps need."""
    mark = f"fw-test-mute-mcp-{os.getpid()}-{time.monotonic_ns()}"
    workers = [f"w{i}" for i in range(ENGINE_THREADS + 2)]
    with ChatServer([{"echo": "re: ", "sleep": 0.1}], repeat_last=True) as model:
        setup(model.base_url, "quick")
        fwj("resource", "write", "mcp", "mute", "--create", "--data", json.dumps(
            {"transport": "stdio", "command": sys.executable, "args": ["-c", "import time; time.sleep(600)", mark], "startup_seconds": 120}))
        for name in workers:
            fwj("agent", "create", name, "--model", "m1", "--mcp", "mute")
            fwj("principal", "create", name, "--kind", "agent")
            fwj("binding", "set", name, "--agent", name)
        fwj("session", "create", "s1", "--member", "alice", "--member", "quick", *sum((["--member", w] for w in workers), []))
        post("s1", "alice", " ".join(f"@{w}" for w in workers))
        quick_answered_while(home, mark, len(workers))  # every worker's run waits for its server meanwhile
    # stopped while their runs started: the turns are cancelled, as a dispatcher's turns in flight are
    assert sorted(t["status"] for t in fwj("turn", "list")["turns"] if t["principal"] != "quick") == ["cancelled"] * len(workers)


def test_every_turn_of_a_busy_dispatch_keeps_the_id_of_its_run(home):
    """A turn's run id is written as its run starts (in the step that starts it, on the
    engine's threads): never after the turn was answered, when its claim no longer holds and
    the note would be lost."""
    names = [f"a{i}" for i in range(24)]
    with ChatServer([{"content": "ok"}], repeat_last=True) as model:
        setup(model.base_url, *names)
        fwj("session", "create", "s1", "--member", "alice", *sum((["--member", n] for n in names), []))
        post("s1", "alice", " ".join(f"@{n}" for n in names))
        summary = fwj("dispatch", "--once", "--concurrency", "64")
    assert summary["turns"]["answered"] == len(names)
    turns = state_rows(home, "SELECT run_id FROM turns")
    assert len(turns) == len(names) and all(t["run_id"] for t in turns)


def test_a_turn_whose_session_ends_as_its_run_starts_never_asks_the_model_and_its_run_is_ended(home, monkeypatch):
    """The session ends between the turn's claim and its run's start: the run's id is kept
    with the turn, the run is refused in the step that starts it, before its model is asked,
    and ended; the turn is cancelled, nothing is answered."""
    from typer.testing import CliRunner

    from framework_cli.cli.main import app
    from framework_cli.engine import agent_run
    from framework_cli.home.store import Home
    from framework_cli.runtime.sessions import session_end

    real_open = agent_run.open_run

    def open_after_the_session_ended(h, **start):
        session_end(Home(h.root), "s1")
        return real_open(h, **start)

    monkeypatch.setattr(agent_run, "open_run", open_after_the_session_ended)
    with ChatServer([{"content": "too late"}], repeat_last=True) as model:
        setup(model.base_url, "a1")
        fwj("session", "create", "s1", "--member", "alice", "--member", "a1")
        post("s1", "alice", "@a1 hello")
        result = CliRunner().invoke(app, ["--home", str(home), "dispatch", "--once", "--json"])
        assert result.exit_code == 0, result.output
        assert model.requests == []
    turn = state_rows(home, "SELECT status, run_id, error FROM turns")[0]
    runs = fwj("run", "list")["runs"]
    assert len(runs) == 1 and runs[0]["status"] == "ended"
    assert turn["status"] == "cancelled" and turn["run_id"] == runs[0]["run_id"]
    assert turn["error"].startswith("session_ended: session 's1' has ended")
    assert [author for author, _ in messages("s1")] == ["alice"]


# -- bots: one conversation at a time, many side by side; nothing lost -------------------------------
class Napcat:
    """A fake NapCat on the reverse WebSocket: sends events, answers every action, and keeps
    what the bot sent (with when)."""

    def __init__(self, ws_url):
        self.ws = connect(ws_url, additional_headers={"Authorization": f"Bearer {TOKEN}", "X-Self-ID": str(SELF_ID),
                                                      "X-Client-Role": "Universal"}, open_timeout=10).__enter__()
        self.sent: list[dict] = []
        self._lock = threading.Lock()
        self._ids = iter(range(50_000, 10**9))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        try:
            for frame in self.ws:
                doc = json.loads(frame)
                if "action" in doc:
                    with self._lock:
                        self.sent.append({**doc, "at": time.monotonic()})
                        message_id = next(self._ids)
                    self.ws.send(json.dumps(ok({"message_id": message_id}, doc["echo"])))
        except Exception:
            pass

    def message(self, text, *, group, user, message_id):
        doc = {"time": 1700000000, "self_id": SELF_ID, "post_type": "message", "message_type": "group", "sub_type": "normal",
               "message_id": message_id, "group_id": group, "user_id": user, "font": 0, "sender": {"user_id": user, "nickname": "U"},
               "message": [{"type": "at", "data": {"qq": str(SELF_ID)}}, {"type": "text", "data": {"text": f" {text}"}}]}
        self.ws.send(json.dumps(doc))

    def replies(self):
        with self._lock:
            return [s for s in self.sent if s["action"] == "send_group_msg"]

    def close(self):
        self.ws.close()


class ReplyingModel(ChatServer):
    """Takes `sleep` seconds, then replies through event_reply with the text it was sent; then done."""

    def __init__(self, sleep):
        super().__init__([])
        self.sleep = sleep

    def next_step(self, request):
        with self._lock:
            self.requests.append(request)
        messages_ = (request.get("json") or {}).get("messages") or [{}]
        if messages_[-1].get("role") == "tool":
            return {"content": "done"}
        said = asked(request).rsplit(": ", 1)[-1].strip()
        return {"sleep": self.sleep, "tool_calls": [{"name": "event_reply", "arguments": {"text": f"re {said}"}}]}


def bot_setup(base_url, *, max_queue=None):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "m-1", "capabilities": {"tool_call": True}}))
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", "events": ["message.*"]}))
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1", *(["--max-queue", str(max_queue)] if max_queue else []))
    fwj("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--access-token-stdin", input=TOKEN)


def wait_runs_ended(home):
    """A run replies, then asks its model once more before it ends: a server stopped in between
    ends that run (exit 130). Wait until no event waits or runs."""
    wait_for(lambda: not {e["status"] for e in state_rows(home, "SELECT status FROM bot_events")} & {"pending", "running"},
             what="every event's run ended")


def reply_text(action):
    return "".join(seg["data"]["text"] for seg in action["params"]["message"] if seg["type"] == "text")


def test_one_groups_messages_are_answered_in_order_one_at_a_time_while_other_groups_run_beside_them(home):
    with ReplyingModel(1.0) as model:  # long enough that runs at once overlap on a machine loaded by other tests
        bot_setup(model.base_url)
        served = Served(home, "bot", "serve", "qq", "--listen", "127.0.0.1:0")
        try:
            listening = served.next(lambda r: r.get("type") == "listening")
            napcat = Napcat(listening["websocket"])
            for i in range(5):  # five messages in one group, 0.05 s apart
                napcat.message(f"g1-m{i}", group=1001, user=2000 + i, message_id=100 + i)
                time.sleep(0.05)
            for g in range(2, 6):  # and one in each of four other groups
                napcat.message(f"g{g}-m0", group=1000 + g, user=3000 + g, message_id=200 + g)
            wait_for(lambda: len(napcat.replies()) == 9, what="nine replies")
            wait_runs_ended(home)
            napcat.close()
        finally:
            code, err = served.stop()
    assert code == 0 and "Traceback" not in err
    replies = napcat.replies()
    in_g1 = [r for r in replies if r["params"]["group_id"] == 1001]
    assert [reply_text(r) for r in in_g1] == [f"re g1-m{i}" for i in range(5)]  # in arrival order
    runs = sorted((r for r in model.requests if "g1-m" in asked(r) and r["json"]["messages"][-1]["role"] == "user"),
                  key=lambda r: r["started"])
    assert not any(overlapping(x, y) for x, y in zip(runs, runs[1:]))  # one at a time
    others = [r for r in model.requests if "g1-m" not in asked(r) and r["json"]["messages"][-1]["role"] == "user"]
    assert len(others) == 4 and all(overlapping(others[0], r) for r in others)  # the other groups ran at once
    assert any(overlapping(runs[0], r) for r in others)  # and beside the busy group
    assert sorted(reply_text(r) for r in replies) == sorted({reply_text(r) for r in replies})  # none doubled


def test_over_the_bound_events_wait_in_state_db_and_the_next_server_runs_them(home):
    """--concurrency 2 and a principal with max_queue 3: twelve messages in twelve groups are
    all queued, the principal is flagged, `fw status` shows the queue; a server stopped with
    events waiting leaves them to the next, which answers them: none lost, none doubled."""
    with ReplyingModel(1.0) as model:  # slow enough that the queue is still over max_queue when fw status looks
        bot_setup(model.base_url, max_queue=3)
        served = Served(home, "bot", "serve", "qq", "--listen", "127.0.0.1:0", "--concurrency", "2")
        try:
            napcat = Napcat(served.next(lambda r: r.get("type") == "listening")["websocket"])
            for g in range(12):
                napcat.message(f"m{g}", group=5000 + g, user=6000 + g, message_id=700 + g)
            over = served.next(lambda r: r.get("type") == "queue_over")
            assert (over["principal"], over["max_queue"]) == ("p1", 3) and over["waiting"] > 3
            def p1_now():
                return [p for p in fwj("status")["principals"] if p["principal"] == "p1"][0]

            wait_for(lambda: p1_now()["running"] == 2, what="two runs at once (--concurrency 2)")  # on a loaded machine, not at once
            status = fwj("status")
            p1 = [p for p in status["principals"] if p["principal"] == "p1"][0]
            assert p1["over_max_queue"] and p1["running"] <= 2 and p1["pending"] + p1["running"] <= 12
            assert status["over_max_queue"] == ["p1"]
            human = fw("status").stdout
            assert "OVER" in human and "Over max_queue: p1" in human
            wait_for(lambda: len(napcat.replies()) >= 3, what="three replies")
        finally:
            code, err = served.stop()  # while the implementation is connected: runs are (most likely) in flight
            napcat.close()
        stopped = [r for r in served.seen if r.get("type") == "stopped"][0]
        assert code == (130 if stopped["ended_runs"] else 0) and "Traceback" not in err  # runs in flight were ended
        first_replies = napcat.replies()
        left = [e["status"] for e in state_rows(home, "SELECT status FROM bot_events ORDER BY id")]
        assert (left.count("cancelled"), left.count("pending")) == (stopped["ended_runs"], stopped["waiting"])
        # every event done was answered; a run ended by the stop may have replied just before it
        assert left.count("done") <= len(first_replies) <= left.count("done") + left.count("cancelled")
        assert stopped["waiting"] > 0 and len(left) == 12
        # the next server of the bot runs what waits
        served = Served(home, "bot", "serve", "qq", "--listen", "127.0.0.1:0", "--concurrency", "4")
        try:
            listening = served.next(lambda r: r.get("type") == "listening")
            assert listening["waiting"] == stopped["waiting"]
            napcat = Napcat(listening["websocket"])
            wait_for(lambda: len(napcat.replies()) == stopped["waiting"], what="the waiting events' replies")
            wait_runs_ended(home)
            napcat.close()
        finally:
            code, err = served.stop()
    assert code == 0 and "Traceback" not in err
    replied = sorted(reply_text(r) for r in first_replies + napcat.replies())
    statuses = [e["status"] for e in state_rows(home, "SELECT status FROM bot_events ORDER BY id")]
    assert statuses.count("done") <= len(replied) <= statuses.count("done") + statuses.count("cancelled")
    assert statuses.count("cancelled") == stopped["ended_runs"]
    assert len(statuses) == 12 and set(statuses) <= {"done", "cancelled"}, state_rows(home, "SELECT status, error FROM bot_events")  # none lost
    assert len(replied) == len(set(replied))  # none doubled
    assert fwj("status")["totals"]["pending"] == 0


def test_events_a_dead_server_left_waiting_longer_than_ten_minutes_expire_and_the_rest_run(home):
    with ReplyingModel(0.0) as model:
        bot_setup(model.base_url)
        served = Served(home, "bot", "serve", "qq", "--listen", "127.0.0.1:0", "--concurrency", "1")
        napcat = Napcat(served.next(lambda r: r.get("type") == "listening")["websocket"])
        model.sleep = 30  # the first run hangs at the model; the others wait behind the bound
        for g in range(3):
            napcat.message(f"m{g}", group=8000 + g, user=9000 + g, message_id=900 + g)
        wait_for(lambda: len(state_rows(home, "SELECT id FROM bot_events")) == 3, what="three queued events")
        wait_for(lambda: state_rows(home, "SELECT run_id FROM bot_events WHERE id = 1")[0]["run_id"], what="the first run started")
        served.proc.kill()  # SIGKILL: the server dies with one run in flight and two events waiting
        served.proc.wait(10)
        napcat.close()
        # two waited: one of them for eleven minutes
        (older,) = state_rows(home, "SELECT id FROM bot_events WHERE status = 'pending' ORDER BY id LIMIT 1")
        state_execute(home, "UPDATE bot_events SET received_at = '2020-01-01T00:00:00.000Z' WHERE id = ?", (older["id"],))
        model.sleep = 0.0
        served = Served(home, "bot", "serve", "qq", "--listen", "127.0.0.1:0")
        try:
            napcat = Napcat(served.next(lambda r: r.get("type") == "listening")["websocket"])
            wait_for(lambda: len(napcat.replies()) == 1, what="the one reply")
            wait_runs_ended(home)
            napcat.close()
        finally:
            code, err = served.stop()
    assert code == 0 and "Traceback" not in err
    rows = state_rows(home, "SELECT id, status, error FROM bot_events ORDER BY id")
    by = {r["id"]: r for r in rows}
    assert by[older["id"]]["status"] == "expired" and "10 minutes" in by[older["id"]]["error"]
    # the run its dead server was in is not run again (it may have spoken): failed, with the reason
    assert sorted(r["status"] for r in rows) == ["done", "expired", "failed"]
    assert [r["error"] for r in rows if r["status"] == "failed"][0].startswith("its server stopped during its run")
    assert len(napcat.replies()) == 1


def test_status_counts_failed_work_and_says_when_nothing_serves(home):
    with ChatServer([{"status": 500, "body": "down"}], repeat_last=True) as server:
        setup(server.base_url, "a")
        fwj("session", "create", "s1", "--member", "alice", "--member", "a")
        post("s1", "alice", "@a one")
        post("s1", "alice", "@a two")
        fwj("binding", "disable", "a")
        post("s1", "alice", "@a three")
        before = fwj("status")
        assert [(p["principal"], p["pending"], p["backlog"]) for p in before["principals"]] == [("a", 0, 3)]
        fwj("binding", "enable", "a")
        summary = fwj("dispatch", "--once")
        assert summary["turns"]["failed"] == 3
    doc = fwj("status")
    assert doc["principals"] == [{"principal": "a", "pending": 0, "backlog": 0, "running": 0, "failed_last_hour": 3,
                                  "max_queue": 100, "over_max_queue": False}]
    assert doc["totals"] == {"pending": 0, "backlog": 0, "running": 0, "failed_last_hour": 3} and doc["serving"] == []
    human = fw("status").stdout
    assert "failed in the last hour: 3" in human and "Nothing is serving" in human
    assert CANARY not in human and CANARY not in json.dumps(doc)


@pytest.mark.parametrize("bad", [["--concurrency", "0"], ["--concurrency", "100001"], ["--timeout", "0"]])
def test_a_serving_dispatcher_refuses_a_bad_bound_before_it_says_it_serves(home, bad):
    before = snapshot(home)
    r = fw("dispatch", *bad)
    assert r.exit_code == 4 and "serving" not in r.output and "Traceback" not in r.output, r
    assert snapshot(home) == before
