"""MCP servers fw did not write, and MCP clients: awkward names and schemas, isError, annotations,
stderr on a crash, huge results, invisible text, frozen definitions, concurrency and hints.

The servers are real processes: tests/fakes/raw_mcp_server.py speaks raw JSON-RPC (to say what
the SDK would refuse), tests/fakes/mcp_server.py is built on the SDK. Clients of `fw mcp serve`
are the official SDK client."""

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest
from conftest import CANARY, fw, fw_bin, fw_proc, fwj, snapshot
from fakes import http_mcp
from fakes.chat_server import ChatServer
from mcp import Client
from mcp.client.stdio import StdioServerParameters

RAW = str(Path(__file__).parent / "fakes" / "raw_mcp_server.py")
TOKEN = "raw-token-9d41c7e2"  # an env secret of the raw server


def raw_server(name="raw", *flags, env=None):
    data = {"transport": "stdio", "command": sys.executable, "args": [RAW, *flags], "env": {"RAW_TOKEN": TOKEN, **(env or {})}}
    fwj("resource", "write", "mcp", name, "--create", "--data", json.dumps(data))


def agent(base_url="https://llm.example.test/v1", **fields):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", **fields}))


def reasons(run):
    return {u["name"]: u["reason"] for u in run["unavailable_tools"]}


def tool_call(run_id, name, args=None):
    r = fw("tool", "call", "--run", run_id, name, "--args", json.dumps(args or {}))
    assert "Traceback" not in r.output
    return r


def audit(home):
    return [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]


def running(marker):
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if marker in line]


# -- the projection: names, schemas, counts, annotations, invisible text ---------------------
def test_names_chat_apis_refuse_and_a_bad_schema_are_listed_the_rest_offered():
    raw_server()
    agent(mcps=["raw"])
    run = fwj("run", "start", "--agent", "a1")
    why = reasons(run)
    for bad in ("get.weather", "a b", "über", "x" * 80):
        assert why[f"mcp__raw__{bad}"] == "invalid_name"
    assert why["mcp__raw__stringy"] == "invalid_schema"
    assert {"mcp__raw__ok", "mcp__raw__wipe", "mcp__raw__plain", "mcp__raw__fails"} <= set(run["tools"])
    assert all(len(n) <= 64 for n in run["tools"])


def test_a_run_offers_at_most_128_tools_cut_in_source_order():
    raw_server("raw", "--tools", "200")
    agent(mcps=["raw"], builtin_tools=["resource_management"])
    run = fwj("run", "start", "--agent", "a1")
    assert len(run["tools"]) == 128
    builtin = [n for n in run["tools"] if n.startswith("framework_")]
    assert run["tools"][:len(builtin)] == builtin  # the built-in tools come first
    numbered = [n for n in run["tools"] if re.fullmatch(r"mcp__raw__t\d{4}", n)]
    assert numbered == [f"mcp__raw__t{i:04d}" for i in range(len(numbered))]
    cut = [u["name"] for u in run["unavailable_tools"] if u["reason"] == "too_many_tools"]
    assert cut == [f"mcp__raw__t{i:04d}" for i in range(len(numbered), 200)]


def test_annotations_set_the_risk():
    raw_server()
    agent(mcps=["raw"])
    run = fwj("run", "start", "--agent", "a1")
    risk = {t["name"]: t["risk"] for t in fwj("tool", "list", "--run", run["run_id"])["tools"]}
    assert (risk["mcp__raw__ok"], risk["mcp__raw__wipe"], risk["mcp__raw__plain"]) == ("read", "dangerous", "write")


def test_invisible_characters_are_stripped_and_the_run_says_so_and_tool_list_shows_what_the_model_reads():
    raw_server()
    script = [{"tool_calls": [{"name": "mcp__raw__hidden", "arguments": {}}]}, {"content": "done"}]
    with ChatServer(script) as server:
        agent(server.base_url, mcps=["raw"])
        doc = fwj("agent", "run", "a1", "--message", "hi")
    sent = {t["function"]["name"]: t["function"] for t in server.requests[0]["json"]["tools"]}
    assert sent["mcp__raw__hidden"]["description"] == "Looks harmless."
    assert doc["tool_calls"] == [{"name": "mcp__raw__hidden", "outcome": "ok"}]  # called by the server's own name
    assert json.loads(server.requests[1]["json"]["messages"][-1]["content"])["content"] == ["hid\u200bden done"]
    run = fwj("run", "show", doc["run_id"])
    assert run["invisible_characters_stripped"] == [{"name": "mcp__raw__hidden", "characters": 4}]
    shown = fw("run", "show", doc["run_id"])
    assert "invisible characters" in shown.stdout and "mcp__raw__hidden" in shown.stdout

    # `fw tool list --run` shows exactly what the model was given (its run has ended; a new one lists the same)
    again = fwj("run", "start", "--agent", "a1")
    listed = {t["name"]: t for t in fwj("tool", "list", "--run", again["run_id"])["tools"]}
    assert set(listed) == set(sent)
    for name, function in sent.items():
        assert (listed[name]["description"], listed[name]["input_schema"]) == (function["description"], function["parameters"])


# -- calls: isError, truncation, stderr, process groups --------------------------------------
def test_an_upstream_is_error_is_an_error_everywhere(home):
    raw_server()
    script = [{"tool_calls": [{"name": "mcp__raw__fails", "arguments": {"text": f"bad {TOKEN}"}}]}, {"content": "sorry"}]
    with ChatServer(script) as server:
        agent(server.base_url, mcps=["raw"])
        doc = fwj("agent", "run", "a1", "--message", "hi")
    assert doc["tool_calls"] == [{"name": "mcp__raw__fails", "outcome": "error", "error": "unavailable"}]
    told = json.loads(server.requests[1]["json"]["messages"][-1]["content"])["error"]
    assert told["code"] == "unavailable" and told["reason"] == "mcp_tool"
    assert "upstream says no: bad [redacted]" in told["message"] and TOKEN not in json.dumps(told)
    assert [a["outcome"] for a in audit(home) if a["tool"] == "mcp__raw__fails"] == ["error"]

    run = fwj("run", "start", "--agent", "a1")
    r = tool_call(run["run_id"], "mcp__raw__fails", {"text": f"again {TOKEN}"})
    assert r.exit_code == 7, r
    error = r.json["error"]
    assert error["code"] == "unavailable" and error["reason"] == "mcp_tool"
    assert "upstream says no: again [redacted]" in error["message"] and TOKEN not in r.output


def test_a_huge_result_is_cut_at_64_kib_for_the_model():
    raw_server()
    script = [{"tool_calls": [{"name": "mcp__raw__huge", "arguments": {"bytes": 3_000_000}}]}, {"content": "big"}]
    with ChatServer(script) as server:
        agent(server.base_url, mcps=["raw"])
        fwj("agent", "run", "a1", "--message", "hi")
    content = server.requests[1]["json"]["messages"][-1]["content"]
    read = json.loads(content)
    assert read["truncated"] is True and len("".join(read["content"]).encode()) == 64 * 1024
    assert len(content.encode()) < 70 * 1024
    run = fwj("run", "start", "--agent", "a1")
    small = tool_call(run["run_id"], "mcp__raw__huge", {"bytes": 10})
    assert small.exit_code == 0 and small.json["truncated"] is False and small.json["content"] == ["y" * 10]


def test_a_server_that_dies_says_why_in_the_run_and_in_errors(tmp_path):
    raw_server("dies", "--stderr", "sqlite: unable to open database (key $RAW_TOKEN)")
    crash_file = tmp_path / "crash"
    raw_server("later", "--crash-file", str(crash_file))
    agent(mcps=["dies", "later"])
    run = fwj("run", "start", "--agent", "a1")
    detail = next(u["detail"] for u in run["unavailable_tools"] if u["name"] == "mcp__dies__*")
    assert "sqlite: unable to open database" in detail and "status 4" in detail
    assert "[redacted]" in detail and TOKEN not in json.dumps(run)

    crash_file.write_text("out of disk space")
    r = tool_call(run["run_id"], "mcp__later__plain", {"text": "x"})
    assert r.exit_code == 7, r
    error = r.json["error"]
    assert error["reason"] == "mcp_server" and "out of disk space" in error["message"]
    assert "fw resource test mcp later" in error["hint"]


def test_lines_that_are_not_json_print_no_traceback(home):
    raw_server("noisy", "--noise")
    agent(mcps=["noisy"])
    started = fw_proc("run", "start", "--agent", "a1", "--json", home=home)
    assert started.exit_code == 0 and started.stderr == "", started
    run = json.loads(started.stdout)
    assert "mcp__noisy__plain" in run["tools"]
    called = fw_proc("tool", "call", "--run", run["run_id"], "mcp__noisy__plain", "--args", '{"text": "x"}', home=home)
    assert called.exit_code == 0 and called.stderr == "" and called.json["content"] == ["plain done"], called


def test_a_helper_the_server_started_in_its_group_is_stopped_with_it():
    raw_server()
    agent(mcps=["raw"])
    run = fwj("run", "start", "--agent", "a1")
    marker = f"fw-helper-{uuid.uuid4().hex}"
    r = tool_call(run["run_id"], "mcp__raw__spawn", {"marker": marker})
    assert r.exit_code == 0 and r.json["content"] == ["spawned"], r
    assert running(marker) == []


# -- a started run never follows later edits -----------------------------------------------
def test_a_started_run_keeps_the_definitions_it_started_with(home):
    raw_server()
    fwj("resource", "write", "prompt", "p", "--create", "--data", json.dumps({"body": "Be brief."}))
    agent(mcps=["raw"], prompt="p")
    run = fwj("run", "start", "--agent", "a1")
    frozen = run["snapshot"]
    assert frozen["prompt"]["body"] == "Be brief.\n" and frozen["model"]["data"]["model_id"] == "model-x"
    assert frozen["provider"]["data"]["api_key_set"] is True and CANARY not in json.dumps(run)
    assert "env" not in frozen["mcps"]["raw"]["data"] and TOKEN not in (home / "runs" / f"{run['run_id']}.json").read_text()

    fwj("resource", "write", "mcp", "raw", "--data", json.dumps({"args": [RAW, "--stderr", "edited to crash"]}))
    fwj("resource", "write", "prompt", "p", "--data", json.dumps({"body": "Be long."}))
    r = tool_call(run["run_id"], "mcp__raw__plain", {"text": "x"})
    assert r.exit_code == 0 and r.json["content"] == ["plain done"], r  # still the args it started with
    assert fwj("run", "show", run["run_id"])["snapshot"] == frozen
    fresh = fwj("run", "start", "--agent", "a1")
    assert reasons(fresh)["mcp__raw__*"] == "source_unavailable"


def test_an_agent_run_reads_its_prompt_and_model_from_the_snapshot():
    fwj("resource", "write", "prompt", "p", "--create", "--data", json.dumps({"body": "Frozen prompt."}))
    with ChatServer([{"content": "ok"}]) as server:
        agent(server.base_url, prompt="p")
        fwj("agent", "run", "a1", "--message", "hi")
    assert server.requests[0]["json"]["messages"][0] == {"role": "system", "content": "Frozen prompt.\n"}
    assert server.requests[0]["json"]["model"] == "model-x"


# -- fw as an MCP server ---------------------------------------------------------------------
def serve_params(home, *args):
    import os

    return StdioServerParameters(command=fw_bin(), args=["mcp", "serve", *args], env={"FW_HOME": str(home), "PATH": os.environ["PATH"]})


def test_serve_answers_calls_concurrently_and_passes_upstream_errors_on(home):
    raw_server()
    agent(mcps=["raw"], builtin_tools=["resource_management"])
    run = fwj("run", "start", "--agent", "a1")
    finished = []

    async def scenario():
        async with Client(serve_params(home, "--run", run["run_id"])) as client:
            await client.list_tools()

            async def call(name, args):
                result = await client.call_tool(name, args)
                finished.append(name)
                return result

            results = {}
            async with anyio.create_task_group() as group:
                async def slow():
                    results["slow"] = await call("mcp__raw__sleep", {"seconds": 4})

                async def quick():
                    await anyio.sleep(0.5)  # sent after the slow one
                    results["quick"] = await call("framework_resource_list", {"kind": "agent"})

                group.start_soon(slow)
                group.start_soon(quick)
            failed = await client.call_tool("mcp__raw__fails", {"text": "nope"})
            return results, failed

    results, failed = anyio.run(scenario)
    assert finished == ["framework_resource_list", "mcp__raw__sleep"]  # the quick call did not wait
    assert results["slow"].is_error is False and results["quick"].is_error is False
    assert failed.is_error is True
    error = json.loads(failed.content[0].text)["error"]
    assert error["code"] == "unavailable" and error["reason"] == "mcp_tool" and "upstream says no" in error["message"]
    lines = [a for a in audit(home) if a["run_id"] == run["run_id"]]
    assert [(a["tool"], a["outcome"]) for a in lines] == [
        ("framework_resource_list", "ok"), ("mcp__raw__sleep", "ok"), ("mcp__raw__fails", "error")]


def test_manager_schemas_are_plain_and_tools_carry_annotations_and_a_title(home):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "https://x.test/v1", "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data", json.dumps({"provider": "p1", "model_id": "m"}))
    fwj("agent", "create", "a1", "--model", "m1")
    fwj("principal", "create", "bob", "--kind", "agent")

    async def scenario():
        async with Client(serve_params(home, "--manager")) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            bound = await client.call_tool("agent_bind", {"principal": "bob", "agent": "a1", "max_rounds": 5})
            return tools, bound

    tools, bound = anyio.run(scenario)

    def types_in(schema):
        if isinstance(schema, dict):
            if "type" in schema:
                yield schema["type"]
            for value in schema.values():
                yield from types_in(value)
        elif isinstance(schema, list):
            for value in schema:
                yield from types_in(value)

    assert all(isinstance(t, str) for tool in tools.values() for t in types_in(tool.input_schema))
    assert tools["agent_bind"].input_schema["properties"]["max_rounds"]["type"] == "integer"
    assert bound.is_error is False and fwj("binding", "list")["bindings"][0]["max_rounds"] == 5
    read, delete, write = tools["resource_read"], tools["resource_delete"], tools["resource_write"]
    assert read.annotations.read_only_hint is True
    assert delete.annotations.destructive_hint is True and delete.annotations.read_only_hint is False
    assert write.annotations.read_only_hint is False and write.annotations.destructive_hint is False
    assert read.title == "Resource read" and all(t.title for t in tools.values())


# -- hints name the real resource and run -----------------------------------------------------
def test_hints_name_the_run_and_the_server(home):
    raw_server()
    agent(mcps=["raw"], builtin_tools=["resource_management"])
    run = fwj("run", "start", "--agent", "a1")
    before = snapshot(home)
    r = tool_call(run["run_id"], "framework_resource_write", {"kind": "agent"})
    assert r.exit_code == 4 and f"`fw tool list --run {run['run_id']}`" in r.json["error"]["hint"], r
    manager = fw("tool", "call", "--manager", "resource_list", "--args", '{"kind": 1}')
    assert manager.exit_code == 4 and "`fw tool list --manager`" in manager.json["error"]["hint"]
    after = snapshot(home)
    before.pop("audit.jsonl", None)
    after.pop("audit.jsonl", None)
    assert after == before  # refusals change nothing


# -- streamable HTTP, spoken by fw itself ------------------------------------------------------
def _http_raw_server(*flags):
    return http_mcp.start(lambda port: [sys.executable, RAW, "--http", str(port), *flags], seconds=30)


@pytest.mark.parametrize("answers", ["json", "sse"])
def test_over_http_one_malformed_tool_loses_no_other_and_server_questions_are_refused(home, answers):
    """An HTTP server is read tool by tool, as a stdio one is: a tool whose schema is not one
    (which the SDK's client refuses the whole list for) is listed as unavailable, the others are
    offered. Answers come as JSON or as event streams that first ask fw for a model (refused) and
    send a notification; the session id of the handshake goes on every request."""
    proc, url = _http_raw_server("--broken", *(["--sse"] if answers == "sse" else []))
    try:
        fwj("resource", "write", "mcp", "web", "--create", "--data", json.dumps({"transport": "http", "url": url}))
        agent(mcps=["web"])
        run = fwj("run", "start", "--agent", "a1")
        why = reasons(run)
        assert why["mcp__web__broken"] == "invalid_schema" and why["mcp__web__stringy"] == "invalid_schema"
        assert why["mcp__web__a b"] == "invalid_name"
        assert {"mcp__web__ok", "mcp__web__wipe", "mcp__web__plain", "mcp__web__fails"} <= set(run["tools"])
        done = tool_call(run["run_id"], "mcp__web__plain", {"text": "hi"})
        assert done.exit_code == 0 and json.loads(done.stdout)["content"] == ["plain done"], done
        failed = tool_call(run["run_id"], "mcp__web__fails", {"text": "nope"})
        assert failed.exit_code == 7 and failed.json["error"]["reason"] == "mcp_tool", failed
        assert "upstream says no: nope" in failed.json["error"]["message"]
        if answers == "sse":  # each call's stream asked fw for a model first: fw said it offers none
            told = json.loads(json.loads(tool_call(run["run_id"], "mcp__web__answers").stdout)["content"][0])
            assert told and all(a["error"]["code"] == -32601 and "sampling/createMessage" in a["error"]["message"] for a in told)
            assert len(told) >= 3  # the listing's stream and each call's: every question answered, none left waiting
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_result_holding_a_lone_surrogate_is_refused_whole_and_the_server_goes_on(home):
    """A lone UTF-16 surrogate is no text: a result that holds one is refused (nothing of it
    reaches the caller, the audit or the model), with no traceback, and the next call works."""
    raw_server()
    agent(mcps=["raw"])
    run = fwj("run", "start", "--agent", "a1")["run_id"]
    r = tool_call(run, "mcp__raw__halves")  # as a model's answer holding one is: invalid, naming where
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
    assert "the MCP server's result" in r.json["error"]["message"] and "surrogate" in r.json["error"]["message"]
    assert "half an emoji" not in r.output
    assert json.loads(tool_call(run, "mcp__raw__plain", {"text": "x"}).stdout)["content"] == ["plain done"]
    assert [a["outcome"] for a in audit(home) if a["tool"] == "mcp__raw__halves"] == ["error"]
    (home / "audit.jsonl").read_text(encoding="utf-8")  # whole UTF-8 text: nothing unencodable was written


@pytest.mark.parametrize("flag", ["--reject", "--reject-padded"])
def test_an_http_server_that_quotes_its_key_back_shows_no_piece_of_it(home, flag):
    """A server that refuses fw and echoes the request's headers (whole, escaped and cut, or
    after 64 KiB of spaces, so that the key straddles the end of what fw reads of the body):
    the run says why the server is unavailable, and no piece of the header's value appears."""
    proc, url = _http_raw_server(flag)
    try:
        fwj("resource", "write", "mcp", "web", "--create", "--data",
            json.dumps({"transport": "http", "url": url, "headers": {"X-Api-Key": CANARY}}))
        agent(mcps=["web"])
        result = fw("run", "start", "--agent", "a1", "--json")
        assert result.exit_code == 0, result
        why = result.json["unavailable_tools"]
        assert any("HTTP 401" in (u.get("detail") or "") for u in why), why
        shown = fw("tool", "list", "--run", result.json["run_id"])
        said = result.output + shown.output
        assert not [CANARY[i:i + 8] for i in range(len(CANARY) - 7) if CANARY[i:i + 8] in said]  # no piece of it
    finally:
        proc.terminate()
        proc.wait(timeout=10)
