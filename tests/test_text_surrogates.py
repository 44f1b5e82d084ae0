"""Surrogates: an emoji split over two streamed chunks is one character; a lone UTF-16
surrogate (no character at all) is `invalid` wherever it comes in, never a traceback, and
never leaves work running."""

import json

import pytest
from conftest import CANARY, fw, fw_proc, fwj
from fakes.chat_server import ChatServer

EMOJI = "\U0001F600"  # 😀, as JSON: "\ud83d\ude00"


def chunk(delta, finish=None):
    doc = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return "data: " + json.dumps(doc) + "\n\n"  # json.dumps writes a lone half as its \\uXXXX escape


def stream(*chunks):
    return {"raw": "".join(chunks) + "data: [DONE]\n\n", "content_type": "text/event-stream"}


def setup(base_url, *, principal=False):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("agent", "create", "a1", "--model", "m1")
    if principal:
        fwj("principal", "create", "p1", "--kind", "agent")
        fwj("binding", "set", "p1", "--agent", "a1")


def audit(home):
    return [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]


# -- streamed answers --------------------------------------------------------------------------
def test_an_emoji_split_over_two_streamed_chunks_is_one_character(home):
    text_chunks = [chunk({"content": "smile "}), chunk({"content": "\ud83d"}), chunk({"content": "\ude00 ok"}), chunk({}, "stop")]
    with ChatServer([stream(*text_chunks)], repeat_last=True) as server:
        setup(server.base_url)
        doc = fwj("agent", "run", "a1", "--message", "hi")
        human = fw("agent", "run", "a1", "--message", "hi")
    assert doc["answer"] == f"smile {EMOJI} ok" and doc["status"] == "completed"
    assert human.exit_code == 0 and EMOJI in human.stdout, human


def test_an_emoji_split_inside_streamed_tool_arguments_reaches_the_tool_whole(home):
    opened = chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                    "function": {"name": "framework_memory_write", "arguments": ""}}]})
    parts = ['{"key": "mood", "value": "', "\ud83d", "\ude00", '"}']
    pieces = [chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in parts]
    with ChatServer([stream(opened, *pieces, chunk({}, "tool_calls")), {"content": "noted"}]) as server:
        setup(server.base_url, principal=True)
        doc = fwj("agent", "run", "a1", "--principal", "p1", "--message", "remember")
    assert doc["tool_calls"] == [{"name": "framework_memory_write", "outcome": "ok"}]
    assert fwj("memory", "read", "p1", "mood")["value"] == EMOJI


# -- lone surrogates ---------------------------------------------------------------------------
def test_a_lone_surrogate_in_a_model_answer_is_the_models_failure_and_the_run_ends(home):
    """The caller's input was fine: the model's answer is what fw cannot use (`unavailable`,
    reason `model_answer`), whether it streamed or came whole."""
    whole = {"raw": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "half \ud83d"}}]})}
    with ChatServer([stream(chunk({"content": "half \ud83d"}), chunk({}, "stop")), whole]) as server:
        setup(server.base_url)
        for _ in range(2):
            r = fw("agent", "run", "a1", "--message", "hi", "--json")
            assert r.exit_code == 7, r
            error = r.json["error"]
            assert (error["code"], error["reason"]) == ("unavailable", "model_answer") and "surrogate" in error["message"], r
            assert fwj("run", "show", error["run_id"])["status"] == "ended"


def test_a_lone_surrogate_in_a_dispatched_answer_fails_its_turn_without_a_traceback(home):
    with ChatServer([{"raw": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "oops \udc00"}}]})},
                     {"content": "fine"}]) as server:
        setup(server.base_url, principal=True)
        fwj("principal", "create", "alice", "--kind", "user")
        fwj("session", "create", "s1", "--member", "alice", "--member", "p1")
        fwj("message", "post", "s1", "--as", "alice", "hello @p1")
        fwj("message", "post", "s1", "--as", "alice", "again @p1")
        r = fw_proc("dispatch", "--once", "--workers", "1", "--json")
    assert r.exit_code == 0 and "Traceback" not in r.stderr, r
    assert r.json["turns"] == {"run": 2, "answered": 1, "failed": 1, "cancelled": 0}
    turns = fwj("session", "show", "s1")["session"]["turns"]
    assert [t["status"] for t in turns] == ["failed", "done"]
    assert turns[0]["error"].startswith("unavailable (model_answer): ") and "surrogate" in turns[0]["error"]
    assert [m["text"] for m in fwj("message", "list", "s1")["messages"]] == ["hello @p1", "again @p1", "fine"]


def test_a_lone_surrogate_in_tool_arguments_is_invalid_and_audited(home):
    with ChatServer([]) as server:
        setup(server.base_url, principal=True)
    run = fwj("run", "start", "--principal", "p1")["run_id"]
    for tool, args, field in (
        ("framework_memory_write", {"key": "k", "value": "\ud800"}, "value"),
        ("framework_session_create", {"name": "s1", "members": [], "title": "a \udfff b"}, "title"),
    ):
        r = fw("tool", "call", "--run", run, tool, "--args", json.dumps(args))
        assert r.exit_code == 4 and r.json["error"]["code"] == "invalid" and r.json["error"]["field"] == field, r
        assert audit(home)[-1]["tool"] == tool and audit(home)[-1]["error"] == "invalid"
    assert fwj("memory", "list", "p1")["keys"] == [] and fwj("session", "list")["sessions"] == []


def test_a_model_sending_a_lone_surrogate_in_a_tool_call_is_answered_invalid_and_the_loop_goes_on(home):
    call = {"id": "c1", "type": "function", "function": {"name": "framework_memory_write",
                                                       "arguments": '{"key": "k", "value": "\udbff"}'}}
    bad_name = {"id": "c2", "type": "function", "function": {"name": "framework_\ud800", "arguments": "{}"}}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call, bad_name]}}]}
    with ChatServer([{"raw": json.dumps(answer)}, {"content": "done"}]) as server:
        setup(server.base_url, principal=True)
        doc = fwj("agent", "run", "a1", "--principal", "p1", "--message", "go")
    assert doc["status"] == "completed" and doc["answer"] == "done"
    assert [(c["outcome"], c["error"]) for c in doc["tool_calls"]] == [("error", "invalid"), ("refused", "denied")]
    lines = audit(home)[-2:]
    assert [(e["tool"], e["error"]) for e in lines] == [("framework_memory_write", "invalid"), ("framework_\ufffd", "denied")]
    sent = server.requests[1]["json"]["messages"]
    assert [m["role"] for m in sent[-3:]] == ["assistant", "tool", "tool"]  # the model read both answers


@pytest.mark.parametrize("args", [
    ["message", "post", "s1", "--as", "alice", "\udcff"],
    ["session", "create", "s2", "--member", "alice", "--title", "caf\udce9"],
    ["memory", "read", "alice", "\udc80key"],
])
def test_a_command_line_argument_that_is_not_utf8_is_invalid_and_changes_nothing(home, args):
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice")
    r = fw(*args, "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid" and "UTF-8" in r.json["error"]["message"], r
    assert fwj("message", "list", "s1")["messages"] == [] and [s["name"] for s in fwj("session", "list")["sessions"]] == ["s1"]


def test_bytes_that_are_not_utf8_on_the_real_command_line_are_invalid(home):
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice")
    r = fw_proc("message", "post", "s1", "--as", "alice", "caf\udce9", "--json")  # the byte 0xe9 alone
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid" and "Traceback" not in r.stderr, r
    assert fwj("message", "list", "s1")["messages"] == []
