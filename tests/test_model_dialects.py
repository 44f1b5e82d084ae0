"""Providers speak a dialect (issue 29, items 1 and 7): a DeepSeek-style thinking model whose
`reasoning_content` must come back within a tool loop, and Claude through `api: anthropic`
(the Messages API, no proxy). Both servers are scripted on 127.0.0.1 and refuse what the real
ones refuse; fw runs through its front door."""

import json
import sqlite3
import sys
from pathlib import Path

import httpx
import pytest
from conftest import CANARY, fw, fwj
from fakes.anthropic_server import MODELS, AnthropicServer
from fakes.chat_server import ChatServer

THOUGHT = "The user wants the agents listed, so first I call resource_list."


def setup_agent(base_url, *, api=None, max_tokens=None, builtin=("resource_management",), **agent_fields):
    provider = {"base_url": base_url, "api_key": CANARY, **({"api": api} if api else {})}
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps(provider))
    model = {"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True},
             **({"max_tokens": max_tokens} if max_tokens else {})}
    fwj("resource", "write", "model", "m1", "--create", "--data", json.dumps(model))
    fwj("resource", "write", "agent", "a1", "--create", "--data",
        json.dumps({"model": "m1", "builtin_tools": list(builtin), **agent_fields}))


def run_json(*args, code=0):
    r = fw("agent", "run", "a1", *args, "--json")
    assert r.exit_code == code, r
    return r.json


def rows_holding(home, text):
    """Every row of every table of state.db that holds the text."""
    db = sqlite3.connect(home / "state.db")
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [(t, row) for t in tables for row in db.execute(f'SELECT * FROM "{t}"') if text in repr(row)]
    finally:
        db.close()


def no_canary_in_files(home):
    for path in home.rglob("*"):
        if path.is_file() and "secrets" not in path.relative_to(home).parts:
            assert CANARY.encode() not in path.read_bytes(), path


# -- a thinking model (DeepSeek's thinking mode) ------------------------------------------------
def thinking_script(stream):
    def call(call_id, kind):
        return {"name": "framework_resource_list", "arguments": {"kind": kind}, "id": call_id}

    return [
        {"reasoning": THOUGHT, "tool_calls": [call("call_agents", "agent")], "stream": stream},
        {"reasoning": "Now the models.", "content": "Agents listed.", "tool_calls": [call("call_models", "model")],
         "stream": stream},
        {"reasoning": "Both are known: answer.", "content": "One agent, a1, on model m1.", "stream": stream},
    ]


def test_the_fake_refuses_a_follow_up_without_the_reasoning_as_deepseek_does():
    """The scripted server is strict: a client that drops reasoning_content gets a 400."""
    with ChatServer(thinking_script(False), thinking=True) as server:
        url = server.base_url + "/chat/completions"
        first = httpx.post(url, json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}).json()
        message = first["choices"][0]["message"]
        assert message["reasoning_content"] == THOUGHT
        dropped = {k: v for k, v in message.items() if k != "reasoning_content"}
        tool = {"role": "tool", "tool_call_id": "call_agents", "content": "{}"}
        refused = httpx.post(url, json={"model": "m", "messages": [{"role": "user", "content": "hi"}, dropped, tool]})
        kept = httpx.post(url, json={"model": "m", "messages": [{"role": "user", "content": "hi"}, message, tool]})
    assert refused.status_code == 400 and "reasoning_content" in refused.text
    assert kept.status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_a_thinking_model_completes_a_three_round_tool_loop(home, stream):
    with ChatServer(thinking_script(stream), thinking=True) as server:
        setup_agent(server.base_url)
        doc = run_json("--message", "what agents and models exist?")
    assert (doc["status"], doc["rounds"], doc["answer"]) == ("completed", 3, "One agent, a1, on model m1.")
    assert [c["outcome"] for c in doc["tool_calls"]] == ["ok", "ok"]
    assert len(server.requests) == 3  # no 400 on the way
    second, third = server.requests[1]["json"]["messages"], server.requests[2]["json"]["messages"]
    assistants = [m for m in third if m["role"] == "assistant"]
    assert [m["reasoning_content"] for m in assistants] == [THOUGHT, "Now the models."]  # each as it came
    assert [m for m in second if m["role"] == "assistant"][0]["reasoning_content"] == THOUGHT
    assert "reasoning_content" not in json.dumps(doc)  # the reasoning is sent back, never shown or stored
    assert rows_holding(home, THOUGHT) == []
    no_canary_in_files(home)


def test_a_dispatched_turn_of_a_thinking_model_keeps_no_reasoning_in_state(home):
    with ChatServer(thinking_script(False), thinking=True) as server:
        setup_agent(server.base_url)
        fwj("principal", "create", "alice", "--kind", "user")
        fwj("principal", "create", "ops", "--kind", "agent")
        fwj("binding", "set", "ops", "--agent", "a1")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        fwj("message", "post", "s1", "--as", "alice", "@ops what exists?")
        done = fwj("dispatch", "--once")
    assert done["turns"] == {"run": 1, "answered": 1, "failed": 0, "cancelled": 0}
    assert len(server.requests) == 3
    assert [m["text"] for m in fwj("message", "list", "s1")["messages"]][-1] == "One agent, a1, on model m1."
    for thought in (THOUGHT, "Now the models.", "Both are known"):
        assert rows_holding(home, thought) == []


# -- Claude through the Messages API ------------------------------------------------------------
def claude_script(stream):
    return [
        {"text": "Let me look.", "tool_use": [{"name": "framework_resource_list", "input": {"kind": "agent"}, "id": "toolu_1"}],
         "stream": stream},
        {"text": "There is one agent: a1.", "stream": stream},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_claude_model_answers_with_a_tool_call_then_text(home, stream):
    fwj("resource", "write", "prompt", "terse", "--create", "--data", json.dumps({"body": "Be terse."}))
    with AnthropicServer(claude_script(stream), key=CANARY) as server:
        setup_agent(server.base_url, api="anthropic", prompt="terse")
        doc = run_json("--message", "which agents?")
    assert (doc["status"], doc["rounds"], doc["answer"], doc["finish_reason"]) == ("completed", 2, "There is one agent: a1.", "stop")
    assert doc["tool_calls"] == [{"name": "framework_resource_list", "outcome": "ok"}]
    first, second = server.requests
    assert first["path"] == "/v1/messages"
    assert first["headers"]["x-api-key"] == CANARY and first["headers"]["anthropic-version"] == "2023-06-01"
    assert "authorization" not in first["headers"]
    body = first["json"]
    assert (body["model"], body["max_tokens"], body["system"]) == ("model-x", 4096, "Be terse.\n")
    assert body["messages"] == [{"role": "user", "content": "which agents?"}]
    assert "stream" not in body  # --json does not ask for a stream; the step streams all the same when it says so
    tools = {t["name"]: t for t in body["tools"]}
    assert set(tools["framework_resource_list"]) == {"name", "description", "input_schema"}
    assistant, results = second["json"]["messages"][1:]
    assert [b["type"] for b in assistant["content"]] == ["text", "tool_use"]
    assert assistant["content"][1] == {"type": "tool_use", "id": "toolu_1", "name": "framework_resource_list", "input": {"kind": "agent"}}
    [result] = results["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    assert json.loads(result["content"])["items"][0]["name"] == "a1"
    no_canary_in_files(home)


@pytest.mark.parametrize("stream", [False, True])
def test_claudes_thinking_goes_back_with_its_tool_call_and_max_tokens_is_the_models(home, stream):
    script = [{"thinking": THOUGHT, "tool_use": [{"name": "framework_resource_list", "input": {"kind": "model"}, "id": "toolu_t"}],
               "stream": stream},
              {"text": "Cut sho", "stop_reason": "max_tokens", "stream": stream}]
    with AnthropicServer(script, key=CANARY) as server:
        setup_agent(server.base_url, api="anthropic", max_tokens=1000)
        doc = run_json("--message", "models?")
    assert (doc["status"], doc["answer"], doc["finish_reason"]) == ("completed", "Cut sho", "length")
    assert len(server.requests) == 2 and server.requests[0]["json"]["max_tokens"] == 1000
    sent_back = server.requests[1]["json"]["messages"][1]["content"]
    assert sent_back[0] == {"type": "thinking", "thinking": THOUGHT, "signature": f"sig-{len(THOUGHT)}"}
    assert rows_holding(home, THOUGHT) == []


def test_a_claude_tool_loop_runs_several_rounds_and_tool_results_of_one_turn_share_a_message(home):
    both = [{"name": "framework_resource_list", "input": {"kind": "agent"}, "id": "toolu_a"},
            {"name": "framework_resource_list", "input": {"kind": "model"}, "id": "toolu_b"}]
    script = [{"tool_use": both}, {"tool_use": [{"name": "framework_binding_list", "input": {}, "id": "toolu_c"}]},
              {"text": "done"}]
    with AnthropicServer(script, key=CANARY) as server:
        setup_agent(server.base_url, api="anthropic")
        doc = run_json("--message", "survey")
    assert (doc["rounds"], doc["answer"]) == (3, "done") and len(doc["tool_calls"]) == 3
    roles = [m["role"] for m in server.requests[2]["json"]["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert [b["tool_use_id"] for b in server.requests[2]["json"]["messages"][2]["content"]] == ["toolu_a", "toolu_b"]


def test_claude_errors_retries_and_redaction_behave_as_for_chat_completions(home):
    overloaded = {"status": 529, "body": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}}
    mid_stream = {"text": "partial answer", "stream": True, "error": {"type": "overloaded_error", "message": f"gone {CANARY}"}}
    with AnthropicServer([overloaded, {"text": "after a retry"}, mid_stream], key=CANARY) as server:
        setup_agent(server.base_url, api="anthropic")
        assert run_json("--message", "hi")["answer"] == "after a retry"
        error = run_json("--message", "hi", code=7)["error"]
        assert (error["code"], error["reason"], error["status"]) == ("unavailable", "model", 200)
        assert "gone [redacted]" in error["message"] and CANARY not in json.dumps(error)
        fwj("resource", "write", "provider", "p1", "--data", json.dumps({"api_key": "sk-wrong-key-123456789"}))
        refused = run_json("--message", "hi", code=7)["error"]
    assert refused["status"] == 401 and "sk-wrong-key-123456789" not in json.dumps(refused) and "[redacted]" in refused["message"]
    assert "api-key" in refused["hint"] or "key" in refused["hint"]
    assert len(server.requests) == 4  # 529 retried once; the error event and the 401 never
    assert fwj("run", "show", error["run_id"])["status"] == "ended"
    no_canary_in_files(home)


def test_a_claude_answer_fw_cannot_use_is_model_answer(home):
    broken = {"status": 200, "body": {"type": "message", "role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}],
                                      "stop_reason": "tool_use"}}
    with AnthropicServer([broken], key=CANARY) as server:
        setup_agent(server.base_url, api="anthropic")
        error = run_json("--message", "hi", code=7)["error"]
    assert (error["code"], error["reason"]) == ("unavailable", "model_answer")
    assert len(server.requests) == 1


def test_resource_models_lists_an_anthropic_providers_models_with_its_key(home):
    with AnthropicServer([], key=CANARY) as server, ChatServer([]) as openai:
        setup_agent(server.base_url, api="anthropic")
        listed = fwj("resource", "models", "p1")
        called = fw("tool", "call", "--manager", "provider_models", "--args", '{"reference": "p1"}')
        fwj("resource", "write", "provider", "p2", "--create", "--data", json.dumps({"base_url": openai.base_url, "api_key": CANARY}))
        other = fwj("resource", "models", "p2")
        fwj("resource", "write", "provider", "p1", "--data", json.dumps({"api_key": "sk-not-the-key-00000"}))
        refused = fw("resource", "models", "p1", "--json")
    assert listed == {"models": MODELS} and called.json == listed
    assert other == {"models": ["m-1"]}  # chat completions, as before
    assert refused.exit_code == 7 and "sk-not-the-key-00000" not in refused.output and "401" in refused.json["error"]["message"]
    no_canary_in_files(home)


def test_a_claude_tool_result_is_cut_at_64_kib_as_for_chat_completions(home):
    raw = str(Path(__file__).parent / "fakes" / "raw_mcp_server.py")
    fwj("resource", "write", "mcp", "raw", "--create", "--data", json.dumps({"transport": "stdio", "command": sys.executable, "args": [raw]}))
    script = [{"tool_use": [{"name": "mcp__raw__huge", "input": {"bytes": 300_000}, "id": "toolu_h"}]}, {"text": "big"}]
    with AnthropicServer(script, key=CANARY) as server:
        setup_agent(server.base_url, api="anthropic", builtin=(), mcps=["raw"])
        doc = run_json("--message", "hi")
    assert doc["answer"] == "big"
    [result] = server.requests[1]["json"]["messages"][2]["content"]
    read = json.loads(result["content"])
    assert read["truncated"] is True and len(read["content"][0].encode()) == 64 * 1024


def test_on_a_terminal_a_claude_answer_streams(home):
    from test_agent_run_terminal import on_a_terminal

    with AnthropicServer([{"text": "Streamed from the Messages API."}], key=CANARY) as server:
        setup_agent(server.base_url, api="anthropic")
        text = on_a_terminal(home, ["--message", "hi"])
    assert server.requests[0]["json"]["stream"] is True
    assert text.count("Streamed from the Messages API.") == 1 and CANARY not in text


def test_a_broken_tool_call_in_a_chat_completion_is_model_answer(home):
    broken = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                   "tool_calls": [{"id": "c1", "type": "function", "function": {"arguments": "{}"}}]}}]}
    with ChatServer([{"raw": json.dumps(broken)}]) as server:
        setup_agent(server.base_url)
        error = run_json("--message", "hi", code=7)["error"]
    assert (error["code"], error["reason"], error["status"]) == ("unavailable", "model_answer", 200)
    assert "no function name" in error["message"] and fwj("run", "show", error["run_id"])["status"] == "ended"


def test_a_session_conversation_reaches_claude_as_alternating_turns(home):
    """A dispatched turn's history (the session's messages, the agent's own as the assistant's)
    and a --continue conversation with tool calls both reach the Messages API in the shape it
    insists on: roles alternating, opening with the user, tool results right after their calls."""
    script = [{"text": "Hello Alice."}, {"text": "Still here."},
              {"tool_use": [{"name": "framework_resource_list", "input": {"kind": "agent"}, "id": "toolu_c"}]},
              {"text": "a1"}, {"text": "As I said: a1."}]
    with AnthropicServer(script, key=CANARY) as server:
        setup_agent(server.base_url, api="anthropic")
        fwj("principal", "create", "alice", "--kind", "user")
        fwj("principal", "create", "ops", "--kind", "agent")
        fwj("binding", "set", "ops", "--agent", "a1", "--policy", "all")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        fwj("message", "post", "s1", "--as", "alice", "hi")
        fwj("dispatch", "--once")
        fwj("message", "post", "s1", "--as", "alice", "still there?")
        assert fwj("dispatch", "--once")["turns"]["answered"] == 1
        fwj("agent", "run", "a1", "--message", "which agents?")
        again = fwj("agent", "run", "a1", "-c", "--message", "which, again?")
    assert again["answer"] == "As I said: a1." and len(server.requests) == 5  # none refused
    assert [m["role"] for m in server.requests[1]["json"]["messages"]] == ["user", "assistant", "user"]
    assert [m["role"] for m in server.requests[4]["json"]["messages"]] == ["user", "assistant", "user", "assistant", "user"]
