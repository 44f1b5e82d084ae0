"""Secrets at run time (CONTRACT sections 2, 7 and 9): no stored key reaches state.db or a
platform, a key is redacted in every form JSON gives it, redaction comes before any cut, and
a key too short to tell apart from ordinary text is refused."""

import json

import pytest
from conftest import CANARY, fw, fwj, snapshot
from fakes.chat_server import ChatServer

NOWHERE = "http://127.0.0.1:9/v1"  # for runs that never reach the model
LOWER_KEY = "sk-lowercase-canary-4d2e9a1b"  # a key that fits the name pattern
NEW_KEY = "sk-ROTATED-0a1b2c3d4e5f6789"


def provider(name, base_url=NOWHERE, **fields):
    fwj("resource", "write", "provider", name, "--create", "--data", json.dumps({"base_url": base_url, **fields}))


def agent_on(base_url, key=CANARY, **provider_fields):
    provider("p1", base_url, **({"api_key": key} if key is not None else {}), **provider_fields)
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("agent", "create", "a1", "--model", "m1")


def bot(platform_tools=("platform_set_group_name",)):
    agent_on(NOWHERE)
    fwj("agent", "edit", "a1", "--event", "message.*", *sum((["--platform-tool", t] for t in platform_tools), []))
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1", "--policy", "all")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")


def call(run_id, tool, args, code=0):
    r = fw("tool", "call", "--run", run_id, tool, "--args", json.dumps(args))
    assert r.exit_code == code, r
    return r.json


def nothing_stored_holds(home, *values):
    data = (home / "state.db").read_bytes()
    for extra in ("state.db-wal",):
        if (home / extra).exists():
            data += (home / extra).read_bytes()
    for value in values:
        assert value.encode() not in data


# -- item 7: nothing stored holds a key, nothing reaches a platform ------------------------------
def test_event_reply_and_platform_actions_holding_a_key_are_refused_and_reach_no_platform(home):
    bot()
    said = fwj("bot", "local", "say", "desk", "--from", "alice", "--group", "g1", "--no-run", "hello")
    run = said["run"]["run_id"]
    refused = call(run, "event_reply", {"text": f"the key is {CANARY}"}, code=4)["error"]
    assert refused["code"] == "invalid" and refused["field"] == "text" and "secret" in refused["message"]
    refused = call(run, "platform_set_group_name", {"group_id": "g1", "name": CANARY}, code=4)["error"]
    assert refused["code"] == "invalid" and refused["field"] == "name"
    assert fwj("bot", "local", "log", "desk")["actions"] == []  # nothing reached the platform
    entries = [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]
    assert [(e["tool"], e["error"]) for e in entries[-2:]] == [("event_reply", "invalid"), ("platform_set_group_name", "invalid")]
    call(run, "platform_set_group_name", {"group_id": "g1", "name": "Garden"})  # an ordinary name still works
    nothing_stored_holds(home, CANARY)


def test_a_session_named_like_a_key_is_refused_as_the_operator_and_inside_a_run(home):
    bot()
    provider("p2", api_key=LOWER_KEY)
    fwj("principal", "create", "alice", "--kind", "user")
    before = snapshot(home)
    r = fw("session", "create", LOWER_KEY, "--member", "alice", "--json")
    assert r.exit_code == 4 and r.json["error"]["field"] == "name" and LOWER_KEY not in r.output, r
    assert snapshot(home) == before
    run = fwj("run", "start", "--principal", "p1")["run_id"]
    refused = call(run, "framework_session_create", {"name": LOWER_KEY, "members": ["alice"]}, code=4)["error"]
    assert refused["code"] == "invalid" and refused["field"] == "name"
    assert fwj("session", "list")["sessions"] == []
    nothing_stored_holds(home, LOWER_KEY)


def test_after_a_key_is_rotated_its_old_value_stays_refused_and_redacted(home):
    with ChatServer([{"status": 401, "body": f"key {CANARY} was revoked"}], repeat_last=True) as server:
        bot()
        fwj("resource", "write", "provider", "p1", "--data", json.dumps({"base_url": server.base_url}))
        r = fw("resource", "write", "provider", "p1", "--api-key-stdin", "--json", input=NEW_KEY)
        assert r.exit_code == 0, r
        # the old key is kept known under secrets/ only, so it is still refused ...
        said = fwj("bot", "local", "say", "desk", "--from", "alice", "--group", "g1", "--no-run", "hello")
        refused = call(said["run"]["run_id"], "event_reply", {"text": CANARY}, code=4)["error"]
        assert refused["field"] == "text"
        assert fw("bot", "local", "say", "desk", "--from", "alice", "--no-run", f"old {CANARY}", "--json").exit_code == 4
        # ... and redacted when something echoes it back (fw checks every output for CANARY)
        failed = fw("agent", "run", "a1", "--message", "hi", "--json")
        assert failed.exit_code == 7 and "[redacted]" in failed.json["error"]["message"], failed
    for args in (("bot", "local", "log", "desk"), ("bot", "local", "log", "desk", "--json")):
        assert fw(*args).exit_code == 0
    assert fwj("bot", "local", "log", "desk")["actions"] == []
    for path in home.rglob("*"):
        if path.is_file() and "secrets" not in path.relative_to(home).parts:
            assert CANARY.encode() not in path.read_bytes(), path
    assert CANARY in (home / "secrets/.retired.json").read_text()
    assert oct((home / "secrets/.retired.json").stat().st_mode & 0o777) == "0o600"


# -- item 8: every form JSON gives a key ------------------------------------------------------
@pytest.mark.parametrize("as_json", [True, False])
def test_a_key_with_a_slash_echoed_json_escaped_in_a_401_is_redacted(home, as_json):
    key = f"{CANARY}/tail9"
    echoed = '{"error": {"message": "bad key %s"}}' % key.replace("/", "\\/")  # as PHP's json_encode writes it
    with ChatServer([{"status": 401, "body": echoed}]) as server:
        agent_on(server.base_url, key=key)
        r = fw("agent", "run", "a1", "--message", "hi", *(["--json"] if as_json else []))
    assert r.exit_code == 7 and "[redacted]" in r.output and "tail9" not in r.output, r


def test_a_key_with_a_quote_and_a_backslash_is_redacted_in_its_json_escaped_form(home):
    key = f'{CANARY}"q\\z'
    with ChatServer([{"status": 401, "body": json.dumps({"error": {"message": f"bad key {key}"}})}], repeat_last=True) as server:
        agent_on(server.base_url, key=key)
        for flags in (["--json"], []):
            r = fw("agent", "run", "a1", "--message", "hi", *flags)
            assert r.exit_code == 7 and "[redacted]" in r.output and "q\\\\z" not in r.output and 'q\\z' not in r.output, r


def test_the_value_of_a_providers_key_variable_is_redacted_once_read(home, monkeypatch):
    key = f"{CANARY}/from-env"
    monkeypatch.setenv("FW_TEST_LLM_KEY", key)
    echoed = '{"error": {"message": "bad key %s"}}' % key.replace("/", "\\/")  # as PHP's json_encode writes it
    with ChatServer([{"status": 401, "body": echoed}]) as server:
        agent_on(server.base_url, key=None, api_key_env="FW_TEST_LLM_KEY")
        r = fw("agent", "run", "a1", "--message", "hi", "--json")
    assert r.exit_code == 7 and "[redacted]" in r.json["error"]["message"] and "from-env" not in r.output, r
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {key}"


# -- item 9: redact, then cut -----------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_an_error_object_with_the_key_across_the_cut_shows_none_of_it(home, stream):
    detail = "x" * 180 + CANARY + " and more after it"
    body = json.dumps({"error": {"message": detail}})
    step = {"raw": f"data: {body}\n\n", "content_type": "text/event-stream"} if stream else {"raw": body}
    with ChatServer([step]) as server:
        agent_on(server.base_url)
        r = fw("agent", "run", "a1", "--message", "hi", "--json")
    assert r.exit_code == 7 and r.json["error"]["code"] == "unavailable", r
    assert CANARY[:8] not in r.output and "[redacted]" in r.output


def test_the_value_of_a_key_variable_read_in_a_run_is_refused_in_what_the_run_stores(home, monkeypatch):
    key = "sk-envkey-0123456789abcdef0123"
    monkeypatch.setenv("FW_TEST_TASK_KEY", key)
    with ChatServer([{"tool_calls": [{"name": "framework_task_delegate",
                                      "arguments": {"principal": "ops", "instructions": "y" * 50 + key}}]},
                     {"content": "done"}]) as server:
        agent_on(server.base_url, key=None, api_key_env="FW_TEST_TASK_KEY")
        fwj("agent", "edit", "a1", "--builtin-tool", "task_collaboration")
        fwj("principal", "create", "ops", "--kind", "agent")
        fwj("binding", "set", "ops", "--agent", "a1")
        doc = fwj("agent", "run", "a1", "--message", "delegate it")
    # read once, the variable's value is a secret: the task is refused, nothing is stored
    assert doc["tool_calls"] == [{"name": "framework_task_delegate", "outcome": "error", "error": "invalid"}]
    assert fwj("task", "list")["tasks"] == []
    nothing_stored_holds(home, key)


# -- item 10: a key too short to tell apart from ordinary text ---------------------------------
@pytest.mark.parametrize("kind,data,stdin,field", [
    ("provider", {"base_url": "https://x.test"}, "short7x", "api_key"),
    ("provider", {"base_url": "https://x.test", "api_key": "abc"}, None, "api_key"),
    ("mcp", {"transport": "stdio", "command": "srv", "env": {"TOKEN": "1234567"}}, None, "env.TOKEN"),
    ("mcp", {"transport": "http", "url": "https://m.test/mcp", "headers": {"X-Key": "pw"}}, None, "headers.X-Key"),
])
def test_a_key_shorter_than_eight_characters_is_refused_and_nothing_is_written(home, kind, data, stdin, field):
    before = snapshot(home)
    args = ["resource", "write", kind, "r1", "--create", "--data", json.dumps(data), "--json"]
    r = fw(*args, *(["--api-key-stdin"] if stdin else []), input=stdin)
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid" and r.json["error"]["field"] == field, r
    assert "too short" in r.json["error"]["message"]
    assert snapshot(home) == before


def test_an_eight_character_key_is_accepted_and_redacted(home):
    r = fw("resource", "write", "provider", "p1", "--create", "--data", '{"base_url": "https://x.test"}',
           "--api-key-stdin", "--json", input="k8-abcde")
    assert r.exit_code == 0 and r.json["data"]["api_key_set"] is True, r
    fwj("principal", "create", "alice", "--kind", "user")
    refused = fw("session", "create", "s1", "--member", "alice", "--title", "k8-abcde", "--json")
    assert refused.exit_code == 4 and "k8-abcde" not in refused.output
