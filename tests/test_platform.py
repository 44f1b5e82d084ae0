"""The platform catalogue, an agent's platform fields, bots, and the local platform's APIs."""

import json

import pytest

pytestmark = pytest.mark.engines

from conftest import CANARY, fw, fwj, snapshot


def basics():
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "http://127.0.0.1:9/v1", "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "m", "capabilities": {"tool_call": True}}))


def bot_of(agent_fields, bot="desk"):
    basics()
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", **agent_fields}))
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1", "--policy", "all")
    fwj("bot", "add", bot, "--adapter", "local", "--principal", "p1")


def call(run_id, tool, args=None, code=0):
    r = fw("tool", "call", "--run", run_id, tool, "--args", json.dumps(args or {}))
    assert r.exit_code == code, r
    return r.json


# -- the catalogue -----------------------------------------------------------------------------
def test_the_catalogue_has_ten_event_tools_and_fourteen_platform_tools_and_no_passthrough():
    doc = fwj("tool", "catalogue")
    events, platform = doc["event_tools"], doc["platform_tools"]
    assert len(events) == 10 and all(t["name"].startswith("event_") for t in events)
    assert len(platform) == 14 and all(t["name"].startswith("platform_") for t in platform)
    names = [t["name"] for t in events + platform]
    assert len(set(names)) == 24 and "call_platform_api" not in names
    for tool in events + platform:
        assert tool["risk"] in ("read", "write", "dangerous") and tool["api"] in doc["apis"]
        assert tool["input_schema"]["additionalProperties"] is False
        assert not any("action" in p or p == "api" for p in tool["input_schema"]["properties"])  # no action name to pass
    for tool in events:
        assert tool["event_patterns"] and tool["target"]
    reply = next(t for t in events if t["name"] == "event_reply")
    assert (reply["api"], reply["risk"], reply["input_schema"]["required"]) == ("send_message", "write", ["text"])
    kick = next(t for t in events if t["name"] == "event_kick_member")
    assert kick["input_schema"]["properties"] == {} and kick["event_patterns"] == ["message.*", "group.member_*"]


def test_the_catalogue_in_human_form_shows_event_tools_apart():
    r = fw("tool", "catalogue")
    assert r.exit_code == 0, r
    assert r.stdout.index("event tools") < r.stdout.index("event_kick_member") < r.stdout.index("platform tools") < r.stdout.index("platform_leave_group")


# -- an agent's platform fields ------------------------------------------------------------------
def test_agent_flags_set_events_and_platform_tools():
    basics()
    doc = fwj("agent", "create", "a1", "--model", "m1", "--event", "message.*", "--event", "friend.request_received",
              "--platform-tool", "platform_get_group_list")
    assert doc["data"]["events"] == ["message.*", "friend.request_received"]
    assert doc["data"]["allowed_platform_tools"] == ["platform_get_group_list"]
    data = fwj("agent", "edit", "a1", "--add-platform-tool", "platform_send_message", "--remove-event", "message.*")["data"]
    assert data["allowed_platform_tools"] == ["platform_get_group_list", "platform_send_message"] and data["events"] == ["friend.request_received"]
    data = fwj("agent", "edit", "a1", "--event", "", "--remove-platform-tool", "platform_get_group_list")["data"]
    assert "events" not in data and data["allowed_platform_tools"] == ["platform_send_message"]
    assert fwj("agent", "create", "a2", "--model", "m1")["data"].get("events") is None


@pytest.mark.parametrize("flags,field", [
    (["--platform-tool", "event_reply"], "allowed_platform_tools"),
    (["--platform-tool", "platform_teleport"], "allowed_platform_tools"),
    (["--platform-tool", "call_platform_api"], "allowed_platform_tools"),
    (["--event", "mesage.*"], "events"),
    (["--event", "Message.Received"], "events"),
    (["--platform-tool", "platform_leave_group", "--platform-tool", "platform_leave_group"], "allowed_platform_tools"),
])
def test_a_write_naming_what_the_catalogue_lacks_is_invalid_and_saves_nothing(home, flags, field):
    basics()
    fwj("agent", "create", "a1", "--model", "m1")
    before = snapshot(home)
    r = fw("agent", "edit", "a1", *flags, "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid" and r.json["error"]["field"].split(".")[0].split("[")[0] == field, r
    r = fw("agent", "create", "a2", "--model", "m1", *flags, "--json")
    assert r.exit_code == 4 and r.json["error"]["field"].split(".")[0].split("[")[0] == field, r
    tool = fw("tool", "call", "--manager", "resource_write", "--args", json.dumps(
        {"kind": "agent", "reference": "a1", "create": False, "data": {field: flags[1::2]}}))
    assert tool.json["error"]["code"] == "invalid", tool
    after = snapshot(home)
    assert {k: v for k, v in after.items() if k != "audit.jsonl"} == {k: v for k, v in before.items() if k != "audit.jsonl"}


def test_the_agent_schema_knows_the_new_fields():
    from conftest import REPO

    schema = json.loads((REPO / "schemas/agent.json").read_text())
    assert {"events", "allowed_platform_tools"} <= set(schema["properties"])
    assert json.loads((REPO / "schemas/bot.json").read_text())["properties"]["adapter"]["enum"] == ["local", "onebot"]
    assert json.loads((REPO / "schemas/tools/event_reply.json").read_text())["x-api"] == "send_message"


# -- bots -------------------------------------------------------------------------------------
def test_bots_are_added_listed_shown_changed_and_removed(home):
    bot_of({"events": ["message.*"]})
    shown = fwj("bot", "show", "desk")
    assert (shown["adapter"], shown["principal"], shown["online"]) == ("local", "p1", True)
    assert len(shown["supported_apis"]) == 16 and shown["unsupported_apis"] == []
    assert (home / "bots/desk.yaml").read_text() == "adapter: local\nprincipal: p1\n"
    assert [b["name"] for b in fwj("bot", "list")["bots"]] == ["desk"]
    changed = fwj("bot", "set", "desk", "--unsupported-api", "kick_member", "--offline")
    assert changed["online"] is False and "kick_member" not in changed["supported_apis"]
    assert fwj("bot", "list")["bots"][0]["online"] is False
    human = fw("bot", "show", "desk")
    assert "offline" in human.stdout and "withheld: kick_member" in human.stdout
    assert fwj("bot", "set", "desk", "--unsupported-api", "")["unsupported_apis"] == []
    assert fwj("bot", "remove", "desk") == {"bot": "desk", "removed": True, "cancelled_events": 0}
    assert fw("bot", "show", "desk", "--json").json["error"]["code"] == "not_found"
    again = fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")
    assert again["online"] is True  # a bot added again starts online


def test_bad_bots_are_refused_and_nothing_is_written(home):
    bot_of({})
    fwj("principal", "create", "alice", "--kind", "user")
    before = snapshot(home)
    cases = [
        (["add", "b2", "--adapter", "onebot", "--principal", "p1"], 4, "needs a --url"),
        (["add", "b2", "--adapter", "irc", "--principal", "p1"], 4, "unknown adapter"),
        (["add", "b2", "--adapter", "local", "--principal", "nobody"], 4, "no principal"),
        (["add", "b2", "--adapter", "local", "--principal", "alice"], 4, "not an agent identity"),
        (["add", "b2", "--adapter", "local", "--principal", "p1", "--url", "http://x.test"], 4, "onebot"),
        (["add", "desk", "--adapter", "local", "--principal", "p1"], 6, "already exists"),
        (["add", "Bad/name", "--adapter", "local", "--principal", "p1"], 4, "invalid bot name"),
        (["set", "desk", "--unsupported-api", "call_platform_api"], 4, "unknown API"),
        (["set", "desk", "--secret-stdin"], 4, "onebot"),
        (["set", "nope", "--offline"], 3, "no bot"),
        (["remove", "nope"], 3, "no bot"),
    ]
    for args, code, words in cases:
        r = fw("bot", *args, "--json", input="s3cret-value")
        assert r.exit_code == code and words in r.json["error"]["message"], (args, r)
    assert snapshot(home) == before


def test_home_check_reports_a_corrupt_bot_and_a_dangling_principal(home):
    bot_of({})
    (home / "bots/broken.yaml").write_text("adapter: local\nprincipal: p1\ncolour: red\n")
    (home / "bots/orphan.yaml").write_text("adapter: local\nprincipal: ghost\n")
    doc = fwj("home", "check", code=4)
    found = {(p["code"], p["path"]) for p in doc["problems"]}
    assert found == {("corrupt", "bots/broken.yaml"), ("dangling", "bots/orphan.yaml")}
    listed = {b["name"]: b for b in fwj("bot", "list")["bots"]}
    assert "error" in listed["broken"] and listed["desk"]["online"] is True


def test_a_onebot_file_written_by_hand_loads_and_its_unreachable_platform_is_offline(home):
    bot_of({"events": ["message.*"]})
    (home / "bots/qq.yaml").write_text("adapter: onebot\nprincipal: p1\nurl: http://127.0.0.1:9\n")
    shown = fwj("bot", "show", "qq")
    assert (shown["online"], shown["connection"], len(shown["supported_apis"])) == (False, "http", 16)
    event = {"type": "message.received", "actor": {"id": "u1"}, "message": {"id": "9", "text": "hi"}}
    run = fwj("event", "handle", "qq", "--event", json.dumps(event), "--no-run")["run"]
    assert "event_reply" in run["tools"]
    refused = call(run["run_id"], "event_reply", {"text": "hello"}, code=7)
    assert refused["error"]["reason"] == "adapter_offline"
    r = fw("bot", "local", "say", "qq", "--from", "u1", "hi", "--json")
    assert r.exit_code == 4 and "not local" in r.json["error"]["message"]


# -- the local platform ---------------------------------------------------------------------------


def test_the_local_platform_serves_every_platform_tool(home):
    tools = [t["name"] for t in fwj("tool", "catalogue")["platform_tools"]]
    bot_of({"events": ["message.*"], "allowed_platform_tools": tools})
    fwj("bot", "local", "say", "desk", "--from", "bob", "--group", "g1", "--no-run", "I am bob")
    said = fwj("bot", "local", "say", "desk", "--from", "alice", "--group", "g1", "--no-run", "hello all")
    run, message = said["run"]["run_id"], said["event"]["message"]["id"]
    assert set(tools) <= set(said["run"]["tools"])
    assert call(run, "platform_get_group_list")["groups"] == [{"group_id": "g1", "name": "g1", "member_count": 2}]
    assert call(run, "platform_set_group_name", {"group_id": "g1", "name": "Garden"})["group"]["name"] == "Garden"
    assert call(run, "platform_get_group_info", {"group_id": "g1"})["group"]["name"] == "Garden"
    assert [m["user_id"] for m in call(run, "platform_get_group_member_list", {"group_id": "g1"})["members"]] == ["alice", "bob"]
    got = call(run, "platform_get_message", {"chat_type": "group", "chat_id": "g1", "message_id": message})["message"]
    assert (got["text"], got["sender"]) == ("hello all", {"user_id": "alice"})
    muted = call(run, "platform_mute_member", {"group_id": "g1", "user_id": "bob"})
    assert muted["muted"] is True
    assert call(run, "platform_get_group_member_info", {"group_id": "g1", "user_id": "bob"})["member"]["muted_until"] == muted["until"]
    call(run, "platform_unmute_member", {"group_id": "g1", "user_id": "bob"})
    assert "muted_until" not in call(run, "platform_get_group_member_info", {"group_id": "g1", "user_id": "bob"})["member"]
    call(run, "platform_kick_member", {"group_id": "g1", "user_id": "bob"})
    assert call(run, "platform_get_group_member_info", {"group_id": "g1", "user_id": "bob"}, code=3)["error"]["code"] == "not_found"
    sent = call(run, "platform_send_message", {"target_type": "person", "target_id": "bob", "text": "sorry"})
    assert call(run, "platform_get_message", {"chat_type": "private", "chat_id": "bob", "message_id": sent["message_id"]})["message"]["sender"] == {"bot": True}
    call(run, "platform_delete_message", {"chat_type": "group", "chat_id": "g1", "message_id": message})
    assert call(run, "platform_get_message", {"chat_type": "group", "chat_id": "g1", "message_id": message}, code=3)["error"]["code"] == "not_found"
    assert call(run, "platform_get_user_info", {"user_id": "bob"})["user"] == {"user_id": "bob", "name": "bob", "is_friend": False}
    assert call(run, "platform_get_friend_list") == {"friends": []}
    assert call(run, "platform_leave_group", {"group_id": "g1"}) == {"left": True, "group_id": "g1"}
    assert call(run, "platform_get_group_list") == {"groups": []}
    refused = call(run, "platform_send_message", {"target_type": "group", "target_id": "g1", "text": "still here?"}, code=3)
    assert refused["error"]["code"] == "not_found"
    actions = fwj("bot", "local", "log", "desk")["actions"]
    assert [a["api"] for a in actions][:3] == ["get_group_list", "set_group_name", "get_group_info"]
    assert actions[-1]["error"] == "not_found" and all(set(a) >= {"api", "params", "time"} for a in actions)
    assert actions == sorted(actions, key=lambda a: a["time"])


def test_friend_requests_and_group_invites_are_answered_on_the_local_platform(home):
    bot_of({"events": ["friend.request_received", "bot.invited_to_group"], "allowed_platform_tools": ["platform_get_friend_list", "platform_get_group_list"]})
    request = {"type": "friend.request_received", "actor": {"id": "carol", "name": "Carol"}, "request_id": "f1"}
    run = fwj("event", "handle", "desk", "--event", json.dumps(request), "--no-run")["run"]["run_id"]
    assert call(run, "event_respond_friend_request", {"approve": True, "remark": "C"})["approved"] is True
    assert call(run, "platform_get_friend_list")["friends"] == [{"user_id": "carol", "name": "Carol", "remark": "C"}]
    assert call(run, "event_respond_friend_request", {"approve": False}, code=6)["error"]["code"] == "conflict"
    invite = {"type": "bot.invited_to_group", "actor": {"id": "carol"}, "group": {"id": "club"}, "request_id": "i1"}
    run = fwj("event", "handle", "desk", "--event", json.dumps(invite), "--no-run")["run"]
    assert "event_respond_group_invite" in run["tools"] and "event_get_group" in run["tools"]
    assert call(run["run_id"], "platform_get_group_list") == {"groups": []}
    call(run["run_id"], "event_respond_group_invite", {"approve": True})
    assert [g["group_id"] for g in call(run["run_id"], "platform_get_group_list")["groups"]] == ["club"]
    no_request = {"type": "friend.request_received", "actor": {"id": "dan"}}
    run = fwj("event", "handle", "desk", "--event", json.dumps(no_request), "--no-run")["run"]
    assert {u["name"]: u["reason"] for u in run["unavailable_tools"]}["event_respond_friend_request"] == "event_target_unavailable"


def test_say_text_is_literal_and_the_log_lists_nothing_said(home):
    bot_of({"events": ["message.*"]})
    said = fwj("bot", "local", "say", "desk", "--from", "alice", "--no-run", "@everyone -- look")
    assert said["event"]["message"]["text"] == "@everyone -- look" and "group" not in said["event"]
    assert fwj("bot", "local", "log", "desk") == {"bot": "desk", "actions": []}
    human = fw("bot", "local", "log", "desk")
    assert "has done nothing yet" in human.stdout


def test_saying_something_to_an_offline_local_bot_notes_that_its_actions_are_refused(home):
    bot_of({"events": ["message.*"]})
    assert "offline" not in fwj("bot", "local", "say", "desk", "--from", "alice", "--no-run", "hi")
    fwj("bot", "set", "desk", "--offline")
    said = fwj("bot", "local", "say", "desk", "--from", "alice", "--no-run", "are you there?")
    assert said["offline"] is True and said["handled"] is True
    r = fw("bot", "local", "say", "desk", "--from", "alice", "--no-run", "still there?")
    assert r.exit_code == 0 and "bot desk is offline" in r.stderr and "fw bot set desk --online" in r.stderr, r
    refused = call(said["run"]["run_id"], "event_reply", {"text": "yes"}, code=7)
    assert refused["error"]["reason"] == "adapter_offline"
    fwj("agent", "edit", "a1", "--event", "friend.*")  # the agent no longer handles messages: no run, no note
    quiet = fw("bot", "local", "say", "desk", "--from", "alice", "--no-run", "anyone?")
    assert quiet.exit_code == 0 and "offline" not in quiet.stderr, quiet


def test_a_dry_run_of_going_offline_says_it_would_and_changes_nothing(home):
    bot_of({})
    before = snapshot(home)
    doc = fwj("bot", "set", "desk", "--offline", "--dry-run")
    assert doc["dry_run"] is True and doc["online"] is False and doc["files"] == []
    assert doc["state_changes"] == ["bot desk would go offline (its state is kept in state.db)"]
    human = fw("bot", "set", "desk", "--offline", "--dry-run")
    assert "Bot desk would go offline" in human.stdout and "No change" not in human.stdout, human
    assert fwj("bot", "show", "desk")["online"] is True and snapshot(home) == before
    assert "No change" in fw("bot", "set", "desk", "--online", "--dry-run").stdout  # it is online already
