"""Sessions, messages, turns, memory and the dispatcher, against the scripted chat server."""

import json
import os
import signal
import subprocess
import time

import pytest

pytestmark = pytest.mark.engines

from conftest import CANARY, fw, fw_bin, fwj, snapshot, state_rows
from fakes.chat_server import ChatServer


def setup(base_url, *agents, policy="mentioned", builtin=()):
    """A provider on the scripted server, a model, alice (a user) and one bound agent per name."""
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("principal", "create", "alice", "--kind", "user")
    for name in agents:
        fwj("agent", "create", name, "--model", "m1", *sum((["--builtin-tool", g] for g in builtin), []))
        fwj("principal", "create", name, "--kind", "agent")
        fwj("binding", "set", name, "--agent", name, "--policy", policy)


def post(session, author, text, code=0):
    return fwj("message", "post", session, "--as", author, text, code=code)


def messages(session):
    return [(m["author"], m["text"]) for m in fwj("message", "list", session)["messages"]]


def turns(session):
    return [(t["principal"], t["status"]) for t in fwj("session", "show", session)["session"]["turns"]]


def test_a_mention_gets_a_managed_turn_and_the_answer_lands_in_the_session(home):
    with ChatServer([{"content": "hello alice, ops here"}]) as server:
        setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops", "--title", "first")
        posted = post("s1", "alice", "hello @ops")
        assert posted["message"]["mentions"] == ["ops"]
        assert posted["turns"] == [{"id": 1, "principal": "ops", "status": "pending"}]
        summary = fwj("dispatch", "--once")
    assert summary["turns"] == {"run": 1, "answered": 1, "failed": 0, "cancelled": 0}
    assert messages("s1") == [("alice", "hello @ops"), ("ops", "hello alice, ops here")]
    request = server.requests[0]["json"]
    assert request["messages"][-1] == {"role": "user", "content": "alice: hello @ops"}
    sent = sorted(t["function"]["name"] for t in request["tools"])
    assert "framework_message_send" in sent and "framework_memory_write" in sent
    assert not any(n.startswith("framework_resource") for n in sent)  # no mount, no resource tools
    run_id = fwj("session", "show", "s1")["session"]["turns"][0]["run_id"]
    run = fwj("run", "show", run_id)
    assert (run["mode"], run["identity"], run["session"], run["status"]) == ("managed", "ops", "s1", "ended")


def test_the_chat_log_reads_like_one(home):
    with ChatServer([]) as server:
        setup(server.base_url, "ops")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    fw("message", "post", "s1", "--as", "alice", "@ops look [/red] here")
    log = fw("message", "list", "s1")
    assert log.exit_code == 0 and "alice: @ops look [/red] here" in log.stdout


@pytest.mark.parametrize("policy,expected", [("mentioned", []), ("all", [("ops", "pending")])])
def test_a_message_without_a_mention_makes_a_turn_only_under_policy_all(home, policy, expected):
    with ChatServer([]) as server:
        setup(server.base_url, "ops", policy=policy)
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    post("s1", "alice", "good morning everyone")
    assert turns("s1") == expected


def test_mentioning_a_principal_that_is_not_a_member_says_so_and_starts_nothing(home):
    with ChatServer([]) as server:
        setup(server.base_url, "ops")
    fwj("session", "create", "s1", "--member", "alice")
    doc = fwj("message", "post", "s1", "--as", "alice", "@ops are you there? cc @nobody")
    assert doc["turns"] == [] and doc["message"]["mentions"] == [] and doc["not_members"] == ["ops"]  # @nobody is no principal
    r = fw("message", "post", "s1", "--as", "alice", "@ops again")
    assert r.exit_code == 0 and "@ops is not a member of s1" in r.stderr and "fw session add-member s1 ops" in r.stderr, r
    assert "not a member" not in r.stdout
    assert "not_members" not in fwj("message", "post", "s1", "--as", "alice", "no mention at all")


def test_the_backlog_waits_for_enable_but_not_for_an_ended_session(home):
    with ChatServer([{"content": "answered"}], repeat_last=True) as server:
        setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        fwj("session", "create", "s2", "--member", "alice", "--member", "ops")
        fwj("binding", "disable", "ops")
        post("s1", "alice", "@ops one")
        post("s2", "alice", "@ops two")
        assert turns("s1") == [("ops", "backlog")] and turns("s2") == [("ops", "backlog")]
        assert fwj("dispatch", "--once")["turns"]["run"] == 0
        fwj("session", "end", "s2")
        enabled = fwj("binding", "enable", "ops")
        assert enabled["turns"]["released"] == 1
        assert fwj("dispatch", "--once")["turns"] == {"run": 1, "answered": 1, "failed": 0, "cancelled": 0}
    assert messages("s1")[-1] == ("ops", "answered")
    assert turns("s2") == [("ops", "cancelled")]
    assert len(server.requests) == 1


def test_a_run_that_disables_its_own_binding_cancels_its_other_turns(home):
    script = [
        {"tool_calls": [{"name": "framework_agent_set_enabled", "arguments": {"principal": "ops", "enabled": False}}]},
        {"content": "I switched myself off."},
    ]
    with ChatServer(script) as server:
        setup(server.base_url, "ops", builtin=("resource_management",))
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        post("s1", "alice", "@ops please stop")
        post("s1", "alice", "@ops and this too")
        summary = fwj("dispatch", "--once")
    assert summary["turns"] == {"run": 1, "answered": 1, "failed": 0, "cancelled": 0}
    assert turns("s1") == [("ops", "done"), ("ops", "cancelled")]
    assert messages("s1")[-1] == ("ops", "I switched myself off.")
    assert fwj("binding", "list")["bindings"][0]["enabled"] is False
    assert len(server.requests) == 2


def test_after_session_end_nothing_of_the_session_acts(home):
    script = [
        {"tool_calls": [{"name": "framework_harness_session_end", "arguments": {"session": "s1"}}]},
        {"tool_calls": [{"name": "framework_memory_write", "arguments": {"key": "k", "value": 1}},
                        {"name": "framework_message_send", "arguments": {"session": "s1", "text": "still here"}},
                        {"name": "framework_memory_write", "arguments": {"bad": "parameters"}}]},
        {"content": "my final words"},
    ]
    with ChatServer(script) as server:
        setup(server.base_url, "ops", builtin=("resource_management",))
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        post("s1", "alice", "@ops end it")
        post("s1", "alice", "@ops again")
        summary = fwj("dispatch", "--once")
    assert summary["turns"]["cancelled"] == 1
    tool_answers = [json.loads(m["content"]) for m in server.requests[2]["json"]["messages"] if m["role"] == "tool"]
    assert [a.get("error", {}).get("code") for a in tool_answers] == [None, "session_ended", "session_ended", "session_ended"], tool_answers
    assert messages("s1") == [("alice", "@ops end it"), ("alice", "@ops again")]  # nothing more was posted
    assert turns("s1") == [("ops", "cancelled"), ("ops", "cancelled")]
    assert fwj("memory", "list", "ops")["keys"] == []
    before = snapshot(home)
    r = fw("message", "post", "s1", "--as", "alice", "anyone?", "--json")
    assert r.exit_code == 5 and r.json["error"]["code"] == "session_ended", r
    assert "`fw session create s1-2 --member alice,ops`" in r.json["error"]["hint"], r
    assert messages("s1")[-1] == ("alice", "@ops again")
    after = snapshot(home)
    assert {k for k in after if after[k] != before.get(k)} <= {"state.db", "state.db-wal", "state.db-shm"}


def test_a_non_member_is_denied_messages_even_with_resource_management(home):
    script = [
        {"tool_calls": [{"name": "framework_message_send", "arguments": {"session": "private", "text": "let me in"}},
                        {"name": "framework_message_list", "arguments": {"session": "private"}},
                        {"name": "framework_session_list", "arguments": {}}]},
        {"content": "no luck"},
    ]
    with ChatServer(script) as server:
        setup(server.base_url, "ops", "spy", builtin=("resource_management",))
        fwj("session", "create", "private", "--member", "alice", "--member", "ops")
        fwj("session", "create", "open", "--member", "alice", "--member", "spy")
        post("open", "alice", "@spy what is in private?")
        fwj("dispatch", "--once")
    tool_messages = [json.loads(m["content"]) for m in server.requests[1]["json"]["messages"] if m["role"] == "tool"]
    assert [t.get("error", {}).get("code") for t in tool_messages[:2]] == ["denied", "denied"]
    assert [s["name"] for s in tool_messages[2]["sessions"]] == ["open"]
    assert messages("private") == []
    audit = fwj("audit", "list")["entries"]
    assert [(a["caller"], a["tool"], a["outcome"], a["error"]) for a in audit[:2]] == [
        ("spy", "framework_message_send", "refused", "denied"), ("spy", "framework_message_list", "refused", "denied")]


def test_memory_belongs_to_the_identity_and_lasts_across_runs(home):
    script = [
        {"tool_calls": [{"name": "framework_memory_write", "arguments": {"key": "colour", "value": {"name": "teal"}}}]},
        {"content": "noted"},
        {"tool_calls": [{"name": "framework_memory_read", "arguments": {"key": "colour"}}]},
        {"content": "it was teal"},
        {"tool_calls": [{"name": "framework_memory_read", "arguments": {"key": "colour"}}]},
        {"content": "I know nothing"},
    ]
    with ChatServer(script) as server:
        setup(server.base_url, "ops", "other")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops", "--member", "other")
        post("s1", "alice", "@ops remember teal")
        fwj("dispatch", "--once")
        post("s1", "alice", "@ops what colour?")
        fwj("dispatch", "--once")
        post("s1", "alice", "@other what colour did ops say?")
        fwj("dispatch", "--once")
    read_by_ops = json.loads(server.requests[3]["json"]["messages"][-1]["content"])
    assert read_by_ops == {"key": "colour", "value": {"name": "teal"}}
    read_by_other = json.loads(server.requests[5]["json"]["messages"][-1]["content"])
    assert read_by_other["error"]["code"] == "not_found"
    assert fwj("memory", "read", "ops", "colour")["value"] == {"name": "teal"}
    assert fwj("memory", "list", "other")["keys"] == []
    fwj("memory", "delete", "ops", "colour")
    assert fw("memory", "read", "ops", "colour", "--json").exit_code == 3


def test_six_processes_posting_at_once_lose_nothing_and_keep_their_order(home):
    with ChatServer([]) as server:
        setup(server.base_url, "ops")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    script = "; ".join(f"{fw_bin()} message post s1 --as alice 'p{{i}}-{j}'" for j in range(8))
    procs = [subprocess.Popen(["bash", "-c", script.replace("{i}", str(i))], env={**os.environ, "FW_HOME": str(home)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(6)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    texts = [text for _, text in messages("s1")]
    assert sorted(texts) == sorted(f"p{i}-{j}" for i in range(6) for j in range(8))
    for i in range(6):
        assert [t for t in texts if t.startswith(f"p{i}-")] == [f"p{i}-{j}" for j in range(8)]


def test_two_agents_answering_each_other_stop_at_the_hop_limit(home):
    with ChatServer([{"content": "@ping @pong over to you"}], repeat_last=True) as server:  # each mentions the other
        setup(server.base_url, "ping", "pong", policy="all")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ping", "--member", "pong")
        post("s1", "alice", "@ping start")  # under policy all, both get a turn
        summary = fwj("dispatch", "--once")
    hops = [m["hop"] for m in fwj("message", "list", "s1")["messages"]]
    assert max(hops) == 8
    assert all(m["hop"] < 8 for m in fwj("message", "list", "s1")["messages"] if m["author"] == "alice")
    shown = fwj("session", "show", "s1")["session"]
    assert all(t["hop"] < 8 for t in shown["turns"])
    assert summary["turns"]["run"] == len(shown["turns"]) == len(server.requests)


def test_a_failing_model_fails_its_turn_only(home):
    with ChatServer([{"status": 500, "body": f"boom {CANARY}"}, {"content": "fine"}]) as server:
        setup(server.base_url, "ops", "helper")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops", "--member", "helper")
        post("s1", "alice", "@ops and @helper")
        summary = fwj("dispatch", "--once", "--workers", "1")
    assert summary["turns"] == {"run": 2, "answered": 1, "failed": 1, "cancelled": 0}
    failed = [t for t in fwj("session", "show", "s1")["session"]["turns"] if t["status"] == "failed"]
    assert "unavailable" in failed[0]["error"] and CANARY not in failed[0]["error"]


def test_harness_session_tools_for_the_manager(home):
    with ChatServer([]) as server:
        setup(server.base_url, "ops")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    post("s1", "alice", "hi")
    listed = json.loads(fw("tool", "call", "--manager", "harness_session_list").stdout)
    assert listed == {"sessions": [{"name": "s1", "title": None, "members": ["alice", "ops"], "status": "open", "messages": 1}]}
    ended = json.loads(fw("tool", "call", "--manager", "harness_session_end", "--args", '{"session": "s1"}').stdout)
    assert ended["session"]["status"] == "ended"
    names = [t["name"] for t in fwj("tool", "list", "--manager")["tools"]]
    assert "harness_session_end" in names and "message_send" not in names
    r = fw("tool", "call", "--manager", "message_send", "--args", '{"session": "s1", "text": "x"}')
    assert r.exit_code == 3 and r.json["error"]["code"] == "not_found"


def test_bad_session_input_changes_nothing(home):
    with ChatServer([]) as server:
        setup(server.base_url, "ops")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    fwj("principal", "create", "carol", "--kind", "user")
    before = snapshot(home)
    for args, code in (
        (["session", "create", "s1", "--member", "alice"], 6),
        (["session", "create", "s2", "--member", "nobody"], 3),
        (["session", "create", "Bad Name", "--member", "alice"], 4),
        (["message", "post", "s1", "--as", "nobody", "hi"], 3),  # no such principal
        (["message", "post", "s1", "--as", "carol", "hi"], 5),  # a principal, not a member
        (["message", "post", "nope", "--as", "alice", "hi"], 3),
        (["message", "post", "s1", "--as", "alice"], 2),
        (["message", "list", "s1", "--limit", "0"], 4),
        (["memory", "read", "ops", "missing"], 3),
    ):
        r = fw(*args, "--json")
        assert r.exit_code == code, (args, r)
    assert snapshot(home) == before


def test_dispatch_serves_until_ctrl_c(home):
    with ChatServer([{"content": "served"}], repeat_last=True) as server:
        setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        proc = subprocess.Popen([fw_bin(), "dispatch", "--workers", "2"], env={**os.environ, "FW_HOME": str(home)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        post("s1", "alice", "@ops are you there?")
        deadline = time.time() + 30
        while len(messages("s1")) < 2 and time.time() < deadline:
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert messages("s1")[-1] == ("ops", "served")
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "Ctrl-C" in err


def test_texts_holding_a_stored_key_are_refused_and_nothing_is_stored(home):
    with ChatServer([]) as server:
        setup(server.base_url, "ops")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    for args, field in (
        (["session", "create", "s2", "--member", "alice", "--title", f"about {CANARY}"], "title"),
        (["message", "post", "s1", "--as", "alice", f"the key is {CANARY}"], "text"),
    ):
        r = fw(*args, "--json")
        assert r.exit_code == 4 and r.json["error"]["field"] == field, r
    assert messages("s1") == [] and [s["name"] for s in fwj("session", "list")["sessions"]] == ["s1"]
    assert CANARY not in json.dumps(state_rows(home, "SELECT * FROM sessions") + state_rows(home, "SELECT * FROM messages"))
    if (home / "state.db").exists():
        assert CANARY.encode() not in (home / "state.db").read_bytes()


@pytest.mark.hand_written_canary('skills/default/notes/SKILL.md')
def test_what_a_tool_answers_reaches_the_model_redacted(home):
    script = [{"tool_calls": [{"name": "skill__notes", "arguments": {}}]}, {"content": "ok"}]
    with ChatServer(script) as server:
        setup(server.base_url, "ops")
        (home / "skills/default/notes").mkdir(parents=True)
        (home / "skills/default/notes/SKILL.md").write_text(f"---\nname: notes\ndescription: d\n---\nuse {CANARY}\n")
        fwj("resource", "write", "agent", "ops", "--data", '{"skills": ["notes"]}')
        fw("agent", "run", "ops", "--message", "read your notes")
    sent = server.requests[1]["json"]["messages"][-1]["content"]
    assert "[redacted]" in sent and CANARY not in json.dumps(server.requests[1]["json"])


def test_a_dispatcher_killed_mid_claim_blocks_nobody(home):
    from framework_cli.home.store import Home
    from framework_cli.state.store import StateStore

    with ChatServer([{"content": "answered"}], repeat_last=True) as server:
        setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        post("s1", "alice", "@ops first")
        post("s1", "alice", "@ops second")
        with StateStore.open(Home(home)) as store, store.transaction():  # as a dispatcher killed before its run began
            store.execute("UPDATE turns SET status = 'running', started_at = '2026-01-01T00:00:00.000Z' WHERE id = 1")
        summary = fwj("dispatch", "--once")
    assert turns("s1") == [("ops", "done"), ("ops", "done")]  # taken back, and run again
    assert summary["turns"]["answered"] == 2


def test_home_check_reports_a_damaged_state_database(home, state_engine):
    if state_engine == "postgresql":
        pytest.skip("state.db's damage: SQLite's (PostgreSQL keeps its own pages; `fw state check` reaches it)")
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice")
    (home / "state.db").write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        (home / f"state.db{suffix}").unlink(missing_ok=True)
    r = fw("home", "check", "--json")
    assert r.exit_code == 4 and any(p["path"] == "state.db" for p in r.json["problems"]), r
    assert fw("session", "list", "--json").json["error"]["code"] == "corrupt"


def test_bad_numbers_and_text_are_clear_errors(home):
    with ChatServer([]) as server:
        setup(server.base_url, "ops")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    assert fw("task", "show", "100000000000000000000", "--json").json["error"]["code"] in ("not_found", "invalid")
    assert fw("message", "list", "s1", "--limit", "100000000000000000000", "--json").exit_code in (0, 4)
    r = fw("agent", "run", "ops", "--message", "x", "--timeout", "-1", "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
    proc = subprocess.run([fw_bin(), "message", "post", "s1", "--as", "alice", "-", "--json"], input=b"\xff\xfe",
                          capture_output=True, env={**os.environ, "FW_HOME": str(home)}, timeout=60)
    assert proc.returncode == 4 and json.loads(proc.stdout)["error"]["code"] == "invalid"
    hint = fw("--home", str(home), "message", "post", "nope", "--as", "alice", "x").stderr
    assert f"--home {home}" in hint
