"""`fw agent run` for a person at a terminal (issue 29, item 6): the answer streams (unless
--no-stream), each tool call shows on stderr as it starts and as it ends, with its outcome and
time; `--json` is unchanged; `--continue`/`-c` carries on the agent's last conversation, kept
in state.db apart from sessions and without any reasoning."""

import json
import os
import pty
import re
import sqlite3
import subprocess
import threading
import time

import pytest
from conftest import CANARY, fw, fw_bin, fwj
from fakes.chat_server import ChatServer
from test_model_client import read_to_end, read_until

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
THOUGHT = "Reasoning that must stay between fw and the model."


def setup_agent(base_url):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", "builtin_tools": ["resource_management"]}))


def on_a_terminal(home, args, gate=None):
    """fw agent run with stdout and stderr on one pseudo-terminal: all it showed, in order."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            env={**os.environ, "FW_HOME": str(home)})
    os.close(slave)
    try:
        deadline = time.monotonic() + 30
        shown = b""
        if gate is not None:
            shown = read_until(master, "The", shown, deadline)  # the first piece, before the rest is sent
            gate.set()
        shown = read_to_end(master, shown, deadline)
        proc.wait(timeout=30)
    finally:
        if gate is not None:
            gate.set()
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, shown
    return ANSI.sub("", shown.decode()).replace("\r\n", "\n")


def test_on_a_terminal_each_tool_call_shows_as_it_starts_and_ends_and_the_answer_streams(home):
    gate = threading.Event()
    script = [{"tool_calls": [{"name": "framework_resource_list", "arguments": {"kind": "agent"}}]},
              {"content": "The answer arrives in pieces.", "gate": gate}]
    with ChatServer(script) as server:
        setup_agent(server.base_url)
        text = on_a_terminal(home, ["--message", "hi"], gate)
    assert [r["json"].get("stream") for r in server.requests] == [True, True]
    start = text.index("  tool framework_resource_list ...")
    end = re.search(r"  tool framework_resource_list: ok in \d+ ms", text)
    assert end and start < end.start() < text.index("The answer arrives in pieces.")
    assert text.count("The answer arrives in pieces.") == 1 and CANARY not in text


def test_no_stream_asks_for_a_whole_answer_on_a_terminal_too(home):
    with ChatServer([{"content": "Whole at once."}]) as server:
        setup_agent(server.base_url)
        text = on_a_terminal(home, ["--message", "hi", "--no-stream"])
    assert "stream" not in server.requests[0]["json"]
    assert text.count("Whole at once.") == 1


def test_json_output_is_unchanged(home):
    script = [{"tool_calls": [{"name": "framework_resource_list", "arguments": {"kind": "agent"}}]}, {"content": "done"}]
    with ChatServer(script) as server:
        setup_agent(server.base_url)
        r = fw("agent", "run", "a1", "--message", "hi", "--json")
    assert r.exit_code == 0 and r.stderr == "", r
    assert set(r.json) == {"run_id", "status", "answer", "rounds", "finish_reason", "tool_calls"}
    assert r.json["tool_calls"] == [{"name": "framework_resource_list", "outcome": "ok"}]


# -- --continue ---------------------------------------------------------------------------------
def stored_messages(home):
    if not (home / "state.db").exists():
        return []
    db = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'conversation_messages'").fetchone():
            return []
        return [(c, json.loads(m)) for c, m in db.execute("SELECT conversation, message FROM conversation_messages ORDER BY id")]
    finally:
        db.close()


def test_continue_carries_on_the_last_conversation_with_its_tool_calls_but_never_its_reasoning(home):
    call = {"name": "framework_resource_list", "arguments": {"kind": "agent"}, "id": "call_first"}
    script = [
        {"reasoning": THOUGHT, "tool_calls": [call]},
        {"reasoning": THOUGHT, "content": "You are Ada; there is one agent."},
        {"content": "Your name is Ada."},
    ]
    with ChatServer(script, thinking=True) as server:
        setup_agent(server.base_url)
        first = fwj("agent", "run", "a1", "--message", "I am Ada. Which agents exist?")
        second = fwj("agent", "run", "a1", "-c", "--message", "What is my name?")
    assert (first["answer"], second["answer"]) == ("You are Ada; there is one agent.", "Your name is Ada.")
    assert first["run_id"] != second["run_id"]
    sent = server.requests[2]["json"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[1]["content"] == "I am Ada. Which agents exist?" and sent[-1]["content"] == "What is my name?"
    assert sent[2]["tool_calls"][0]["id"] == "call_first" and json.loads(sent[3]["content"])["items"][0]["name"] == "a1"
    assert not [m for m in sent if "reasoning_content" in m]  # an earlier turn's reasoning is not sent again
    stored = stored_messages(home)
    assert len({c for c, _ in stored}) == 1 and len(stored) == 6  # one conversation: both runs' messages
    assert THOUGHT not in json.dumps(stored) and all(set(m) <= {"role", "content", "tool_calls", "tool_call_id"} for _, m in stored)
    assert fwj("session", "list")["sessions"] == []  # not a session


def test_each_run_without_continue_starts_a_conversation_and_continue_takes_the_last(home):
    with ChatServer([{"content": "one"}, {"content": "two"}, {"content": "three"}]) as server:
        setup_agent(server.base_url)
        fwj("agent", "run", "a1", "--message", "first")
        fwj("agent", "run", "a1", "--message", "second")
        fwj("agent", "run", "a1", "--continue", "--message", "third")
    assert [m["content"] for m in server.requests[1]["json"]["messages"][1:]] == ["second"]  # a new conversation
    assert [m["content"] for m in server.requests[2]["json"]["messages"][1:]] == ["second", "two", "third"]
    assert len({c for c, _ in stored_messages(home)}) == 2


def test_continue_with_nothing_to_continue_starts_one(home):
    with ChatServer([{"content": "hello"}, {"content": "again"}]) as server:
        setup_agent(server.base_url)
        fwj("agent", "run", "a1", "-c", "--message", "hi")
        fwj("agent", "run", "a1", "-c", "--message", "and?")
    assert [m["content"] for m in server.requests[0]["json"]["messages"][1:]] == ["hi"]
    assert [m["content"] for m in server.requests[1]["json"]["messages"][1:]] == ["hi", "hello", "and?"]


def test_continue_is_for_explicit_runs_only(home):
    with ChatServer([{"content": "never"}]) as server:
        setup_agent(server.base_url)
        fwj("principal", "create", "ops", "--kind", "agent")
        fwj("binding", "set", "ops", "--agent", "a1")
        r = fw("agent", "run", "a1", "--principal", "ops", "--continue", "--message", "hi", "--json")
    assert r.exit_code == 2 and r.json["error"]["code"] == "usage" and "--principal" in r.json["error"]["message"], r
    assert server.requests == [] and fwj("run", "list")["runs"] == []


def test_a_managed_run_keeps_no_conversation_and_a_failed_run_adds_nothing(home):
    with ChatServer([{"content": "managed"}, {"status": 401, "body": "no"}]) as server:
        setup_agent(server.base_url)
        fwj("principal", "create", "ops", "--kind", "agent")
        fwj("binding", "set", "ops", "--agent", "a1")
        fwj("agent", "run", "a1", "--principal", "ops", "--message", "hi")
        assert fw("agent", "run", "a1", "--message", "fails").exit_code == 7
    assert stored_messages(home) == []


@pytest.mark.parametrize("secret_in", ["message", "answer"])
def test_a_conversation_keeps_no_secret_value(home, secret_in):
    said = f"the key is {CANARY}"
    with ChatServer([{"content": said if secret_in == "answer" else "noted"}]) as server:
        setup_agent(server.base_url)
        fw("agent", "run", "a1", "--message", said if secret_in == "message" else "tell me", "--json")
    stored = json.dumps(stored_messages(home))
    assert CANARY not in stored and "[redacted]" in stored
