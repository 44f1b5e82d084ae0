"""What human output says: what a run left out and why, long tool lists, "Unchanged", a
mistyped confirmation apart from a stale plan, one JSON document for a bare `fw`, and one
wording for counts."""

import json

from conftest import fw, fwj, make_basics, snapshot
from fakes.chat_server import ChatServer
from test_events import setup_bot


def test_run_start_prints_what_was_left_out_and_why(home):
    make_basics()
    fwj("resource", "write", "mcp", "broken", "--create", "--data", json.dumps({"transport": "stdio", "command": "/nonexistent/server"}))
    fwj("agent", "edit", "a1", "--mcp", "broken")
    out = fw("run", "start", "--agent", "a1").stdout
    assert "left out (1):" in out and "source_unavailable" in out and "mcp__broken__*" in out, out


def test_a_long_tool_list_is_counted_and_listed_whole_with_v(home):
    make_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management")
    started = fwj("run", "start", "--agent", "a1")
    assert len(started["tools"]) > 12
    short = fw("run", "show", started["run_id"]).stdout
    assert f"tools: {len(started['tools'])} (list them with -v" in short and "framework_resource_list" not in short
    full = fw("run", "show", started["run_id"], "-v").stdout
    words = full.replace(",", " ").split()
    assert all(name in words for name in started["tools"]), full  # every name whole, none cut
    assert max(len(line) for line in full.splitlines()) <= 100


def test_a_write_that_changes_nothing_says_unchanged(home):
    make_basics()
    fwj("resource", "write", "agent", "a1", "--data", json.dumps({"description": "d"}))
    before = snapshot(home)
    out = fw("resource", "write", "agent", "a1", "--data", json.dumps({"description": "d"})).stdout
    assert out.startswith("Unchanged: agent a1"), out
    assert snapshot(home) == before
    assert fw("resource", "write", "agent", "a1", "--data", json.dumps({"description": "e"})).stdout.startswith("Saved agent a1")


def test_a_mistyped_confirmation_is_told_apart_from_a_stale_plan(home):
    make_basics()
    before = snapshot(home)
    typo = fw("resource", "delete", "model", "m1", "--recursive", "--confirm", "agent/a11,model/m1", "--json").json["error"]
    assert typo["code"] == "stale_confirmation" and typo["reason"] == "not_a_plan"
    assert "did you mean agent/a1" in typo["message"]
    human = fw("resource", "delete", "model", "m1", "--recursive", "--confirm", "agent/a1,model/m")
    assert "not a plan of model/m1" in human.stderr and "What changed since" not in human.stderr, human
    assert snapshot(home) == before
    fwj("agent", "create", "a2", "--model", "m1")  # the home moves on: the old plan is stale
    stale = fw("resource", "delete", "model", "m1", "--recursive", "--confirm", "agent/a1,model/m1", "--json").json["error"]
    assert stale["reason"] == "plan_changed" and stale["changes"]["added"] == ["agent/a2"]
    human = fw("resource", "delete", "model", "m1", "--recursive", "--confirm", "agent/a1,model/m1")
    assert "What changed since the confirmed plan" in human.stderr and "added: agent/a2" in human.stderr


def test_fw_json_with_no_command_prints_one_json_document(home):
    result = fw(env={"FW_JSON": "1"})
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["code"] == "usage"
    assert "Usage" not in result.output


def test_an_event_run_counts_as_agent_run_does(home):
    with ChatServer([{"content": "hello"}]) as server:
        setup_bot(server.base_url)
        out = fw("bot", "local", "say", "desk", "--from", "alice", "hi").stdout
    assert "1 round, 0 tool calls" in out and "(s)" not in out, out


def test_a_filtered_listing_that_matches_nothing_says_so_not_that_there_are_none(home):
    make_basics(with_key=False)
    fwj("run", "start", "--agent", "a1")
    fwj("tool", "call", "--manager", "resource_list", "--args", '{"kind": "agent"}')
    for args, empty in ((["run", "list", "--status", "ended"], "No runs match these filters."),
                        (["audit", "list", "--tool", "nope"], "No tool calls match these filters."),
                        (["task", "list", "--status", "backlog"], "No tasks match these filters."),
                        (["turn", "list", "--status", "failed"], "No turns match these filters.")):
        shown = fw(*args)
        assert shown.exit_code == 0 and shown.stdout.strip() == empty, (args, shown)
    assert fw("task", "list").stdout.strip() == "No tasks yet."


def test_dispatch_counts_a_turn_that_gave_no_answer(home):
    from test_sessions import post, setup

    with ChatServer([{"content": "   "}]) as server:  # a blank answer: the turn is done, nothing is posted
        setup(server.base_url, "ops")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        post("s1", "alice", "@ops anything?")
        shown = fw("dispatch", "--once")
    assert shown.exit_code == 0, shown
    assert "Turns run: 1, answered: 0, failed: 0, cancelled: 0, without an answer: 1." in shown.stdout, shown


def test_an_errors_items_are_listed_once_and_before_its_hint(home):
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("principal", "create", "x", "--kind", "agent")
    fwj("session", "create", "s1", "--member", "alice", "--member", "x")
    shown = fw("principal", "delete", "x")  # the message names what holds it: not listed again
    assert shown.exit_code == 6 and shown.stderr.count("session/s1") == 1, shown
    fwj("resource", "write", "agent", "a1", "--create", "--data", "{}")
    fwj("binding", "set", "x", "--agent", "a1")
    shown = fw("principal", "delete", "x")  # a list the message does not hold: between it and the hint
    lines = shown.stderr.splitlines()
    assert shown.exit_code == 6 and lines[1] == "  binding/x" and lines[-1].startswith("Hint: "), shown
