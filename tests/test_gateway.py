"""The gateway: a real `fw mcp serve --http` on a free loopback port, reached with the official
MCP client over streamable HTTP; run tokens from `fw run start`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

pytestmark = pytest.mark.engines
from conftest import CANARY, audit_entries, fw, fw_bin, fwj, make_basics, run_record_text
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

ASSETS = ["fw_list_assets", "fw_get_current_event", "fw_get_tool_detail", "fw_call_tool"]


def harness(name: str, permissions: list[str], **fields) -> None:
    data = {"type": "local", "capabilities": {"tool_calling": True}, "permissions": {"tools": permissions}, **fields}
    fwj("resource", "write", "harness", name, "--create", "--data", json.dumps(data))


@pytest.fixture
def gateway(home):
    """`fw mcp serve --http` on a free port: its URL; stopped (and checked gone) afterwards."""
    env = {**os.environ, "FW_HOME": str(home)}
    proc = subprocess.Popen([fw_bin(), "mcp", "serve", "--http", "--listen", "127.0.0.1:0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("fw gateway: http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() is not None else "")
    yield line.split()[-1]
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err and CANARY not in err
    assert proc.returncode == 0 and err.strip() == "fw gateway: stopped.", err  # SIGTERM with no run of its own in flight


def started(*args: str) -> tuple[str, str]:
    doc = fwj("run", "start", *args)
    return doc["run_id"], doc["gateway_token"]


async def _session(url: str, token: str | None, job, statuses: list | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}

    async def heard(response):
        if statuses is not None:
            statuses.append(response.status_code)

    async with httpx2.AsyncClient(headers=headers, event_hooks={"response": [heard]}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await job(session)


def with_session(url: str, token: str | None, job, statuses: list | None = None):
    return asyncio.run(_session(url, token, job, statuses))


def listed(url: str, token: str) -> list[str]:
    async def job(session):
        return [t.name for t in (await session.list_tools()).tools]
    return with_session(url, token, job)


def call(url: str, token: str, name: str, args: dict) -> tuple[dict, bool]:
    async def job(session):
        result = await session.call_tool(name, args)
        return json.loads(result.content[0].text), result.is_error
    return with_session(url, token, job)


@pytest.fixture
def two_runs(home):
    """Run A (resource_management, detail and call) and run B (task_collaboration, call only)."""
    make_basics()
    harness("full", ["detail", "call"])
    harness("callonly", ["call"])
    fwj("agent", "edit", "a1", "--harness", "full", "--builtin-tool", "resource_management")
    fwj("agent", "create", "b1", "--model", "m1", "--harness", "callonly", "--builtin-tool", "task_collaboration")
    return started("--agent", "a1"), started("--agent", "b1")


def test_run_start_prints_a_token_once_and_keeps_only_its_hash(home, two_runs):
    (run_a, token_a), _ = two_runs
    assert token_a.startswith("fwgt_") and len(token_a) > 60
    shown = fw("run", "show", run_a, "--json")
    assert token_a not in shown.stdout and "gateway_token" not in shown.json and "gateway_token_sha256" not in shown.json
    human = fw("run", "start", "--agent", "a1")
    assert "gateway token (shown only now): fwgt_" in human.stdout
    for path in home.rglob("*"):
        if path.is_file():
            assert token_a.encode() not in path.read_bytes(), path
    record = json.loads(run_record_text(home, run_a))
    assert record["gateway_token_sha256"].startswith("sha256:")


def test_a_token_lists_exactly_its_runs_tools_and_the_asset_tools(gateway, two_runs):
    (run_a, token_a), (run_b, token_b) = two_runs
    tools_a = fwj("run", "show", run_a)["tools"]
    tools_b = fwj("run", "show", run_b)["tools"]
    assert tools_a and tools_b and not set(tools_a) & set(tools_b)
    assert listed(gateway, token_a) == tools_a + ASSETS
    # another run's token sees only that run's tools; its harness lacks detail, so no fw_get_tool_detail
    assert listed(gateway, token_b) == tools_b + ["fw_list_assets", "fw_get_current_event", "fw_call_tool"]


def test_the_asset_tools_work_and_calls_are_audited_as_the_run_via_the_gateway(home, gateway, two_runs):
    (run_a, token_a), (run_b, _) = two_runs
    assets, error = call(gateway, token_a, "fw_list_assets", {"include_schemas": True})
    assert not error and assets["run_id"] == run_a
    assert [t["name"] for t in assets["tools"]] == fwj("run", "show", run_a)["tools"]
    assert assets["tools"][0]["input_schema"]["type"] == "object" and assets["mcp_tools"] == [] and "unavailable_tools" in assets
    only_skills, _ = call(gateway, token_a, "fw_list_assets", {"asset_types": ["skills"]})
    assert set(only_skills) == {"run_id", "skills", "unavailable_tools"}

    detail, error = call(gateway, token_a, "fw_get_tool_detail", {"tool_name": "framework_resource_list"})
    assert not error and set(detail) == {"name", "description", "risk", "input_schema"} and detail["risk"] == "read"

    event, _ = call(gateway, token_a, "fw_get_current_event", {})
    assert event["run_id"] == run_a and event["identity"] == "runtime:a1" and event["event"] is None and event["bot"] is None

    listing, error = call(gateway, token_a, "fw_call_tool", {"tool_name": "framework_resource_list", "parameters": {"kind": "agent"}})
    assert not error and {i["name"] for i in listing["items"]} == {"a1", "b1"}
    direct, error = call(gateway, token_a, "framework_resource_list", {"kind": "model"})  # its own tools by their names too
    assert not error and [i["name"] for i in direct["items"]] == ["m1"]

    lines = audit_entries(home)
    through = [entry for entry in lines if entry.get("via") == "gateway"]
    assert {(e["tool"], e["outcome"]) for e in through} >= {("fw_call_tool", "ok"), ("framework_resource_list", "ok"), ("fw_list_assets", "ok")}
    assert all(e["caller"] == "runtime:a1" and e["run_id"] == run_a for e in through)


def test_calls_outside_the_run_or_for_another_run_are_denied_and_change_nothing(home, gateway, two_runs):
    (run_a, token_a), (run_b, _) = two_runs
    doc, error = call(gateway, token_a, "fw_call_tool", {"tool_name": "framework_task_list", "parameters": {}})
    assert error and doc["error"]["code"] == "denied"
    doc, error = call(gateway, token_a, "framework_task_list", {})
    assert error and doc["error"]["code"] == "denied"
    before = fwj("resource", "list", "agent")
    doc, error = call(gateway, token_a, "fw_call_tool", {"run_id": run_b, "tool_name": "framework_resource_delete",
                                                         "parameters": {"kind": "agent", "reference": "b1", "confirm": ["agent/b1"]}})
    assert error and doc["error"]["code"] == "denied"
    for name in ASSETS[:3]:
        args = {"tool_name": "framework_resource_list"} if name == "fw_get_tool_detail" else {}
        doc, error = call(gateway, token_a, name, {**args, "run_id": run_b})
        assert error and doc["error"]["code"] == "denied", name
    doc, error = call(gateway, token_a, "fw_call_tool", {"tool_name": "fw_list_assets", "parameters": {}})
    assert error and doc["error"]["code"] == "denied"  # fw_call_tool calls the run's tools, not itself
    assert fwj("resource", "list", "agent") == before
    refused = audit_entries(home)
    assert any(e["tool"] == "fw_call_tool" and e["outcome"] == "refused" and e.get("via") == "gateway" for e in refused)


def test_no_token_an_unknown_one_and_an_ended_runs_get_401_before_anything_is_listed(home, gateway, two_runs):
    (run_a, token_a), _ = two_runs
    forged = token_a[:-4] + ("AAAA" if not token_a.endswith("AAAA") else "BBBB")
    fwj("run", "end", run_a)
    for token in (None, "nonsense", forged, token_a):
        statuses: list[int] = []
        seen: list = []

        async def job(session):
            seen.append(await session.list_tools())

        with pytest.raises(Exception):
            with_session(gateway, token, job, statuses)
        assert statuses and set(statuses) == {401} and not seen, (token, statuses)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = httpx2.post(gateway, headers={**headers, "Accept": "application/json, text/event-stream"},
                             json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert answer.status_code == 401 and answer.json()["error"]["code"] in ("denied", "run_ended")
        assert token is None or token not in answer.text


def test_a_token_dies_with_its_lease(home, gateway):
    make_basics()
    harness("full", ["detail", "call"])
    fwj("agent", "edit", "a1", "--harness", "full")
    _, short = started("--agent", "a1", "--lease", "1")
    import time

    time.sleep(1.2)  # the lease runs out
    assert httpx2.post(gateway, headers={"Authorization": f"Bearer {short}"}, json={}).status_code == 401


def test_the_host_header_is_checked(gateway, two_runs):
    (_, token_a), _ = two_runs
    answer = httpx2.post(gateway, headers={"Authorization": f"Bearer {token_a}", "Host": "attacker.example"}, json={})
    assert answer.status_code == 400


def test_listen_needs_http_and_http_takes_no_caller(home):
    assert fw("mcp", "serve", "--http", "--manager", "--json").json["error"]["code"] == "usage"
    assert fw("mcp", "serve", "--listen", "127.0.0.1:0", "--manager", "--json").json["error"]["code"] == "usage"


def test_a_token_is_a_secret_everywhere_it_could_go(home, two_runs):
    (run_a, token_a), _ = two_runs
    data = {"type": "local", "description": f"the token is {token_a}"}
    result = fw("tool", "call", "--run", run_a, "framework_resource_write", "--args",
                json.dumps({"kind": "harness", "reference": "leak", "create": True, "data": data}))
    assert result.json["error"]["code"] == "invalid" and "secret" in result.json["error"]["message"]
    assert token_a not in result.output
    assert fw("resource", "read", "harness", "leak", "--json").exit_code == 3  # nothing was written
    for path in home.rglob("*"):
        if path.is_file():
            assert token_a.encode() not in path.read_bytes(), path


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gateway_runner.py"


def test_a_runner_started_elsewhere_uses_run_start_and_the_printed_token(home, gateway, two_runs):
    (run_a, token_a), _ = two_runs
    env = {"PATH": os.environ["PATH"], "FW_GATEWAY_URL": gateway, "FW_GATEWAY_TOKEN": token_a, "FW_RUN_ID": run_a}
    proc = subprocess.run([sys.executable, str(EXAMPLE)], input='call framework_resource_list {"kind": "harness"}', env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert {i["name"] for i in json.loads(proc.stdout)["items"]} == {"full", "callonly"}


def test_a_token_dies_with_its_session(home, tmp_path):
    """A turn's runner ends its own session through the gateway; its token then gets 401."""
    runner = ("import asyncio, os, httpx2\n"
              "from mcp import ClientSession\n"
              "from mcp.client.streamable_http import streamable_http_client\n"
              "url, headers = os.environ['FW_GATEWAY_URL'], {'Authorization': 'Bearer ' + os.environ['FW_GATEWAY_TOKEN']}\n"
              "async def main():\n"
              "    async with httpx2.AsyncClient(headers=headers) as http:\n"
              "        async with streamable_http_client(url, http_client=http) as (r, w, *_):\n"
              "            async with ClientSession(r, w) as s:\n"
              "                await s.initialize()\n"
              "                await s.call_tool('framework_harness_session_end', {'session': 's1'})\n"
              "try:\n"
              "    asyncio.run(main())\n"
              "except BaseException:\n"
              "    pass  # the client lists the tools again after the call: the dead token already gets 401 there\n"
              "after = httpx2.post(url, headers={**headers, 'Accept': 'application/json, text/event-stream'},\n"
              "                    json={'jsonrpc': '2.0', 'id': 1, 'method': 'tools/list'})\n"
              "open('status.txt', 'w').write(str(after.status_code))\n")
    make_basics()
    harness("ext", ["call"], type="external", command=[sys.executable, "-c", runner])
    fwj("agent", "edit", "a1", "--harness", "ext", "--builtin-tool", "resource_management")
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("principal", "create", "ops", "--kind", "agent")
    fwj("binding", "set", "ops", "--agent", "a1", "--directory", str(tmp_path))
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    fwj("message", "post", "s1", "--as", "alice", "hello @ops")
    fwj("dispatch", "--once")
    assert fwj("session", "show", "s1")["session"]["status"] == "ended"
    assert (tmp_path / "status.txt").read_text() == "401"


def test_every_door_answers_at_once_on_a_kept_alive_connection():
    """The sockets fw serves on name their protocol, so asyncio (uvicorn's loop) turns off
    Nagle's rule on every connection it accepts: a second request on a kept-alive connection
    is answered at once instead of about 40 ms later, when the client's delayed ACK comes."""
    import socket

    from framework_cli.serve.http import bind

    async def accepted_options() -> list[int]:
        seen: asyncio.Future = asyncio.get_running_loop().create_future()

        class Note(asyncio.Protocol):
            def connection_made(self, transport):
                sock = transport.get_extra_info("socket")
                seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        listening = bind("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(Note, sock=listening)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", listening.getsockname()[1])
            option = await asyncio.wait_for(seen, 10)
            writer.close()
        finally:
            server.close()
            await server.wait_closed()
        return option

    assert asyncio.run(accepted_options()) != 0
