"""Events and the tools they bring, end to end: a local bot, the scripted chat-completions
server and the real fw between them (CONTRACT section 9, seed B)."""

import json
import os

import anyio
import pytest

pytestmark = pytest.mark.engines
from conftest import CANARY, audit_entries, fw, fw_bin, fwj, run_record_text, write_run_record
from fakes.chat_server import ChatServer
from mcp import Client
from mcp.client.stdio import StdioServerParameters

NOWHERE = "http://127.0.0.1:9/v1"  # for runs that never reach the model


def setup_bot(base_url=NOWHERE, *, events=("message.*",), platform_tools=(), tool_call=True, harness=None):
    """Agent a1 (events, platform tools) run by principal p1, whose binding handles bot desk."""
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": tool_call}}))
    data = {"model": "m1", "events": list(events), "allowed_platform_tools": list(platform_tools)}
    if harness is not None:
        fwj("resource", "write", "harness", "h1", "--create", "--data", json.dumps(harness))
        data["harness"] = "h1"
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps(data))
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1", "--policy", "all")  # every message, mentioned or not
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")


def say(*args, code=0):
    return fwj("bot", "local", "say", "desk", *args, code=code)


def log():
    return fwj("bot", "local", "log", "desk")["actions"]


def call(run_id, tool, args=None, code=0):
    r = fw("tool", "call", "--run", run_id, tool, "--args", json.dumps(args or {}))
    assert r.exit_code == code, r
    return r.json


def reasons(run):
    return {u["name"]: u["reason"] for u in run["unavailable_tools"]}


def sent_tools(request):
    return sorted(t["function"]["name"] for t in request["json"].get("tools", []))


def audit(home):
    return audit_entries(home)


# -- an event handled end to end -------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_a_group_message_is_answered_through_event_reply(home, stream):
    script = [{"tool_calls": [{"name": "event_reply", "arguments": {"text": "hello, g1"}}], "stream": stream},
              {"content": "I replied.", "stream": stream}]
    with ChatServer(script) as server:
        setup_bot(server.base_url)
        doc = say("--from", "alice", "--group", "g1", "@bot what is new?")
    assert doc["handled"] is True
    assert doc["event"]["group"] == {"id": "g1"} and doc["event"]["actor"]["id"] == "alice"
    assert doc["result"]["status"] == "completed" and doc["result"]["answer"] == "I replied."
    assert doc["result"]["tool_calls"] == [{"name": "event_reply", "outcome": "ok"}]
    first = server.requests[0]["json"]
    assert first["messages"][-1] == {"role": "user", "content": "@bot what is new?"}  # the text, literally
    assert "event_reply" in sent_tools(server.requests[0]) and "platform_send_message" not in sent_tools(server.requests[0])
    # the reply, and only the reply, reached the platform: addressed to the group; the answer text was not sent
    assert [(a["api"], a["params"]) for a in log()] == [
        ("send_message", {"target_type": "group", "target_id": "g1", "reply_to": doc["event"]["message"]["id"], "text": "hello, g1"})]
    run = fwj("run", "show", doc["run"]["run_id"])
    assert run["status"] == "ended" and (run["mode"], run["identity"], run["agent"]) == ("managed", "p1", "a1")
    assert run["bot"] == "desk" and run["event"] == doc["event"]
    caps = run["platform_capabilities"]
    assert (caps["bot"], caps["adapter"]) == ("desk", "local") and "send_message" in caps["supported_apis"]
    assert caps["authorized_tools"] == [n for n in run["tools"] if n.startswith(("event_", "platform_"))]
    assert [line["tool"] for line in audit(home)] == ["event_reply"]


def test_an_answer_without_event_reply_is_sent_nowhere(home):
    with ChatServer([{"content": "I would say hi"}]) as server:
        setup_bot(server.base_url)
        doc = say("--from", "alice", "hi")
    assert doc["handled"] is True and doc["result"]["answer"] == "I would say hi"
    assert log() == []


def test_an_event_the_agent_did_not_select_starts_nothing(home):
    with ChatServer([{"content": "should not be asked"}]) as server:
        setup_bot(server.base_url)
        event = {"type": "friend.request_received", "actor": {"id": "bob"}, "request_id": "r1"}
        doc = fwj("event", "handle", "desk", "--event", json.dumps(event))
    assert doc == {"handled": False, "reason": "event_not_selected"}
    assert server.requests == [] and fwj("run", "list")["runs"] == [] and log() == []


def test_a_disabled_binding_handles_nothing(home):
    setup_bot()
    fwj("binding", "disable", "p1")
    doc = say("--from", "alice", "hi")
    assert (doc["handled"], doc["reason"]) == (False, "binding_disabled")
    assert fwj("run", "list")["runs"] == []
    shown = fw("bot", "local", "say", "desk", "--from", "alice", "hi again")  # the hint names the principal
    assert shown.exit_code == 0 and "`fw binding enable p1`" in shown.stdout, shown
    shown = fw("event", "handle", "desk", "--event", json.dumps({"type": "message.received", "actor": {"id": "alice"},
                                                                 "message": {"id": "m9", "text": "hi"}}))
    assert shown.exit_code == 0 and "`fw binding enable p1`" in shown.stdout, shown


def test_a_selected_friend_request_is_described_to_the_model_and_answered(home):
    script = [{"tool_calls": [{"name": "event_respond_friend_request", "arguments": {"approve": True, "remark": "Bob"}}]},
              {"content": "accepted"}]
    with ChatServer(script) as server:
        setup_bot(server.base_url, events=("friend.*",), platform_tools=("platform_get_friend_list",))
        event = {"type": "friend.request_received", "actor": {"id": "bob", "name": "Bob"}, "request_id": "r1"}
        doc = fwj("event", "handle", "desk", "--event", json.dumps(event))
    assert doc["result"]["tool_calls"] == [{"name": "event_respond_friend_request", "outcome": "ok"}]
    prompt = server.requests[0]["json"]["messages"][-1]["content"]
    assert "friend.request_received" in prompt and "Bob" in prompt
    assert log()[-1]["params"] == {"request_id": "r1", "approve": True, "remark": "Bob"}
    run = doc["run"]
    assert call_after_end(run["run_id"]) == "run_ended"


def call_after_end(run_id):
    r = fw("tool", "call", "--run", run_id, "platform_get_friend_list")
    return r.json["error"]["code"]


def test_a_malformed_event_is_invalid_naming_the_field_and_starts_nothing(home):
    setup_bot()
    cases = [
        ({"type": "message.received", "actor": {"id": "a"}}, "message"),
        ({"type": "message.sent", "actor": {"id": "a"}}, "type"),
        ({"type": "message.received", "actor": {"id": 7}, "message": {"id": "1", "text": "x"}}, "actor.id"),
        ({"type": "message.received", "actor": {"id": "a"}, "message": {"id": "1", "text": "x"}, "colour": "red"}, "colour"),
        ({"type": "group.member_joined", "actor": {"id": "a"}}, "group"),
        ([], "(event)"),
    ]
    for event, field in cases:
        r = fw("event", "handle", "desk", "--event", json.dumps(event), "--json")
        assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
        assert r.json["error"]["field"] == field, r
    r = fw("event", "handle", "desk", "--event", "{not json", "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid"  # a malformed value
    assert fwj("run", "list")["runs"] == []


def test_run_start_with_a_bot_and_an_event_is_event_handle_no_run(home):
    setup_bot()
    event = json.dumps({"type": "message.received", "actor": {"id": "alice"}, "group": {"id": "g1"}, "message": {"id": "m1", "text": "hi"}})
    started = fwj("run", "start", "--principal", "p1", "--bot", "desk", "--event", event, "--lease", "60")
    handled = fwj("event", "handle", "desk", "--event", event, "--no-run")
    assert handled["handled"] is True and "result" not in handled
    for run in (started, handled["run"]):  # run start prints the run as `fw run start --json` does
        assert run["status"] == "active" and run["event"]["message"] == {"id": "m1", "text": "hi"}
    assert started["lease_seconds"] == 60
    assert started["tools"] == handled["run"]["tools"]
    wrong = fw("run", "start", "--principal", "p2", "--bot", "desk", "--event", event, "--json")
    assert wrong.exit_code == 4 and wrong.json["error"]["field"] == "principal"
    for args in (["--principal", "p1", "--bot", "desk"], ["--agent", "a1", "--bot", "desk", "--event", event]):
        r = fw("run", "start", *args, "--json")
        assert r.exit_code == 2 and r.json["error"]["code"] == "usage", r
    not_selected = json.dumps({"type": "group.member_left", "actor": {"id": "x"}, "group": {"id": "g1"}})
    refused = fwj("run", "start", "--principal", "p1", "--bot", "desk", "--event", not_selected, code=5)["error"]
    assert (refused["code"], refused["reason"]) == ("denied", "event_not_selected")


# -- the projection's reasons, each from a case built for it ------------------------------------
def start_for(text="hi", group="g1"):
    args = ["--from", "alice", "--no-run", text] + (["--group", group] if group else [])
    return say(*args)["run"]


def test_a_runner_without_call_gets_no_event_or_platform_tool(home):
    setup_bot(platform_tools=("platform_get_group_list",),
              harness={"type": "ext", "capabilities": {"tool_calling": True}, "permissions": {"tools": ["detail"]}})
    run = start_for()
    assert run["tools"] == []
    assert set(reasons(run).values()) == {"runner_call_permission_missing"}
    assert {"event_reply", "event_kick_member", "platform_get_group_list"} <= set(reasons(run))
    assert run["platform_capabilities"]["authorized_tools"] == []
    assert run["platform_capabilities"]["unavailable_tools"] == [u for u in run["unavailable_tools"] if u["name"].startswith(("event_", "platform_"))]


def write_platform_tools_by_hand(home, *names):
    """What an older catalogue, or a person, may have left in a file: fw itself refuses it."""
    path = home / "agents/default/a1.yaml"
    text = path.read_text()
    assert "allowed_platform_tools: []" in text
    path.write_text(text.replace("allowed_platform_tools: []", "allowed_platform_tools:\n" + "".join(f"  - {n}\n" for n in names)))


def test_a_name_outside_the_catalogue_written_by_hand_loads_and_is_unknown(home):
    setup_bot()
    write_platform_tools_by_hand(home, "platform_teleport", "call_platform_api")
    assert fwj("agent", "show", "a1")["data"]["allowed_platform_tools"] == ["platform_teleport", "call_platform_api"]
    run = start_for()
    assert reasons(run)["platform_teleport"] == "unknown_tool" and reasons(run)["call_platform_api"] == "unknown_tool"
    assert not any(n in run["tools"] for n in ("platform_teleport", "call_platform_api"))
    assert fw("home", "check").exit_code == 0


def test_an_api_withheld_by_the_bot_is_adapter_api_unsupported(home):
    setup_bot(platform_tools=("platform_send_message",))
    shown = fwj("bot", "set", "desk", "--unsupported-api", "send_message", "--unsupported-api", "get_group_info")
    assert "send_message" not in shown["supported_apis"] and shown["unsupported_apis"] == ["send_message", "get_group_info"]
    run = start_for(group=None)
    assert reasons(run)["event_reply"] == "adapter_api_unsupported"
    assert reasons(run)["platform_send_message"] == "adapter_api_unsupported"
    # the first reason that applies: the API is missing before the private message lacks a group
    assert reasons(run)["event_get_group"] == "adapter_api_unsupported"
    assert reasons(run)["event_get_group_member"] == "event_target_unavailable"


def test_an_event_tool_for_another_event_type_is_event_incompatible(home):
    setup_bot()
    write_platform_tools_by_hand(home, "event_respond_friend_request")
    run = start_for()
    assert reasons(run)["event_respond_friend_request"] == "event_incompatible"
    assert "event_respond_friend_request" not in run["tools"]


def test_a_private_message_has_no_group_for_event_get_group(home):
    setup_bot()
    run = start_for(group=None)
    assert reasons(run)["event_get_group"] == "event_target_unavailable"
    for name in ("event_get_group_member", "event_mute_member", "event_unmute_member", "event_kick_member"):
        assert reasons(run)[name] == "event_target_unavailable"
    assert {"event_reply", "event_delete_message", "event_get_actor"} <= set(run["tools"])
    call(run["run_id"], "event_reply", {"text": "hi in private"})
    assert log()[-1]["params"] == {"target_type": "person", "target_id": "alice", "text": "hi in private"}


def test_platform_send_message_is_absent_unless_chosen(home):
    setup_bot()
    run = start_for()
    assert "platform_send_message" not in run["tools"] and "platform_send_message" not in reasons(run)
    refused = call(run["run_id"], "platform_send_message", {"target_type": "group", "target_id": "g1", "text": "x"}, code=5)
    assert refused["error"]["code"] == "denied" and log() == []
    fwj("agent", "edit", "a1", "--add-platform-tool", "platform_send_message")
    chosen = start_for()
    assert "platform_send_message" in chosen["tools"]
    call(chosen["run_id"], "platform_send_message", {"target_type": "person", "target_id": "alice", "text": "psst"})
    assert log()[-1]["params"] == {"target_type": "person", "target_id": "alice", "text": "psst"}


# -- checks at every call ----------------------------------------------------------------------
def test_a_forged_kick_with_a_user_id_is_invalid_and_kicks_nobody(home):
    script = [{"tool_calls": [{"name": "event_kick_member", "arguments": {"user_id": "bob"}}]}, {"content": "could not"}]
    with ChatServer(script) as server:
        setup_bot(server.base_url, platform_tools=("platform_get_group_member_list",))
        say("--from", "bob", "--group", "g1", "--no-run", "I am here too")
        doc = say("--from", "alice", "--group", "g1", "kick bob")
    assert doc["result"]["tool_calls"] == [{"name": "event_kick_member", "outcome": "error", "error": "invalid"}]
    assert json.loads(server.requests[1]["json"]["messages"][-1]["content"])["error"]["code"] == "invalid"
    assert log() == []
    run = start_for()
    members = call(run["run_id"], "platform_get_group_member_list", {"group_id": "g1"})["members"]
    assert sorted(m["user_id"] for m in members) == ["alice", "bob"]
    line = [a for a in audit(home) if a["tool"] == "event_kick_member"][0]
    assert (line["outcome"], line["error"], line["params"]) == ("error", "invalid", {"user_id": "string"})


def test_an_event_tool_acts_only_on_the_frozen_ids(home):
    setup_bot()
    say("--from", "bob", "--group", "g1", "--no-run", "hello")
    run = start_for("mute me")
    call(run["run_id"], "event_mute_member", {"duration": 60})
    assert log()[-1]["params"] == {"group_id": "g1", "user_id": "alice", "duration": 60}
    muted = say("--from", "alice", "--group", "g1", "--no-run", "can I speak?", code=5)
    assert muted["error"]["code"] == "denied"
    call(run["run_id"], "event_unmute_member")
    call(run["run_id"], "event_kick_member")
    assert log()[-1] == {**log()[-1], "api": "kick_member", "params": {"group_id": "g1", "user_id": "alice"}}
    for forged in ({"group_id": "g2"}, {"target_id": "bob", "text": "x"}):
        assert call(run["run_id"], "event_reply", forged, code=4)["error"]["code"] == "invalid"


def test_a_bot_set_offline_during_a_run_refuses_the_next_call(home):
    setup_bot()
    run = start_for()
    call(run["run_id"], "event_reply", {"text": "first"})
    before = log()
    fwj("bot", "set", "desk", "--offline")
    assert fwj("bot", "show", "desk")["online"] is False
    refused = call(run["run_id"], "event_reply", {"text": "second"}, code=7)
    assert (refused["error"]["code"], refused["error"]["reason"]) == ("unavailable", "adapter_offline")
    assert log() == before
    assert audit(home)[-1]["error"] == "unavailable"
    fwj("bot", "set", "desk", "--online")
    call(run["run_id"], "event_reply", {"text": "third"})
    fwj("bot", "remove", "desk")
    gone = call(run["run_id"], "event_reply", {"text": "fourth"}, code=7)
    assert gone["error"]["reason"] == "adapter_offline"


def test_an_api_withdrawn_during_a_run_is_refused(home):
    setup_bot()
    run = start_for()
    assert "event_reply" in run["tools"]
    fwj("bot", "set", "desk", "--unsupported-api", "send_message")
    refused = call(run["run_id"], "event_reply", {"text": "x"}, code=7)
    assert (refused["error"]["code"], refused["error"]["reason"]) == ("unavailable", "adapter_api_unsupported")
    assert log() == []
    fwj("bot", "set", "desk", "--unsupported-api", "")
    call(run["run_id"], "event_reply", {"text": "back"})
    assert [a["api"] for a in log()] == ["send_message"]


def test_an_offline_bot_in_the_loop_answers_the_model_with_the_refusal(home):
    script = [{"tool_calls": [{"name": "event_reply", "arguments": {"text": "hi"}}]}, {"content": "offline"}]
    with ChatServer(script) as server:
        setup_bot(server.base_url)
        fwj("bot", "set", "desk", "--offline")
        doc = say("--from", "alice", "hi")
    assert doc["result"]["tool_calls"] == [{"name": "event_reply", "outcome": "error", "error": "unavailable"}]
    assert json.loads(server.requests[1]["json"]["messages"][-1]["content"])["error"]["reason"] == "adapter_offline"
    assert log() == []


# -- every front door offers the same tools ------------------------------------------------------
def test_mcp_serve_offers_exactly_the_runs_event_and_platform_tools(home):
    setup_bot(platform_tools=("platform_get_group_list", "platform_send_message"))
    run = start_for()
    record = fwj("run", "show", run["run_id"])
    listed = fwj("tool", "list", "--run", run["run_id"])["tools"]
    assert [t["name"] for t in listed] == record["tools"]

    async def over_mcp():
        params = StdioServerParameters(command=fw_bin(), args=["mcp", "serve", "--run", run["run_id"]],
                                       env={"FW_HOME": str(home), "PATH": os.environ["PATH"],
                                            **({"FW_STATE": os.environ["FW_STATE"]} if os.environ.get("FW_STATE") else {})})
        async with Client(params) as client:
            tools = (await client.list_tools()).tools
            assert [t.name for t in tools] == record["tools"]
            for tool in (t for t in tools if t.name.startswith(("event_", "platform_"))):
                source = record["tool_sources"][tool.name]
                assert tool.input_schema == source["input_schema"] and tool.description == source["description"]
            replied = await client.call_tool("event_reply", {"text": "over mcp"})
            assert not replied.is_error, replied
            forged = await client.call_tool("event_kick_member", {"user_id": "bob"})
            assert forged.is_error and json.loads(forged.content[0].text)["error"]["code"] == "invalid"

    anyio.run(over_mcp)
    assert [(a["api"], a["params"]["text"]) for a in log()] == [("send_message", "over mcp")]


def test_a_damaged_frozen_event_acts_on_nothing(home):
    setup_bot()
    run = start_for()
    record = json.loads(run_record_text(home, run["run_id"]))
    record["event"] = {"type": "message.received"}  # the actor is gone
    write_run_record(home, run["run_id"], json.dumps(record))
    refused = call(run["run_id"], "event_kick_member", code=4)
    assert refused["error"]["code"] == "corrupt" and log() == []


def test_the_readme_tour_of_the_sample_lobby_bot(sample):
    assert fwj("home", "check")["ok"] is True
    assert fwj("bot", "show", "lobby")["online"] is True
    said = fwj("bot", "local", "say", "lobby", "--from", "alice", "--group", "team", "--no-run", "@lobby is the build green?")
    run = said["run"]
    assert (run["identity"], run["agent"]) == ("ops", "ops") and "event_reply" in run["tools"]
    call(run["run_id"], "event_reply", {"text": "Yes, all green."})
    assert [(a["api"], a["params"]["target_id"]) for a in fwj("bot", "local", "log", "lobby")["actions"]] == [("send_message", "team")]
