"""Commands load only what they use: `fw message post` and `fw run start` on a settled home
read principals, bindings and definitions through the index, so they load neither the YAML
parser nor the pydantic models; httpx comes without its command-line client; and what the
index keeps is still checked against the files."""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import CANARY, fw, fwj, make_basics

PROBE = """
import sys
from framework_cli.cli.main import main
sys.argv = ["fw", "--home", sys.argv[1], *sys.argv[2:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
heavy = ("pydantic", "yaml", "ruamel.yaml", "rich", "httpx", "mcp", "jsonschema", "importlib.metadata")
print("LOADED", sorted(m for m in heavy if m in sys.modules), file=sys.stderr)
"""


def age(home, seconds=3600):
    past = time.time() - seconds
    for path in home.rglob("*"):
        if path.is_file() and ".index" not in path.parts and path.name != "state.db":
            os.utime(path, (past, past))


def loaded(home, *args):
    proc = subprocess.run([sys.executable, "-c", PROBE, str(home), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert CANARY not in proc.stdout + proc.stderr
    return proc.stdout, proc.stderr.strip().splitlines()[-1]


def session_home(home):
    make_basics(with_key=False)
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("principal", "create", "ops", "--kind", "agent")
    fwj("binding", "set", "ops", "--agent", "a1")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    age(home)


def test_message_post_on_a_settled_home_loads_nothing_heavy(home):
    session_home(home)
    loaded(home, "message", "post", "s1", "--as", "alice", "warm the index")
    out, modules = loaded(home, "message", "post", "s1", "--as", "alice", "hello @ops")
    assert modules == "LOADED []", modules
    assert out.splitlines()[0].endswith(" alice: hello @ops") and "turn 1 for ops: pending" in out
    out, modules = loaded(home, "message", "post", "s1", "--as", "alice", "again @ops", "--json")
    assert modules == "LOADED []", modules
    assert json.loads(out)["turns"] == [{"id": 2, "principal": "ops", "status": "pending"}]


def test_a_message_mentioning_an_unbound_agent_loads_nothing_heavy(home):
    """An agent principal without a binding gets no turn: finding that its binding file is
    not there reads nothing and checks nothing."""
    session_home(home)
    fwj("principal", "create", "idle", "--kind", "agent")
    fwj("session", "add-member", "s1", "idle")
    age(home)
    loaded(home, "message", "post", "s1", "--as", "alice", "warm the index")
    out, modules = loaded(home, "message", "post", "s1", "--as", "alice", "hello @idle and @ops")
    assert modules == "LOADED []", modules
    assert "turn" in out and "idle" not in out.split("alice:", 1)[1].split("\n", 1)[1]  # a turn for ops only


def test_run_start_on_a_settled_home_loads_nothing_heavy(home):
    session_home(home)
    loaded(home, "run", "start", "--principal", "ops", "--json")  # warms the index
    for args in (["--agent", "a1"], ["--principal", "ops"]):
        out, modules = loaded(home, "run", "start", *args, "--json")
        assert modules == "LOADED []", modules
        run = json.loads(out)
        assert run["agent"] == "a1" and run["status"] == "active"
    assert fwj("run", "show", run["run_id"])["definition"] == fwj("resource", "read", "agent", "a1")["data"]


def test_httpx_comes_without_its_command_line_client():
    code = "import framework_cli, httpx, sys; httpx.Client; print(sorted(m for m in ('rich', 'click', 'pygments') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc


def test_a_principal_changed_behind_the_index_is_read_again(home):
    session_home(home)
    assert fwj("message", "post", "s1", "--as", "alice", "hello @ops")["turns"]  # ops is an agent
    (home / "principals/ops.yaml").write_text("kind: user\n")  # a new stamp: read again
    assert fwj("message", "post", "s1", "--as", "alice", "hello @ops")["turns"] == []
    (home / "principals/ops.yaml").write_text("kind: [broken\n")
    listed = fwj("principal", "list")["principals"]
    assert {"name": "ops", "kind": None, "error": {"code": "corrupt", "path": "principals/ops.yaml"}} in listed


def test_a_definition_changed_behind_the_index_is_read_again(home):
    session_home(home)
    first = fwj("run", "start", "--agent", "a1")["fingerprint"]
    assert fwj("run", "start", "--agent", "a1")["fingerprint"] == first  # read from the index
    (home / "agents/default/a1.yaml").write_text("model: m1\ndescription: changed by hand\n")
    assert fwj("run", "start", "--agent", "a1")["fingerprint"] != first
    (home / "agents/default/a1.yaml").write_text("model: m1\nbogus: 1\n")
    result = fw("run", "start", "--agent", "a1", "--json")
    assert result.exit_code == 4 and result.json["error"]["code"] == "corrupt" and result.json["error"]["field"] == "bogus"


@pytest.mark.hand_written_canary("providers/default/p1.yaml")
def test_a_key_written_into_a_file_by_hand_never_reaches_the_index(home):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "https://llm.example.test/v1", "api_key_env": "K"}))
    (home / "providers/default/p1.yaml").write_text(f"base_url: https://llm.example.test/v1\napi_key: {CANARY}\n")
    fwj("resource", "write", "model", "m1", "--create", "--data", json.dumps({"provider": "p1", "model_id": "m-1"}))
    age(home)
    for _ in range(2):
        assert fwj("resource", "read", "provider", "p1")["data"]["api_key_set"] is True
        fwj("home", "check", code=0)
    for index in (home / ".index").iterdir():
        assert CANARY not in index.read_text()
