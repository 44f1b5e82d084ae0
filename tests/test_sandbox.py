"""The sandbox (issue 30, CONTRACT section 14): `framework_exec` and `sandbox__exec` run in a
bubblewrap box that sees the system read-only, the run's workspace and a private /tmp, never
the home's secrets/ or state.db, no network unless allowed, no host process; it is probed
once per run and never bypassed. The sandbox file tools never leave the workspace."""

import json
import os
import shutil
import socket
import time
import uuid

import anyio
import pytest
from conftest import CANARY, fw, fw_bin, fwj, processes_with, snapshot
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_tasks_exec import provider_and_model

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
EXEC_TOOLS = ("framework_exec", "sandbox__exec")


def marker() -> str:
    return f"fw-test-marker-{uuid.uuid4().hex[:12]}"


def boxed_agent(name="boxer", *, directory=None, principal=True, **fields):
    """An agent with exec (in the sandbox) and the sandbox tools, bound to a principal of its
    name (with `directory`, if given)."""
    provider_and_model("x", "http://127.0.0.1:9/v1")
    data = {"model": "m-x", "builtin_tools": ["local_execution"], "execution": {"enabled": True}, "sandbox": {}, **fields}
    fwj("resource", "write", "agent", name, "--create", "--data", json.dumps(data))
    if principal:
        fwj("principal", "create", name, "--kind", "agent")
        fwj("binding", "set", name, "--agent", name, *(["--directory", str(directory)] if directory else []))


def call(run_id, tool, args, code=0):
    r = fw("tool", "call", "--run", run_id, tool, "--args", json.dumps(args))
    assert r.exit_code == code, r
    assert "Traceback" not in r.stderr  # fw's own (a program's stderr is in the document)
    return r.json


def run_sh(run_id, tool, script, **more):
    return call(run_id, tool, {"argv": ["sh", "-c", script], **more})


@pytest.fixture
def work(tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def boxed_run(home, work):
    """A managed run whose workspace is `work`, with state.db in the home (a session holds it)."""
    boxed_agent(directory=work)
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice")
    assert (home / "state.db").exists() and list((home / "secrets").rglob("*.json"))
    run = fwj("run", "start", "--principal", "boxer")
    assert set(EXEC_TOOLS) <= set(run["tools"]) and run["unavailable_tools"] == []
    assert run["workspace"] == str(work)
    return run["run_id"]


# -- what a command in the box cannot reach -----------------------------------------------------
@pytest.mark.parametrize("tool", EXEC_TOOLS)
def test_a_command_cannot_read_the_homes_secrets_or_state_db(boxed_run, home, tool):
    key_file = next((home / "secrets").rglob("*.json"))
    for script in (f"cat {key_file}", f"ls -la {home} {home / 'secrets'}", f"cat {home / 'state.db'}", f"ls {home.parent}"):
        doc = run_sh(boxed_run, tool, script)
        assert CANARY not in doc["stdout"] + doc["stderr"]
        assert "state.db" not in doc["stdout"] and "secrets" not in doc["stdout"], (script, doc)
    walk = ("import os; print('\\n'.join(os.path.join(r, n) for r, ds, fs in os.walk('/') "
            "if not r.startswith(('/proc', '/sys', '/dev')) for n in ds + fs))")
    found = call(boxed_run, tool, {"argv": ["python3", "-c", walk], "timeout_seconds": 120})
    paths = found["stdout"].splitlines()
    assert found["exit_code"] == 0 and len(paths) > 100  # it did walk the system
    assert not [p for p in paths if p.startswith(str(home)) or p.endswith(("state.db", "/secrets")) or CANARY in p]


@pytest.mark.parametrize("tool", EXEC_TOOLS)
def test_a_command_cannot_reach_a_listener_on_the_loopback(boxed_run, tool):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        program = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')"
        doc = call(boxed_run, tool, {"argv": ["python3", "-c", program]})
        assert doc["exit_code"] != 0 and "connected" not in doc["stdout"]
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing came through


def test_the_network_is_there_only_when_the_agent_allows_it(home, work):
    boxed_agent(directory=work, execution={"enabled": True, "network": True}, sandbox={"network": False})
    run_id = fwj("run", "start", "--principal", "boxer")["run_id"]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        program = f"import socket; socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=3); print('connected')"
        allowed = call(run_id, "framework_exec", {"argv": ["python3", "-c", program]})
        refused = call(run_id, "sandbox__exec", {"argv": ["python3", "-c", program]})
    assert allowed["stdout"] == "connected\n" and refused["exit_code"] != 0


@pytest.mark.parametrize("tool", EXEC_TOOLS)
def test_a_setsid_child_neither_survives_the_call_nor_writes_its_marker(boxed_run, work, tool):
    mark = marker()
    late = f"import time; time.sleep(2); open('{work}/{mark}', 'w').write('still here')"
    script = f"setsid python3 -c \"{late}\" {mark} & sleep 0.3; echo started"
    doc = run_sh(boxed_run, tool, script)
    assert doc["stdout"] == "started\n"
    assert processes_with(mark) == []
    time.sleep(2.5)
    assert not (work / mark).exists() and processes_with(mark) == []


@pytest.mark.parametrize("tool", EXEC_TOOLS)
def test_a_command_writes_its_workspace_and_nothing_else(boxed_run, home, work, tmp_path, tool):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private.txt").write_text("not for the box")
    mark = marker()
    before = snapshot(home)
    script = (f"echo made > {work}/made.txt; cat {elsewhere}/private.txt; touch {elsewhere}/new.txt; "
              f"touch /usr/{mark}; touch /tmp/{mark} && ls /tmp/{mark}; mkdir -p {home}/x && touch {home}/x/{mark}; "
              f"echo pwd=$(pwd) home=$HOME")
    doc = run_sh(boxed_run, tool, script)
    assert (work / "made.txt").read_text() == "made\n"
    assert "not for the box" not in doc["stdout"] and "No such file" in doc["stderr"]
    assert not (elsewhere / "new.txt").exists() and not os.path.exists(f"/usr/{mark}") and not os.path.exists(f"/tmp/{mark}")
    assert f"/tmp/{mark}" in doc["stdout"]  # its own /tmp: there, and gone with it
    assert f"pwd={work} home={work}" in doc["stdout"]
    after = snapshot(home)
    after.pop("audit.jsonl"), before.pop("audit.jsonl", None)
    assert after == before and not (home / "x").exists()


def test_a_home_inside_the_workspace_is_hidden(home, tmp_path):
    boxed_agent(directory=tmp_path)  # the home is tmp_path/home: inside the workspace
    run_id = fwj("run", "start", "--principal", "boxer")["run_id"]
    doc = run_sh(run_id, "framework_exec", f"ls -A {home}; cat {next((home / 'secrets').rglob('*.json'))}; echo seen > {tmp_path}/seen.txt")
    assert doc["stdout"] == "" and CANARY not in doc["stderr"]
    assert (tmp_path / "seen.txt").read_text() == "seen\n"  # the rest of the workspace is there
    assert call(run_id, "sandbox__list_files", {"path": "home/secrets"}, code=5)["error"]["code"] == "denied"
    assert call(run_id, "sandbox__read_file", {"path": "home/agents/default/boxer.yaml"}, code=5)["error"]["code"] == "denied"
    listed = call(run_id, "sandbox__list_files", {})
    assert "home" not in [e["path"] for e in listed["entries"]] and "seen.txt" in [e["path"] for e in listed["entries"]]


def test_a_command_outside_the_sandbox_is_an_explicit_choice_and_said_in_red(home, work):
    boxed_agent(directory=work, execution={"enabled": True, "sandbox": "none"})
    shown = fwj("agent", "show", "boxer")
    assert shown["warnings"][0]["code"] == "exec_unconfined"
    assert "Warning: execution.sandbox is none" in fw("agent", "show", "boxer").stdout
    assert "\x1b[1;31mWarning: execution.sandbox is none" in on_a_terminal(home, "agent", "show", "boxer")  # in red
    run_id = fwj("run", "start", "--principal", "boxer")["run_id"]
    doc = run_sh(run_id, "framework_exec", f"ls {home}")
    assert "secrets" in doc["stdout"]  # the old behaviour, as chosen: it sees the home
    fwj("agent", "edit", "boxer", "--execution-sandbox", "bubblewrap")
    assert "warnings" not in fwj("agent", "show", "boxer")


def on_a_terminal(home, *args) -> str:
    """What the installed fw prints on a terminal (a pseudo-terminal), colours included."""
    import pty
    import subprocess

    leader, follower = pty.openpty()
    env = {**os.environ, "FW_HOME": str(home), "TERM": "xterm-256color", "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([fw_bin(), *args], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: fw is done
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    proc.wait(30)
    return out.decode("utf-8", "replace")


# -- fail closed ----------------------------------------------------------------------------
def path_without_bwrap() -> str:
    """PATH with every folder of the current one but those that hold bwrap."""
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not os.path.exists(os.path.join(p, "bwrap")))


def test_without_bwrap_exec_and_the_sandbox_tools_are_unavailable_and_nothing_runs(home, work, monkeypatch):
    boxed_agent(directory=work)
    started_with_bwrap = fwj("run", "start", "--principal", "boxer")["run_id"]
    monkeypatch.setenv("PATH", path_without_bwrap())
    run = fwj("run", "start", "--principal", "boxer")
    reasons = {u["name"]: u["reason"] for u in run["unavailable_tools"]}
    assert reasons["framework_exec"] == "sandbox_unavailable"
    assert {reasons[f"sandbox__{t}"] for t in ("exec", "read_file", "write_file", "list_files", "edit_file")} == {"source_unavailable"}
    assert not [t for t in run["tools"] if t in EXEC_TOOLS or t.startswith("sandbox__")]
    listed = {t["name"]: t for t in fwj("agent", "tools", "boxer")["tools"]}
    assert (listed["framework_exec"]["available"], listed["framework_exec"]["reason"]) == (False, "sandbox_unavailable")
    assert (listed["sandbox__exec"]["available"], listed["sandbox__exec"]["reason"]) == (False, "source_unavailable")
    before = snapshot(home)
    for run_id, tool, code in ((run["run_id"], "framework_exec", 5), (run["run_id"], "sandbox__exec", 5),
                               (started_with_bwrap, "framework_exec", 7), (started_with_bwrap, "sandbox__exec", 7)):
        doc = call(run_id, tool, {"argv": ["touch", str(work / "ran")]}, code=code)
        assert doc["error"]["code"] == ("denied" if code == 5 else "unavailable")
        if code == 7:
            assert doc["error"]["reason"] == "sandbox_unavailable"
    assert not (work / "ran").exists()
    after = snapshot(home)
    after.pop("audit.jsonl"), before.pop("audit.jsonl", None)
    assert after == before


def test_without_bwrap_an_exec_chosen_unconfined_is_still_offered(home, work, monkeypatch):
    boxed_agent(directory=work, execution={"enabled": True, "sandbox": "none"})
    monkeypatch.setenv("PATH", path_without_bwrap())
    run = fwj("run", "start", "--principal", "boxer")
    assert "framework_exec" in run["tools"] and "sandbox__exec" not in run["tools"]
    assert {u["name"]: u["reason"] for u in run["unavailable_tools"]}["sandbox__exec"] == "source_unavailable"


def test_a_run_probes_the_sandbox_once_when_it_starts(home, work, tmp_path, monkeypatch):
    """A bwrap that logs each start, then is the real one: one probe for the run, at its start."""
    fake, log = tmp_path / "logbin", tmp_path / "bwrap.log"
    fake.mkdir()
    (fake / "bwrap").write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nexec {shutil.which('bwrap')} \"$@\"\n")
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    boxed_agent(directory=work)
    run_id = fwj("run", "start", "--principal", "boxer")["run_id"]
    assert [line.endswith("--as-pid-1 -- true") for line in log.read_text().splitlines()] == [True]
    for tool in EXEC_TOOLS:
        assert run_sh(run_id, tool, "echo boxed")["stdout"] == "boxed\n"
    started = log.read_text().splitlines()
    assert len(started) == 3 and not any("--as-pid-1" in line for line in started[1:])  # each call boxed, no probe again


def test_a_bwrap_that_fails_its_probe_makes_exec_unavailable(home, work, tmp_path, monkeypatch):
    """A bwrap that fails its probe (here: one that always fails) makes exec unavailable."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: no namespaces here' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    boxed_agent(directory=work)
    run = fwj("run", "start", "--principal", "boxer")
    exec_entry = next(u for u in run["unavailable_tools"] if u["name"] == "framework_exec")
    assert exec_entry["reason"] == "sandbox_unavailable" and "no namespaces here" in exec_entry["detail"]


# -- workspaces -----------------------------------------------------------------------------
def test_workspaces_of_the_home_are_made_on_first_use(home):
    boxed_agent("lone")  # bound, without a directory
    managed = fwj("run", "start", "--principal", "lone")
    explicit = fwj("run", "start", "--agent", "lone")
    assert managed["workspace"] == str(home / "workspaces" / "lone") == explicit["workspace"]
    assert not (home / "workspaces").exists()  # not made by starting a run
    doc = run_sh(explicit["run_id"], "framework_exec", "pwd; echo hi > note.txt")
    assert doc["stdout"] == f"{home / 'workspaces' / 'lone'}\n"
    assert (home / "workspaces/lone/note.txt").read_text() == "hi\n"
    provider_and_model("y", "http://127.0.0.1:9/v1")
    fwj("resource", "write", "agent", "other", "--create", "--data", json.dumps({"model": "m-y", "sandbox": {}}))
    fwj("principal", "create", "helper", "--kind", "agent")
    fwj("binding", "set", "helper", "--agent", "other")
    helper = fwj("run", "start", "--principal", "helper")
    assert helper["workspace"] == str(home / "workspaces" / "helper")
    assert call(helper["run_id"], "sandbox__write_file", {"path": "a.txt", "content": "x"})["bytes"] == 1
    assert (home / "workspaces/helper/a.txt").read_text() == "x"
    assert fwj("run", "start", "--agent", "other")["workspace"] == str(home / "workspaces" / "other")


def test_a_workspace_that_is_the_home_is_refused_and_nothing_runs(home):
    boxed_agent(directory=home)
    run_id = fwj("run", "start", "--principal", "boxer")["run_id"]
    before = snapshot(home)
    for tool in EXEC_TOOLS:
        doc = call(run_id, tool, {"argv": ["touch", "ran"]}, code=4)
        assert doc["error"]["code"] == "invalid" and doc["error"]["field"] == "directory"
    assert call(run_id, "sandbox__list_files", {}, code=4)["error"]["code"] == "invalid"
    after = snapshot(home)
    after.pop("audit.jsonl"), before.pop("audit.jsonl", None)
    assert after == before and not (home / "ran").exists()


# -- the sandbox file tools -------------------------------------------------------------------
def test_the_file_tools_work_in_the_workspace(boxed_run, work, home):
    assert call(boxed_run, "sandbox__write_file", {"path": "notes/todo.md", "content": "one\ntwo\n"}) == {"path": "notes/todo.md", "bytes": 8}
    assert (work / "notes/todo.md").read_text() == "one\ntwo\n"
    read = call(boxed_run, "sandbox__read_file", {"path": "./notes/../notes/todo.md"})
    assert read == {"path": "notes/todo.md", "content": "one\ntwo\n", "size": 8, "truncated": False}
    assert call(boxed_run, "sandbox__edit_file", {"path": "notes/todo.md", "old": "two", "new": "three"})["replaced"] == 1
    assert (work / "notes/todo.md").read_text() == "one\nthree\n"
    missing = call(boxed_run, "sandbox__edit_file", {"path": "notes/todo.md", "old": "four", "new": "x"}, code=4)
    assert missing["error"]["field"] == "old"
    (work / "twice.txt").write_text("a a")
    assert call(boxed_run, "sandbox__edit_file", {"path": "twice.txt", "old": "a", "new": "b"}, code=4)["error"]["occurrences"] == 2
    assert call(boxed_run, "sandbox__read_file", {"path": "nope.txt"}, code=3)["error"]["code"] == "not_found"
    (work / "inside").symlink_to(work / "notes")
    assert call(boxed_run, "sandbox__read_file", {"path": "inside/todo.md"})["content"] == "one\nthree\n"
    listed = call(boxed_run, "sandbox__list_files", {})
    assert [(e["path"], e["type"]) for e in listed["entries"]] == [("inside", "symlink"), ("notes", "folder"), ("twice.txt", "file")]
    found = call(boxed_run, "sandbox__list_files", {"pattern": "*.md"})
    assert [e["path"] for e in found["entries"]] == ["notes/todo.md"]
    (work / "big.txt").write_text("x" * 100_000 + CANARY)
    big = call(boxed_run, "sandbox__read_file", {"path": "big.txt"})
    assert big["truncated"] is True and len(big["content"]) == 65536 and big["size"] == 100_000 + len(CANARY)
    (work / "key.txt").write_text(f"key={CANARY}")
    assert call(boxed_run, "sandbox__read_file", {"path": "key.txt"})["content"] == "key=[redacted]"
    audit = [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]
    wrote = next(line for line in audit if line["tool"] == "sandbox__write_file")
    assert wrote["params"] == {"path": "string", "content": "string"} and "todo" not in json.dumps(wrote)


def test_a_path_that_leaves_the_workspace_is_denied_and_changes_nothing(boxed_run, work, home, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("outside")
    key_file = next((home / "secrets").rglob("*.json"))
    (work / "out").symlink_to(outside)
    (work / "keys").symlink_to(home / "secrets")
    (work / "dangling").symlink_to(tmp_path / "not-there.txt")
    (work / "sub").mkdir()
    before = snapshot(home)
    attempts = [
        ("sandbox__read_file", {"path": "../outside.txt"}),
        ("sandbox__read_file", {"path": str(outside)}),
        ("sandbox__read_file", {"path": "out"}),
        ("sandbox__read_file", {"path": f"keys/{key_file.parent.name}/{key_file.name}"}),
        ("sandbox__read_file", {"path": "sub/../../outside.txt"}),
        ("sandbox__write_file", {"path": "out", "content": "overwritten"}),
        ("sandbox__write_file", {"path": "dangling", "content": "made outside"}),
        ("sandbox__write_file", {"path": "../made.txt", "content": "x"}),
        ("sandbox__edit_file", {"path": "out", "old": "outside", "new": "changed"}),
        ("sandbox__list_files", {"path": "keys"}),
        ("sandbox__list_files", {"path": "/"}),
    ]
    for tool, args in attempts:
        doc = call(boxed_run, tool, args, code=5)
        assert doc["error"]["code"] == "denied" and doc["error"]["field"] == "path", (tool, args, doc)
        assert CANARY not in json.dumps(doc)
    assert outside.read_text() == "outside" and not (tmp_path / "not-there.txt").exists() and not (tmp_path / "made.txt").exists()
    after = snapshot(home)
    after.pop("audit.jsonl"), before.pop("audit.jsonl", None)
    assert after == before
    listed = call(boxed_run, "sandbox__list_files", {"pattern": "*"})
    assert not [e for e in listed["entries"] if e["path"].startswith(("keys/", "out/"))]  # links are listed, never followed


def test_sandbox_tools_are_governed_by_allowed_tools(home, work):
    boxed_agent(directory=work, allowed_tools=["sandbox__read_file"])
    run = fwj("run", "start", "--principal", "boxer")
    assert [t for t in run["tools"] if t.startswith("sandbox__")] == ["sandbox__read_file"]
    refused = {u["name"]: u["reason"] for u in run["unavailable_tools"]}
    assert refused["sandbox__exec"] == refused["sandbox__write_file"] == "not_allowed"
    before = snapshot(home)
    doc = call(run["run_id"], "sandbox__write_file", {"path": "x.txt", "content": "x"}, code=5)
    assert doc["error"]["code"] == "denied" and not (work / "x.txt").exists()
    after = snapshot(home)
    after.pop("audit.jsonl"), before.pop("audit.jsonl", None)
    assert after == before
    assert "framework_exec" in run["tools"]  # a built-in group: its mount decides, not allowed_tools


def test_the_sandbox_tools_over_mcp(boxed_run, home, work):
    (work / "hello.txt").write_text("hello from the workspace")

    async def scenario():
        params = StdioServerParameters(command=fw_bin(), args=["mcp", "serve", "--run", boxed_run],
                                       env={"FW_HOME": str(home), "PATH": os.environ["PATH"]})
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            read = await client.call_tool("sandbox__read_file", {"path": "hello.txt"})
            ran = await client.call_tool("sandbox__exec", {"argv": ["sh", "-c", f"ls {home}/secrets; cat hello.txt"]})
            return names, json.loads(read.content[0].text), json.loads(ran.content[0].text)

    names, read, ran = anyio.run(scenario)
    assert "sandbox__edit_file" in names and "framework_exec" in names
    assert read["content"] == "hello from the workspace"
    assert ran["stdout"] == "hello from the workspace" and "No such file" in ran["stderr"]
