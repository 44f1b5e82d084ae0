"""The runtime pieces an agent run is built from, driven directly: the chat client against a
scripted chat completions server, the model loop, and the MCP connections of a run against a
real MCP server process."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import mcp.client.stdio  # noqa: F401  (loaded up front: the timing test below measures the start, not the import)
import pytest
from conftest import CANARY
from fakes import http_mcp
from fakes.chat_server import ChatServer

from framework_cli.dialects.openai import merge_tool_call_pieces
from framework_cli.engine.chat import ChatClient
from framework_cli.engine.loop import run_loop
from framework_cli.errors import FwError
from framework_cli.http_client import sse_data
from framework_cli.runtime.mcp_client import McpConnections
from framework_cli.runtime.mcp_links import ServerSpec

FAKE_MCP = str(Path(__file__).parent / "fakes" / "mcp_server.py")
ADD = {"name": "framework_add", "description": "Add two integers.",
       "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}


class FakeToolService:
    """Stands in for fw's tool service: records each call and answers from a table."""

    def __init__(self, answers=None):
        self.calls = []
        self.answers = answers or {}

    def __call__(self, name, args):
        self.calls.append((name, args))
        if not isinstance(args, dict):  # as the real service: refused (and audited) before any handler
            raise FwError("invalid", f"{name}: the arguments must be a JSON object", "", field="(arguments)")
        answer = self.answers.get(name, lambda a: {"sum": a.get("a", 0) + a.get("b", 0)})
        return answer(args)


def loop(server, *, stream=False, tools=(ADD,), service=None, max_rounds=None, events=None):
    client = ChatClient(server.base_url, CANARY, "m-1", stream=stream, timeout=10)
    service = service or FakeToolService()

    async def call_tool(name, args):
        return service(name, args)

    return asyncio.run(run_loop(client, system="You add numbers.", user="1 + 2?", tools=list(tools),
                                call_tool=call_tool, max_rounds=max_rounds,
                                on_event=events.append if events is not None else None))


# -- the loop against the scripted model -----------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_two_rounds_call_a_tool_then_answer(stream):
    service = FakeToolService()
    events = []
    script = [{"tool_calls": [{"name": "framework_add", "arguments": {"a": 1, "b": 2}}]}, {"content": "It is 3."}]
    with ChatServer(script) as server:
        result = loop(server, stream=stream, service=service, events=events)

    assert result.to_dict("run-1") == {"run_id": "run-1", "status": "completed", "answer": "It is 3.", "rounds": 2,
                                       "finish_reason": "stop", "tool_calls": [{"name": "framework_add", "outcome": "ok"}]}
    assert service.calls == [("framework_add", {"a": 1, "b": 2})]
    first, second = server.requests
    assert first["path"] == "/v1/chat/completions"
    assert first["headers"]["authorization"] == f"Bearer {CANARY}"
    assert first["json"]["model"] == "m-1"
    assert first["json"]["tools"] == [{"type": "function", "function": {
        "name": "framework_add", "description": "Add two integers.", "parameters": ADD["input_schema"]}}]
    assert first["json"].get("stream", False) is stream
    assert first["json"]["messages"] == [
        {"role": "system", "content": "You add numbers."}, {"role": "user", "content": "1 + 2?"}]
    assistant, tool = second["json"]["messages"][2:]
    call_id = assistant["tool_calls"][0]["id"]
    assert assistant["tool_calls"] == [{"id": call_id, "type": "function",
                                        "function": {"name": "framework_add", "arguments": '{"a": 1, "b": 2}'}}]
    assert tool == {"role": "tool", "tool_call_id": call_id, "content": '{"sum": 3}'}
    texts = [e["text"] for e in events if e["type"] == "text"]  # streamed answers are heard as they come
    assert "".join(texts) == ("It is 3." if stream else "") and (len(texts) > 1) is stream
    events = [e for e in events if e["type"] != "text"]
    assert [e["type"] for e in events] == ["round", "tool_start", "tool_call", "round", "answer"]
    assert events[1]["name"] == "framework_add" and events[2]["outcome"] == "ok" and events[4]["text"] == "It is 3."
    assert isinstance(events[2]["seconds"], float)


def test_streamed_tool_calls_are_merged_by_index():
    long_text = "a text long enough to arrive in many pieces " * 3
    script = [{"stream": True, "content": "Working on it.", "tool_calls": [
        {"name": "framework_add", "arguments": {"a": 40, "b": 2}},
        {"name": "framework_echo", "arguments": {"text": long_text}}]}, {"content": "done"}]
    service = FakeToolService({"framework_echo": lambda a: {"text": a["text"]}})
    with ChatServer(script) as server:
        result = loop(server, stream=True, service=service)
    assert service.calls == [("framework_add", {"a": 40, "b": 2}), ("framework_echo", {"text": long_text})]
    assistant = server.requests[1]["json"]["messages"][2]
    assert assistant["content"] == "Working on it."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_0_framework_add", "call_1_framework_echo"]
    assert result.status == "completed" and result.rounds == 2


@pytest.mark.parametrize("asked_stream", [False, True])
def test_the_answer_is_read_as_it_comes_whatever_was_asked(asked_stream):
    # A server that ignores the stream flag: the Content-Type decides how the answer is read.
    with ChatServer([{"content": "hello there", "stream": not asked_stream}]) as server:
        client = ChatClient(server.base_url, CANARY, "m-1", stream=asked_stream)
        reply = asyncio.run(client.complete([{"role": "user", "content": "hi"}], None))
    assert reply.content == "hello there" and reply.tool_calls == []


def test_a_run_without_tools_sends_no_tools():
    with ChatServer([{"content": "hi"}]) as server:
        result = loop(server, tools=[])
    assert "tools" not in server.requests[0]["json"]
    assert result.status == "completed" and result.tool_calls == []


def test_max_rounds_stops_a_model_that_always_calls_tools():
    script = [{"content": "again", "tool_calls": [{"name": "framework_add", "arguments": {"a": 1, "b": 1}}]}]
    with ChatServer(script, repeat_last=True) as server:
        result = loop(server, max_rounds=3)
    assert len(server.requests) == 3
    assert result.to_dict("r")["status"] == "max_rounds"
    assert result.rounds == 3 and result.answer == "again"
    assert result.tool_calls == [{"name": "framework_add", "outcome": "ok"}] * 3


def test_refused_failed_and_malformed_calls_are_answered_and_the_loop_goes_on():
    def refuse(args):
        raise FwError("denied", "framework_nope is not one of this run's tools", "")

    def ended(args):
        raise FwError("run_ended", "the run was ended", "")

    def invalid(args):
        raise FwError("invalid", "kind: 'gizmo' is not one of [...]", "")

    def crash(args):
        raise RuntimeError(f"boom with {CANARY}")

    service = FakeToolService({"framework_nope": refuse, "framework_ended": ended,
                               "framework_invalid": invalid, "framework_crash": crash})
    calls = [{"name": "framework_nope", "arguments": {}},
             {"name": "framework_invalid", "arguments": {"kind": "gizmo"}},
             {"name": "framework_crash", "arguments": {}},
             {"name": "framework_add", "arguments": "{not json"}, {"name": "framework_add", "arguments": "[1, 2]"},
             {"name": "framework_add", "arguments": ""}]
    with ChatServer([{"tool_calls": calls}, {"content": "sorry"}]) as server:
        result = loop(server, service=service)

    assert result.status == "completed" and result.answer == "sorry"
    assert [(c["outcome"], c.get("error")) for c in result.tool_calls] == [
        ("refused", "denied"), ("error", "invalid"), ("error", "internal"),
        ("error", "invalid"), ("error", "invalid"), ("ok", None)]
    # Malformed arguments reach the service as they came (so that it audits them); an empty
    # text means no arguments.
    assert [name for name, _ in service.calls] == [
        "framework_nope", "framework_invalid", "framework_crash", "framework_add", "framework_add", "framework_add"]
    assert service.calls[3:] == [("framework_add", "{not json"), ("framework_add", [1, 2]), ("framework_add", {})]
    answers = [m for m in server.requests[1]["json"]["messages"] if m["role"] == "tool"]
    errors = [json.loads(m["content"]).get("error", {}) for m in answers]
    assert [e.get("code") for e in errors] == ["denied", "invalid", "internal", "invalid", "invalid", None]
    assert errors[0]["message"] == "framework_nope is not one of this run's tools"
    assert "not valid JSON" in errors[3]["message"] and "not a JSON object" in errors[4]["message"]
    assert "RuntimeError" in errors[2]["message"]
    assert CANARY not in json.dumps(server.requests[1]["json"]) and "Traceback" not in json.dumps(errors)


@pytest.mark.parametrize("code", ["run_ended", "lease_expired"])
def test_a_call_refused_because_the_run_can_act_no_more_ends_the_loop(code):
    """Every call of the round is answered, then the model is not asked again: nothing the
    run could still do would be allowed."""
    def over(args):
        raise FwError(code, "the run can act no more", "")

    service = FakeToolService({"framework_over": over})
    calls = [{"name": "framework_over", "arguments": {}}, {"name": "framework_add", "arguments": ""}]
    with ChatServer([{"tool_calls": calls}, {"content": "should not be asked"}]) as server:
        with pytest.raises(FwError) as caught:
            loop(server, service=service)
    assert caught.value.code == code
    assert [name for name, _ in service.calls] == ["framework_over", "framework_add"]
    assert len(server.requests) == 1


def test_a_failing_model_ends_the_loop_as_unavailable():
    with ChatServer([{"status": 503, "body": "overloaded"}], repeat_last=True) as server:
        with pytest.raises(FwError) as caught:
            loop(server)
    assert caught.value.code == "unavailable" and caught.value.exit_code == 7
    assert caught.value.extra == {"reason": "model", "status": 503, "tries": 3}


# -- model failures: never the key ----------------------------------------------------------
def complete_failure(script, key=CANARY, reason="model", **client_options) -> FwError:
    with ChatServer(script) as server:
        client = ChatClient(server.base_url, key, "m-1", **client_options)
        with pytest.raises(FwError) as caught:
            asyncio.run(client.complete([{"role": "user", "content": "hi"}], [ADD]))
    error = caught.value
    assert error.code == "unavailable" and error.extra["reason"] == reason
    return error


def shown(error: FwError) -> str:
    return json.dumps(error.to_dict())


def test_a_401_that_echoes_the_key_shows_no_key():
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {CANARY}"}})
    error = complete_failure([{"status": 401, "body": echo}])
    assert error.extra["status"] == 401
    assert "401" in error.message and "Incorrect API key" in error.message and "[redacted]" in error.message
    assert CANARY not in shown(error)


@pytest.mark.parametrize("offset", [185, 190, 195, 199])
def test_a_key_across_the_snippet_cut_leaves_no_piece_of_it(offset):
    tail = " and more text after it" * 20
    error = complete_failure([{"status": 401, "body": "x" * offset + CANARY + tail}])
    # Not even the part of the key before the cut: the snippet is cut after scrubbing.
    assert error.message.endswith(": " + ("x" * offset + "[redacted]" + tail)[:200] + "...")
    assert CANARY[:3] not in shown(error)


def test_a_short_key_is_scrubbed_too():
    # Shorter than redact's minimum length: the client removes its own key all the same.
    error = complete_failure([{"status": 403, "body": "key Zq9x is not allowed"}], key="Zq9x")
    assert "Zq9x" not in shown(error) and "not allowed" in error.message


@pytest.mark.parametrize("step,reason", [
    ({"raw": "not json"}, "model"),
    ({"raw": ""}, "model"),
    ({"raw": "{}"}, "model"),
    ({"raw": '{"choices": []}'}, "model"),
    ({"raw": '{"choices": [{"message": "text"}]}'}, "model_answer"),
    ({"raw": '{"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}'}, "model_answer"),
    ({"raw": '{"choices": [{"message": {"tool_calls": [{"function": {"name": "f", "arguments": 5}}]}}]}'}, "model_answer"),
    ({"raw": "[1, 2]"}, "model"),
    ({"raw": json.dumps({"error": {"message": f"bad key {CANARY}"}})}, "model"),
    ({"raw": "data: not json\n\n", "content_type": "text/event-stream"}, "model"),
    ({"raw": "data: [DONE]\n\n", "content_type": "text/event-stream; charset=utf-8"}, "model"),
    ({"content": ""}, "model_answer"),
    ({"content": "", "stream": True}, "model_answer"),
], ids=lambda s: repr(s)[:40])
def test_garbage_answers_are_unavailable(step, reason):
    """Not an answer of the API at all (base_url points elsewhere, the provider failed):
    `model`; an answer whose shape fw cannot use: `model_answer`, the model's failure."""
    error = complete_failure([step], reason=reason)
    assert error.extra["status"] == 200 and CANARY not in shown(error)


def test_an_unreachable_model_is_unavailable():
    port = http_mcp.free_port()  # closed again: nothing listens there
    client = ChatClient(f"http://127.0.0.1:{port}/v1", CANARY, "m-1", timeout=5)
    with pytest.raises(FwError) as caught:
        asyncio.run(client.complete([{"role": "user", "content": "hi"}], None))
    assert caught.value.code == "unavailable" and caught.value.extra == {"reason": "model", "status": None, "tries": 1}
    assert "the connection was refused" in caught.value.message and CANARY not in shown(caught.value)


def test_a_model_that_does_not_answer_in_time_is_unavailable():
    error = complete_failure([{"sleep": 2, "content": "late"}], timeout=0.5)
    assert "in time" in error.message and error.extra["status"] is None


def test_sse_reading_and_piece_merging_follow_the_spec():
    assert list(sse_data(": comment\nevent: x\ndata: one\ndata:two\n\ndata: three\n")) == ["one\ntwo", "three"]
    calls = merge_tool_call_pieces([
        {"index": 1, "id": "b", "function": {"name": "second", "arguments": '{"x"'}},
        {"index": 0, "id": "a", "function": {"name": "first", "arguments": ""}},
        {"index": 1, "function": {"arguments": ": 1}"}},
        {"index": 0, "function": {"arguments": "{}"}},
    ])
    assert [(c.id, c.name, c.arguments) for c in calls] == [("a", "first", "{}"), ("b", "second", '{"x": 1}')]


# -- MCP connections -------------------------------------------------------------------------
def fake_server(name, tmp_path, *flags, env=None):
    pid_file = tmp_path / f"{name}.pid"
    env = {"FAKE_MCP_PID_FILE": str(pid_file), **(env or {})}
    spec = ServerSpec(name, command=sys.executable, args=[FAKE_MCP, *flags], env=env)
    return spec, pid_file


def children() -> set[int]:
    """This process's child processes, zombies included (Linux; none where /proc cannot tell)."""
    found: set[int] = set()
    tasks = Path("/proc/self/task")
    for task in tasks.iterdir() if tasks.is_dir() else ():
        try:
            found.update(int(pid) for pid in (task / "children").read_text().split())
        except FileNotFoundError:  # a thread that ended while we looked
            continue
    return found


def assert_gone(pid_file: Path) -> None:
    if pid_file.exists():  # a server killed before it got that far wrote none
        pid = int(pid_file.read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_an_mcp_server_lists_and_answers_in_its_own_minimal_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PARENT_SECRET", "parent-secret-value")
    monkeypatch.setenv("USER", "someone")  # the SDK passes USER and SHELL on by itself; fw must not
    monkeypatch.setenv("SHELL", "/bin/sh")
    monkeypatch.setenv("LANG", "C.UTF-8")
    token = "srv-token-5c1a9e"
    spec, pid_file = fake_server("fake", tmp_path, env={"SERVER_TOKEN": token, "SHORT": "abc"})
    spec.timeout_seconds = 0.5  # a call's idle limit: `slow` below reaches it
    before = children()
    with McpConnections([spec]) as mcp:
        assert mcp.unavailable == {}
        tools = {t["name"]: t for t in mcp.tools["fake"]}
        assert {"echo", "add", "env", "fail"} <= set(tools)
        assert tools["add"]["input_schema"]["required"] == ["a", "b"]
        assert tools["add"]["description"] == "Add two integers."
        added = mcp.call("fake", "add", {"a": 2, "b": 40})
        assert added == {"content": ["42"], "is_error": False, "structured": {"result": 42}}

        def env(name):
            return mcp.call("fake", "env", {"name": name})["content"][0]

        assert env("FAKE_PARENT_SECRET") == "<unset>"
        assert [env(n) for n in ("USER", "LOGNAME", "SHELL", "FW_MCP_ENV_KEYS")] == ["<unset>"] * 4
        assert [env(n) for n in ("PATH", "LANG")] == [os.environ["PATH"], "C.UTF-8"] and env("SHORT") == "abc"
        assert env("SERVER_TOKEN") == "[redacted]"  # it got its secret; fw never shows it
        failed = mcp.call("fake", "fail", {"text": f"cannot use {token}"})
        assert failed["is_error"] is True and failed["content"] == ["Error executing tool fail: cannot use [redacted]"]
        assert mcp.call("fake", "nope", {})["is_error"] is True
        with pytest.raises(FwError) as caught:
            mcp.call("fake", "slow", {"seconds": 5})  # its timeout_seconds: 0.5
        assert caught.value.code == "unavailable" and caught.value.extra == {"reason": "mcp_timeout"}
        assert mcp.call("fake", "echo", {"text": "still here"})["content"] == ["still here"]
        os.kill(int(pid_file.read_text()), 0)  # alive while the run lasts
    assert_gone(pid_file)
    assert children() <= before


def test_servers_that_hang_crash_or_are_missing_leave_the_others_working(tmp_path):
    good, good_pid = fake_server("good", tmp_path)
    hang, hang_pid = fake_server("hang", tmp_path, "--hang")
    crash, crash_pid = fake_server("crash", tmp_path, "--crash")
    missing = ServerSpec("missing", command="fw-no-such-mcp-server")
    before = children()
    # Long enough for the good server to start on a slow machine (importing the SDK takes seconds).
    with McpConnections([good, hang, crash, missing], start_timeout=8) as mcp:
        assert list(mcp.tools) == ["good"]
        assert set(mcp.unavailable) == {"hang", "crash", "missing"}
        assert "within 8 s" in mcp.unavailable["hang"]
        assert "Connection closed" in mcp.unavailable["crash"]
        assert mcp.unavailable["missing"] == "command not found: fw-no-such-mcp-server"
        assert mcp.call("good", "echo", {"text": "hi"})["content"] == ["hi"]
        with pytest.raises(FwError) as caught:
            mcp.call("hang", "echo", {"text": "hi"})
        assert caught.value.code == "unavailable" and caught.value.extra == {"reason": "mcp_server"}
    for pid_file in (good_pid, hang_pid, crash_pid):
        assert_gone(pid_file)
    assert hang_pid.exists()  # the hung server did start: it was stopped, not just never seen
    assert children() <= before


def test_a_hung_server_is_given_up_on_at_the_start_timeout(tmp_path):
    hang, hang_pid = fake_server("hang", tmp_path, "--hang")
    started = time.monotonic()
    with McpConnections([hang], start_timeout=2) as mcp:
        waited = time.monotonic() - started
        assert mcp.tools == {} and "within 2 s" in mcp.unavailable["hang"]
    # Reported at the timeout: stopping it (a 2 s grace after its stdin closes, then a signal)
    # is left to the exit.
    assert 2 <= waited < 3.5
    assert_gone(hang_pid)


def test_an_http_server_gets_its_headers(tmp_path):
    server, url = http_mcp.start(lambda port: [sys.executable, FAKE_MCP, "--http", str(port)])
    try:
        secret = "hdr-secret-4f7e2a"
        spec = ServerSpec("remote", transport="http", url=url, headers={"X-Api-Key": secret})
        wrong = ServerSpec("wrong", transport="http", url=url.replace("/mcp", "/elsewhere"))
        with McpConnections([spec, wrong]) as mcp:
            assert "add" in [t["name"] for t in mcp.tools["remote"]]
            # Redacted means the server received exactly the secret and fw did not show it.
            assert mcp.call("remote", "header", {"name": "X-Api-Key"})["content"] == ["[redacted]"]
            assert mcp.call("remote", "add", {"a": 1, "b": 1})["structured"] == {"result": 2}
            assert "Not Found" in mcp.unavailable["wrong"]
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_an_http_server_that_forgets_the_session_is_given_a_new_one_and_the_call_goes_through():
    """A 404 to a request of fw's session (a server restarted meanwhile): fw starts a new
    session, as the transport asks, and sends the request once more."""
    raw = str(Path(__file__).parent / "fakes" / "raw_mcp_server.py")
    server, url = http_mcp.start(lambda port: [sys.executable, raw, "--http", str(port), "--forget", "2"], seconds=30)
    try:
        with McpConnections([ServerSpec("web", transport="http", url=url)]) as mcp:
            assert mcp.unavailable == {}
            for _ in range(3):  # the listing and these calls cross two forgotten sessions
                assert mcp.call("web", "plain", {"text": "x"})["content"] == ["plain done"]
            assert int(mcp.call("web", "sessions", {})["content"][0]) >= 2
    finally:
        server.terminate()
        server.wait(timeout=10)
