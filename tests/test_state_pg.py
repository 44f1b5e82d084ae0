"""Runtime state on PostgreSQL (CONTRACT section 15; issue 32): `fw state use|migrate|check|copy`,
a store that cannot be reached, and several hosts (copies of one home, separate `fw` processes)
sharing one database: each turn exactly once, each principal in order, a fenced late write
refused, two bot servers and one duplicated report. Against a throwaway cluster (tests/pg.py)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time

import httpx
import pytest
from conftest import CANARY, fw, fw_bin, fwj, pg_cluster, state_rows
from fakes.chat_server import ChatServer
from fakes.onebot_server import SELF_ID, OneBotServer, group_message, signed
from test_sessions import post, setup

PASSWORD = "pg-Pass-7c1e9a3b5d"
SECRET = "state-sig-4a6c8e0b2d"


@pytest.fixture
def database():
    cluster = pg_cluster()
    name = cluster.new_database()
    yield cluster, name
    from framework_cli.state.postgres import close_pools

    close_pools()
    cluster.drop_database(name)


def with_password(url: str) -> str:
    return url.replace("postgresql://fw@", f"postgresql://fw:{PASSWORD}@")


def env_for(home, **more):
    env = {k: v for k, v in os.environ.items() if k != "FW_STATE"}
    return {**env, "FW_HOME": str(home), **more}


# -- use, migrate, check ------------------------------------------------------------------------------
def test_use_keeps_the_password_in_secrets_and_the_rest_in_state_url_and_never_shows_it(home, database):
    cluster, name = database
    url = with_password(cluster.url(name))
    doc = fwj("state", "use", input=url)
    assert doc["state"]["engine"] == "postgresql" and PASSWORD not in json.dumps(doc)
    assert (home / "state.url").read_text().strip() == cluster.url(name)  # no password in the plain file
    assert json.loads((home / "secrets/state/url.json").read_text()) == {"password": PASSWORD}
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice")
    fwj("message", "post", "s1", "--as", "alice", "hello")
    assert not (home / "state.db").exists()
    import psycopg

    with psycopg.connect(cluster.url(name)) as conn:
        assert [r[0] for r in conn.execute("SELECT text FROM messages")] == ["hello"]
    migrated = fwj("state", "migrate")
    assert migrated["up_to_date"] and migrated["state"]["location"].endswith(cluster.url(name).split("@", 1)[1])
    checked = fwj("state", "check")
    assert checked["reachable"] and checked["schema_version"] == checked["latest"] and checked["problems"] == []
    human = fw("state", "check")
    assert human.exit_code == 0 and "reachable" in human.stdout and PASSWORD not in human.output
    back = fwj("state", "use", "--sqlite")
    assert back["state"]["engine"] == "sqlite" and not (home / "state.url").exists() and not (home / "secrets/state/url.json").exists()
    assert fwj("session", "list")["sessions"] == []  # the home's own (new) state.db


def test_a_store_that_cannot_be_reached_is_unavailable_without_its_password(home, monkeypatch):
    before = sorted(p.name for p in home.iterdir())
    monkeypatch.setenv("FW_STATE", f"postgresql://fw:{PASSWORD}@127.0.0.1:9/nowhere?connect_timeout=2")
    for args in (["session", "list"], ["state", "check"], ["status"]):
        r = fw(*args, "--json")
        assert r.exit_code == 7 and r.json["error"]["reason"] == "state_store", r
        assert PASSWORD not in r.output and "fw:***@127.0.0.1:9" in r.json["error"]["message"]
    assert sorted(p.name for p in home.iterdir()) == before  # nothing was made in the home
    r = fw("state", "use", input=f"postgresql://fw:{PASSWORD}@127.0.0.1:9/nowhere?connect_timeout=2")
    assert r.exit_code == 7 and PASSWORD not in r.output and not (home / "state.url").exists()
    monkeypatch.setenv("FW_STATE", "mysql://nope")
    r = fw("session", "list", "--json")
    assert r.exit_code == 4 and "not a PostgreSQL URL" in r.json["error"]["message"]


# -- copy -------------------------------------------------------------------------------------------
def fill(server_url):
    setup(server_url, "ops")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    post("s1", "alice", "@ops hello there")
    fwj("dispatch", "--once")
    fwj("memory", "list", "ops")
    fwj("run", "start", "--agent", "ops")
    fwj("tool", "call", "--manager", "resource_list", "--args", '{"kind": "agent"}')


def snapshot_state(home, env):
    """What a home's runtime state holds, engine apart: sessions, messages, turns, runs, audit."""
    def j(*args):
        out = subprocess.run([fw_bin(), *args, "--json"], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out
        return json.loads(out.stdout)

    runs = [{k: v for k, v in r.items()} for r in j("run", "list")["runs"]]
    return {"sessions": j("session", "list"), "messages": j("message", "list", "s1"),
            "turns": j("session", "show", "s1")["session"]["turns"], "runs": runs, "audit": j("audit", "list", "--limit", "1000")}


def test_copy_moves_a_real_state_db_to_postgresql_and_back_losslessly(home, tmp_path, database):
    cluster, name = database
    with ChatServer([{"content": "general kenobi"}], repeat_last=True) as server:
        fill(server.base_url)
    before = snapshot_state(home, env_for(home))
    doc = fwj("state", "copy", "--to", "-", input=cluster.url(name))
    assert doc["checked"] and doc["tables"]["messages"] == 2 and doc["tables"]["turns"] == 1 and doc["runs"] == 2
    assert doc["audit_lines"] == len(before["audit"]["entries"])
    on_pg = snapshot_state(home, env_for(home, FW_STATE=cluster.url(name)))
    assert on_pg == before
    # refused into a database that holds state already
    again = fw("state", "copy", "--to", "-", "--json", input=cluster.url(name))
    assert again.exit_code == 6 and again.json["error"]["code"] == "not_empty"
    # and back, from PostgreSQL into another home's folder
    other = tmp_path / "other"
    shutil.copytree(home, other, ignore=shutil.ignore_patterns("state.db*", "runs", "audit.jsonl"))
    (other / "runs").mkdir()
    out = subprocess.run([fw_bin(), "state", "copy", "--to", str(other), "--json"], env=env_for(home, FW_STATE=cluster.url(name)),
                         capture_output=True, text=True)
    assert out.returncode == 0 and json.loads(out.stdout)["checked"], out
    assert snapshot_state(other, env_for(other)) == before
    assert sorted(p.name for p in (other / "runs").iterdir()) == sorted(p.name for p in (home / "runs").iterdir())
    assert (other / "audit.jsonl").read_text() == (home / "audit.jsonl").read_text()


def test_copy_is_refused_while_the_source_is_served(home, database):
    cluster, name = database
    with ChatServer([{"content": "x"}], repeat_last=True) as server:
        setup(server.base_url, "ops")
        serving = subprocess.Popen([fw_bin(), "dispatch"], env=env_for(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            def serving_now():
                try:
                    return (home / "state.db").exists() and state_rows(home, "SELECT id FROM dispatchers")
                except sqlite3.OperationalError:  # the dispatcher is making state.db's tables
                    return False

            deadline = time.time() + 30
            while not serving_now() and time.time() < deadline:
                time.sleep(0.1)
            r = fw("state", "copy", "--to", "-", "--json", input=cluster.url(name))
            assert r.exit_code == 6 and r.json["error"]["code"] == "conflict" and r.json["error"]["serving"], r
        finally:
            serving.send_signal(signal.SIGINT)
            serving.communicate(timeout=30)
    import psycopg

    with psycopg.connect(cluster.url(name)) as conn:  # nothing was written there
        assert conn.execute("SELECT to_regclass('sessions')").fetchone()[0] is None


# -- several hosts, one database --------------------------------------------------------------------
def hosts(home, tmp_path, count):
    """`count` copies of the home's folder, as several hosts each have one."""
    copies = []
    for n in range(count):
        copy = tmp_path / f"host{n}"
        shutil.copytree(home, copy, ignore=shutil.ignore_patterns(".lock", ".locks"))
        copies.append(copy)
    return copies


def test_dispatchers_on_three_hosts_run_each_turn_once_and_each_principal_in_order(home, tmp_path, database):
    cluster, name = database
    url = cluster.url(name)
    with ChatServer([{"echo": "re: ", "sleep": 0.1}], repeat_last=True) as server:
        setup(server.base_url, "a", "b", "c")
        copies = hosts(home, tmp_path, 3)
        env0 = env_for(copies[0], FW_STATE=url)
        subprocess.run([fw_bin(), "session", "create", "s1", "--member", "alice", "--member", "a", "--member", "b", "--member", "c"],
                       env=env0, check=True, capture_output=True)
        for i in range(8):
            for who in "abc":
                subprocess.run([fw_bin(), "message", "post", "s1", "--as", "alice", f"@{who} q{i}"], env=env0, check=True, capture_output=True)
        procs = [subprocess.Popen([fw_bin(), "dispatch", "--once", "--json"], env=env_for(c, FW_STATE=url),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in copies]
        outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert sum(json.loads(o)["turns"]["answered"] for o, _ in outs) == 24 and len(server.requests) == 24  # once each
    users = [m for m in server.requests]
    said = [(r["author"], r["text"]) for r in state_rows_at(url, "SELECT author, text FROM messages ORDER BY id")]
    for who in "abc":
        assert [t for a, t in said if a == who] == [f"re: alice: @{who} q{i}" for i in range(8)]
        runs = sorted((r for r in users if f"@{who}" in r["json"]["messages"][-1]["content"]), key=lambda r: r["started"])
        assert not any(b["started"] < a["ended"] for a, b in zip(runs, runs[1:]))  # never two at once


def state_rows_at(url, sql):
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql).fetchall()


def test_a_dispatcher_killed_mid_turn_on_one_host_is_taken_over_by_another(home, tmp_path, database):
    cluster, name = database
    url = cluster.url(name)
    with ChatServer([{"echo": "slow: ", "sleep": 30}]) as slow, ChatServer([{"echo": "re: "}], repeat_last=True) as quick:
        setup(slow.base_url, "ops")
        first, second = hosts(home, tmp_path, 2)
        env1 = env_for(first, FW_STATE=url)
        subprocess.run([fw_bin(), "session", "create", "s1", "--member", "alice", "--member", "ops"], env=env1, check=True, capture_output=True)
        subprocess.run([fw_bin(), "message", "post", "s1", "--as", "alice", "@ops one"], env=env1, check=True, capture_output=True)
        subprocess.run([fw_bin(), "message", "post", "s1", "--as", "alice", "@ops two"], env=env1, check=True, capture_output=True)
        dying = subprocess.Popen([fw_bin(), "dispatch"], env=env1, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not slow.requests and time.time() < deadline:
            time.sleep(0.05)
        assert slow.requests  # its first turn is at the model
        dying.kill()
        dying.wait()
        # the other host's provider answers at once
        provider = second / "providers/default/p1.yaml"
        provider.write_text(provider.read_text().replace(slow.base_url, quick.base_url))
        taken = subprocess.run([fw_bin(), "dispatch", "--once", "--json"], env=env_for(second, FW_STATE=url),
                               capture_output=True, text=True, timeout=120)
    assert taken.returncode == 0, taken
    said = [(r["author"], r["text"]) for r in state_rows_at(url, "SELECT author, text FROM messages ORDER BY id")]
    assert said == [("alice", "@ops one"), ("alice", "@ops two"), ("ops", "re: alice: @ops one"), ("ops", "re: alice: @ops two")]
    turns = state_rows_at(url, "SELECT status, attempts FROM turns ORDER BY id")
    assert [(t["status"], t["attempts"]) for t in turns] == [("done", 2), ("done", 1)]  # the first taken back, run again


def test_a_dispatcher_presumed_dead_cannot_post_its_late_answer(home, database, monkeypatch):
    """The fence: work taken back from an owner thought dead, and claimed again, is answered
    by the new claim only; the old claim's answer and outcome are refused."""
    cluster, name = database
    monkeypatch.setenv("FW_STATE", cluster.url(name))
    if True:
        from framework_cli.engine.dispatch import PrincipalWork, claim_of
        from framework_cli.engine.engine import Outcome
        from framework_cli.home.store import Home
        from framework_cli.runtime import lanes, sessions
        from framework_cli.state.store import StateStore

        with ChatServer([]) as server:
            setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        post("s1", "alice", "@ops hello")
        h = Home(home)
        source = PrincipalWork(h)
        with StateStore.open(h) as store:
            (old,) = source.claim(store, "host-a", 10)
            # host-a is presumed dead: its work is taken back and its lane freed; host-b claims it
            with store.transaction():
                store.execute("UPDATE turns SET status = 'pending', owner = NULL WHERE id = ?", (old.id,))
                lanes.free_lanes_of(store, {"host-a"})
            (new,) = source.claim(store, "host-b", 10)
        assert new.fence == old.fence + 1
        late = None
        try:
            sessions.message_post(h, "s1", "ops", "the late answer", hop=1, answers=claim_of("host-a", old))
        except Exception as exc:  # refused: its claim no longer holds
            late = exc
        assert late is not None
        with StateStore.open(h) as store:
            assert source.finish(store, "host-a", old, Outcome("done")) == "running"  # host-a's outcome is not recorded
        sessions.message_post(h, "s1", "ops", "the answer", hop=1, answers=claim_of("host-b", new))
        with StateStore.open(h) as store:
            assert source.finish(store, "host-b", new, Outcome("done", answered=True)) == "done"
    assert [m[1] for m in messages_at(cluster.url(name))] == ["@ops hello", "the answer"]


def messages_at(url):
    return [(r["author"], r["text"]) for r in state_rows_at(url, "SELECT author, text FROM messages ORDER BY id")]


def test_two_bot_servers_on_two_hosts_start_one_run_for_a_duplicated_report(home, tmp_path, database):
    cluster, name = database
    url = cluster.url(name)
    reply = [{"tool_calls": [{"name": "event_reply", "arguments": {"text": "once"}}]}, {"content": "done"}]
    with ChatServer(reply) as model, OneBotServer() as napcat:
        fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": model.base_url, "api_key": CANARY}))
        fwj("resource", "write", "model", "m1", "--create", "--data",
            json.dumps({"provider": "p1", "model_id": "m-1", "capabilities": {"tool_call": True}}))
        fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", "events": ["message.*"]}))
        fwj("principal", "create", "p1", "--kind", "agent")
        fwj("binding", "set", "p1", "--agent", "a1")
        fwj("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--url", napcat.url)
        fwj("bot", "set", "qq", "--secret-stdin", input=SECRET)
        servers, ports = [], []
        for copy in hosts(home, tmp_path, 2):
            proc = subprocess.Popen([fw_bin(), "bot", "serve", "qq", "--listen", "127.0.0.1:0", "--json"], env=env_for(copy, FW_STATE=url),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            servers.append(proc)
            ports.append(json.loads(proc.stdout.readline())["http"])
        try:
            body = json.dumps(group_message("hello", message_id=4242)).encode()
            headers = {"Content-Type": "application/json", "X-Self-ID": str(SELF_ID), "X-Signature": signed(SECRET, body)}
            answers = [httpx.post(port, content=body, headers=headers, timeout=15).status_code for port in ports]  # the balancer retried
            assert answers == [204, 204]
            deadline = time.time() + 30
            while len(napcat.sent("send_group_msg")) < 1 and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)
        finally:
            for proc in servers:
                proc.send_signal(signal.SIGINT)
            outs = [proc.communicate(timeout=30) for proc in servers]
    assert len(napcat.sent("send_group_msg")) == 1  # one run, one reply
    events = state_rows_at(url, "SELECT status FROM bot_events")
    assert [e["status"] for e in events] == ["done"]
    lines = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.startswith("{")]
    assert sum(1 for r in lines if r.get("type") == "duplicate") == 1


def lines_until(proc, kind, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("{") and json.loads(line).get("type") == kind:
            return json.loads(line)
    raise AssertionError(f"no {kind!r} line from fw bot serve")


def test_a_socket_bots_actions_from_another_host_go_through_its_owner_and_the_next_owner_takes_over(home, tmp_path, database):
    """A reverse-WebSocket bot whose socket host A holds: a run on host B acts on it through A's
    outbox (woken by NOTIFY); A is SIGKILLed, the implementation connects to host C, which owns
    the bot with the next epoch, and B's next action goes through C."""
    import threading

    from fakes.onebot_server import ok
    from test_onebot import EVENT, TOKEN, napcat

    cluster, name = database
    url = cluster.url(name)
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "http://127.0.0.1:9/v1", "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "m-1", "capabilities": {"tool_call": True}}))
    fwj("resource", "write", "agent", "a1", "--create", "--data",
        json.dumps({"model": "m1", "events": ["message.*"], "allowed_platform_tools": ["platform_send_message"]}))
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1")
    fwj("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--access-token-stdin", input=TOKEN)
    host_a, host_b, host_c = hosts(home, tmp_path, 3)

    def serve(host):
        proc = subprocess.Popen([fw_bin(), "bot", "serve", "qq", "--listen", "127.0.0.1:0", "--json"], env=env_for(host, FW_STATE=url),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return proc, json.loads(proc.stdout.readline())["websocket"]

    def answering(ws, first_id):
        def answer():
            try:
                while True:
                    frame = json.loads(ws.recv(timeout=60))
                    frames.append((first_id, frame))
                    ws.send(json.dumps(ok({"message_id": first_id + len(frames)}, frame["echo"])))
            except Exception:
                return  # the socket closed
        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        return thread

    def send(text):
        done = subprocess.run([fw_bin(), "tool", "call", "--run", run, "platform_send_message", "--args",
                               json.dumps({"target_type": "group", "target_id": "30003", "text": text}), "--json"],
                              env=env_for(host_b, FW_STATE=url), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    frames: list = []
    server_a, ws_a_url = serve(host_a)
    server_c = None
    sockets = contextlib.ExitStack()
    try:
        ws_a = sockets.enter_context(napcat(ws_a_url))
        lines_until(server_a, "connected")
        run = json.loads(subprocess.run([fw_bin(), "event", "handle", "qq", "--event", json.dumps(EVENT), "--no-run", "--json"],
                                        env=env_for(host_b, FW_STATE=url), capture_output=True, text=True, check=True).stdout)["run"]["run_id"]
        answering(ws_a, 100)
        assert [send("one")["message_id"], send("two")["message_id"]] == ["101", "102"]
        owner = state_rows_at(url, "SELECT owner, epoch FROM onebot_owner WHERE bot = 'qq'")[0]
        assert owner["owner"].endswith(f":{server_a.pid}") and owner["epoch"] == 1
        server_a.kill()  # SIGKILL: the socket drops with it
        server_a.wait(10)
        ws_a.close()
        server_c, ws_c_url = serve(host_c)
        ws_c = sockets.enter_context(napcat(ws_c_url))
        lines_until(server_c, "connected")
        answering(ws_c, 200)
        assert send("three")["message_id"] == "203"
        owner = state_rows_at(url, "SELECT owner, epoch FROM onebot_owner WHERE bot = 'qq'")[0]
        assert owner["owner"].endswith(f":{server_c.pid}") and owner["epoch"] == 2
        checked = json.loads(subprocess.run([fw_bin(), "state", "check", "--json"], env=env_for(host_b, FW_STATE=url),
                                            capture_output=True, text=True, check=True).stdout)
        assert [(o["bot"], o["owner"], o["epoch"]) for o in checked["bot_owners"]] == [("qq", owner["owner"], 2)]
        assert checked["problems"] == []
        ws_c.close()
    finally:
        sockets.close()
        for proc in (server_a, server_c):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.communicate(timeout=30)
    assert [f["params"]["message"][0]["data"]["text"] for _, f in frames] == ["one", "two", "three"]
    assert [first for first, _ in frames] == [100, 100, 200]  # A sent the first two, C the third
    asked = state_rows_at(url, "SELECT status, asked_by FROM onebot_outbox ORDER BY id")
    assert [r["status"] for r in asked] == ["answered"] * 3 and all(r["asked_by"] != owner["owner"] for r in asked)
