"""Plugins (issue 30, CONTRACT section 14): Python entry points of group fw.plugins, enabled per
home, offered as plugin__<plugin>__<tool> under allowed_tools, their code (finding them
included) run only in a process of their own per run, so that one that raises, hangs or kills
its process leaves the run and fw working."""

import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid

import pytest
from conftest import (
    CANARY,
    EXAMPLE_PLUGIN,
    REPO,
    fw,
    fw_bin,
    fwj,
    make_basics,
    plugin_site,
    processes_with,
    snapshot,
    wait_until_gone,
)
from fakes.chat_server import ChatServer
from test_gateway import call as gateway_call
from test_gateway import (
    gateway,  # noqa: F401, F811  (a fixture: `fw mcp serve --http`)
    started,
)
from test_tasks_exec import provider_and_model

HOST = "_plugin_host.py"


def agent(name="a1", base_url="http://127.0.0.1:9/v1", **fields):
    provider_and_model("x", base_url)
    fwj("resource", "write", "agent", name, "--create", "--data", json.dumps({"model": "m-x", **fields}))


def unchanged(home, before):
    after = snapshot(home)
    after.pop("audit.jsonl", None), before.pop("audit.jsonl", None)
    assert after == before


def tool_answers(request):
    return [json.loads(m["content"]) for m in request["json"]["messages"] if m["role"] == "tool"]


def my_plugin_processes() -> list[str]:
    """The plugin processes this test process started (their supervisors name it as parent)."""
    return [line for line in processes_with(f"--parent {os.getpid()} ") if HOST in line]


# -- listing, enabling, disabling ---------------------------------------------------------------
def test_the_example_plugin_is_listed_shown_enabled_and_disabled(home, example_plugin):
    listed = {p["name"]: p for p in fwj("plugin", "list")["plugins"]}
    assert listed["example"] == {"name": "example", "version": "0.1.0", "tools": ["word_count", "greet", "sign"], "enabled": False}
    human = fw("plugin", "list")
    assert human.exit_code == 0 and "example" in human.stdout and "word_count, greet, sign" in human.stdout
    shown = fwj("plugin", "show", "example")
    assert shown["installed"] is True and shown["enabled"] is False
    assert [t["model_name"] for t in shown["tools"]] == ["plugin__example__word_count", "plugin__example__greet", "plugin__example__sign"]
    assert {s["name"]: s["secret"] for s in shown["settings"]} == {"greeting": False, "signing_key": True}

    enabled = fwj("plugin", "enable", "example", "--setting", "greeting=Hi", "--secret-setting", "signing_key", "--timeout", "30",
                  input=CANARY + "\n")
    assert enabled["enabled"] is True and enabled["changed"] is True and enabled["timeout_seconds"] == 30
    assert (home / "plugins/example.yaml").read_text() == "settings:\n  greeting: Hi\nsandbox: false\ntimeout_seconds: 30\n"
    assert json.loads((home / "secrets/plugin/example.json").read_text()) == {"settings": {"signing_key": CANARY}}
    assert oct((home / "secrets/plugin/example.json").stat().st_mode & 0o777) == "0o600"
    key = next(s for s in fwj("plugin", "show", "example")["settings"] if s["name"] == "signing_key")
    assert key["set"] is True and "value" not in key
    assert {"name": "example", "enabled": True, "sandbox": False}.items() <= {p["name"]: p for p in fwj("plugin", "list")["plugins"]}["example"].items()
    assert fwj("home", "check")["warnings"] == []
    again = fwj("plugin", "enable", "example", "--setting", "greeting=Hi")
    assert again["changed"] is False

    assert fwj("plugin", "disable", "example") == {"name": "example", "enabled": False, "changed": True}
    assert not (home / "plugins/example.yaml").exists() and not (home / "secrets/plugin/example.json").exists()
    assert CANARY in (home / "secrets/.retired.json").read_text()  # still known: still redacted wherever it shows
    assert fwj("plugin", "disable", "example")["changed"] is False


def test_refused_enables_write_nothing(home, example_plugin, test_plugins):
    make_basics()  # the canary is a stored secret of the home: no plain setting may hold it
    fwj("plugin", "enable", "example")
    before = snapshot(home)
    refusals = [
        (["ghost"], None, 3, "not_found"),
        (["example", "--setting", "colour=red"], None, 4, "invalid"),
        (["example", "--setting", "signing_key=" + CANARY], None, 4, "invalid"),
        (["example", "--secret-setting", "greeting"], "Hi there\n", 4, "invalid"),
        (["example", "--secret-setting", "signing_key"], "short\n", 4, "invalid"),
        (["example", "--secret-setting", "signing_key"], "", 4, "invalid"),
        (["example", "--setting", "greeting"], None, 2, "usage"),
        (["example", "--timeout", "0"], None, 4, "invalid"),
        (["example", "--timeout", "2h"], None, 4, "invalid"),
        (["example", "--setting", f"greeting={CANARY}"], None, 4, "invalid"),
        (["Bad Name"], None, 4, "invalid"),
    ]
    for args, stdin, code, error in refusals:
        r = fw("plugin", "enable", *args, "--json", input=stdin)
        assert (r.exit_code, r.json["error"]["code"]) == (code, error), (args, r)
        assert "Traceback" not in r.output
    unchanged(home, before)


def test_a_run_is_offered_the_plugins_tools_and_calls_them(home, example_plugin):
    fwj("plugin", "enable", "example", "--setting", "greeting=Hi", "--secret-setting", "signing_key", input=CANARY)
    script = [
        {"tool_calls": [{"name": "plugin__example__greet", "arguments": {"name": "Ada"}},
                        {"name": "plugin__example__sign", "arguments": {"text": "hello"}},
                        {"name": "plugin__example__word_count", "arguments": {"text": "one two"}}]},
        {"content": "done"},
    ]
    with ChatServer(script) as server:
        agent(base_url=server.base_url)  # no allowed_tools: every plugin tool, as the old runner's policy
        doc = fwj("agent", "run", "a1", "--message", "go")
    assert doc["status"] == "completed" and [c["outcome"] for c in doc["tool_calls"]] == ["ok", "ok", "ok"]
    sent = {t["function"]["name"]: t["function"] for t in server.requests[0]["json"]["tools"]}
    assert sent["plugin__example__greet"]["parameters"]["required"] == ["name"]
    greet, sign, count = tool_answers(server.requests[1])
    assert greet == {"plugin": "example", "tool": "greet", "result": {"text": "Hi, Ada!"}, "truncated": False}
    assert sign["result"]["signature"] == hmac.new(CANARY.encode(), b"hello", hashlib.sha256).hexdigest()
    assert count["result"]["words"] == 2
    run = fwj("run", "show", doc["run_id"])
    assert run["tool_sources"]["plugin__example__greet"]["source"] == "plugin"
    assert CANARY not in json.dumps(run)  # the secret setting is read when the process starts, never kept in the record
    audit = [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]
    assert {"tool": "plugin__example__sign", "params": {"text": "string"}, "outcome": "ok"}.items() <= audit[-2].items()


def test_allowed_tools_governs_plugin_tools(home, example_plugin):
    fwj("plugin", "enable", "example")
    agent(allowed_tools=["plugin__example__greet"])
    run = fwj("run", "start", "--agent", "a1")
    assert [t for t in run["tools"] if t.startswith("plugin__")] == ["plugin__example__greet"]
    assert {u["name"]: u["reason"] for u in run["unavailable_tools"]}["plugin__example__sign"] == "not_allowed"
    before = snapshot(home)
    r = fw("tool", "call", "--run", run["run_id"], "plugin__example__sign", "--args", '{"text": "x"}')
    assert r.exit_code == 5 and r.json["error"]["code"] == "denied"
    assert my_plugin_processes() == []
    unchanged(home, before)
    assert json.loads((home / "audit.jsonl").read_text().splitlines()[-1])["outcome"] == "refused"
    assert fw("tool", "call", "--run", run["run_id"], "plugin__example__greet", "--args", '{"name": "Bo"}').json["result"]["text"] == "Hello, Bo!"
    fwj("resource", "write", "agent", "a1", "--data", json.dumps({"allowed_tools": []}))
    assert not [t for t in fwj("run", "start", "--agent", "a1")["tools"] if t.startswith("plugin__")]


def test_a_disabled_or_never_enabled_plugin_is_offered_to_no_run(home, example_plugin):
    agent()
    assert not [t for t in fwj("run", "start", "--agent", "a1")["tools"] if t.startswith("plugin__")]
    fwj("plugin", "enable", "example")
    assert "plugin__example__greet" in fwj("run", "start", "--agent", "a1")["tools"]
    fwj("plugin", "disable", "example")
    assert not [t for t in fwj("run", "start", "--agent", "a1")["tools"] if t.startswith("plugin__")]


# -- a plugin cannot take the run or fw down -------------------------------------------------------
def test_a_plugin_that_raises_hangs_and_dies_leaves_the_run_and_fw_working(home, test_plugins):
    fwj("plugin", "enable", "misbehaving", "--timeout", "2", "--secret-setting", "token", input=CANARY)
    calls = [{"name": f"plugin__misbehaving__{tool}", "arguments": args}
             for tool, args in (("fail", {}), ("hang", {}), ("echo", {"text": "after a hang"}), ("crash", {}), ("echo", {"text": "again"}),
                                ("noisy", {}), ("huge", {}))]
    script = [{"tool_calls": [call]} for call in calls] + [{"content": "still here"}]
    with ChatServer(script) as server:
        agent(base_url=server.base_url)
        started = time.monotonic()
        doc = fwj("agent", "run", "a1", "--message", "misbehave")
    assert time.monotonic() - started < 40
    assert doc["status"] == "completed" and doc["answer"] == "still here"
    assert [c["outcome"] for c in doc["tool_calls"]] == ["error", "error", "ok", "error", "ok", "ok", "ok"]
    answers = [tool_answers(r)[-1] for r in server.requests[1:]]
    failed, hung, echoed, crashed, again, noisy, huge = answers
    assert failed["error"]["reason"] == "plugin_tool" and "it failed on purpose" in failed["error"]["message"]
    assert "[redacted]" in failed["error"]["message"] and CANARY not in json.dumps(answers)
    assert hung["error"]["reason"] == "plugin_timeout" and hung["error"]["code"] == "unavailable"
    assert crashed["error"]["reason"] == "plugin_crashed" and "exit code 3" in crashed["error"]["message"]
    assert echoed["result"]["text"] == "after a hang" and again["result"]["text"] == "again"
    assert echoed["result"]["pid"] != again["result"]["pid"]  # a new process after the crash
    assert echoed["result"]["token_set"] is True and echoed["result"]["identity"] == "runtime:a1"
    assert noisy["result"] == {"quiet": True}  # what a plugin prints never reaches the protocol
    assert huge["truncated"] is True and len(huge["result"].encode()) == 65536
    assert my_plugin_processes() == []
    assert fwj("run", "show", doc["run_id"])["status"] == "ended"
    assert fwj("home", "check")["ok"] is True  # fw goes on


def test_the_plugins_process_starts_with_the_first_call_and_stops_with_the_run(home, test_plugins):
    fwj("plugin", "enable", "misbehaving")
    mark = f"fw-test-marker-{uuid.uuid4().hex[:12]}"
    script = [
        {"sleep": 1.5, "tool_calls": [{"name": "plugin__misbehaving__echo", "arguments": {"text": "one"}}]},
        {"sleep": 1.5, "tool_calls": [{"name": "plugin__misbehaving__spawn", "arguments": {"marker": mark}}]},
        {"sleep": 1.5, "tool_calls": [{"name": "plugin__misbehaving__echo", "arguments": {"text": "two"}}]},
        {"content": "done"},
    ]
    with ChatServer(script) as server:
        agent(base_url=server.base_url)
        proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", "--message", "go", "--json"], env={**os.environ, "FW_HOME": str(home)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        samples = []  # (when, how many model requests so far, serving processes of fw's)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            step = len(server.requests)
            serving = [line for line in processes_with(f"--parent {proc.pid} ") if HOST in line and "--serve" in line]
            if len(server.requests) == step:
                samples.append((time.monotonic(), step, len(serving)))
            time.sleep(0.1)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    first_asked = min(when for when, step, _ in samples if step == 1)
    # before the model asked for the first plugin call (1.5 s after it was asked), no plugin process serves the run
    assert {n for when, step, n in samples if step == 0 or (step == 1 and when < first_asked + 1.2)} == {0}
    assert {n for _, step, n in samples if step in (2, 3)} == {1}  # one process for the run, kept between calls
    first, second = tool_answers(server.requests[3])[0], tool_answers(server.requests[1])[0]
    assert first["result"]["pid"] == second["result"]["pid"]
    assert wait_until_gone(mark) == [] and processes_with(f"--parent {proc.pid} ") == []  # nothing outlives the run


def test_a_plugin_that_is_missing_or_fails_to_load_offers_nothing_and_home_check_warns(home, tmp_path, monkeypatch, example_plugin):
    site = plugin_site(tmp_path / "site", broken="fw_test_plugins_broken:plugin", dying="fw_test_plugins_dying:plugin",
                       misbehaving="fw_test_plugins:misbehaving")
    monkeypatch.setenv("PYTHONPATH", str(site))
    listed = {p["name"]: p for p in fwj("plugin", "list")["plugins"]}
    assert "ImportError: this plugin is broken on purpose" in listed["broken"]["error"]
    assert "ended its process" in listed["dying"]["error"] and "exit code 4" in listed["dying"]["error"]
    assert "echo" in listed["misbehaving"]["tools"] and listed["example"]["tools"]  # the others are still listed

    before = snapshot(home)
    broken = fw("plugin", "enable", "broken", "--json")
    assert broken.exit_code == 7 and broken.json["error"]["reason"] == "plugin_load"
    assert fw("plugin", "enable", "ghost", "--json").exit_code == 3
    unchanged(home, before)

    fwj("plugin", "enable", "misbehaving")
    for name in ("broken", "dying", "ghost"):  # enabled by hand, or uninstalled since
        (home / f"plugins/{name}.yaml").write_text("settings: {}\n")
    agent()
    run = fwj("run", "start", "--agent", "a1")
    reasons = {u["name"]: u for u in run["unavailable_tools"]}
    for name in ("broken", "dying", "ghost"):
        assert reasons[f"plugin__{name}__*"]["reason"] == "source_unavailable"
    assert "not installed" in reasons["plugin__ghost__*"]["detail"]
    assert "plugin__misbehaving__echo" in run["tools"]
    check = fw("home", "check", "--json")
    assert check.exit_code == 0 and check.json["ok"] is True
    warned = {w["path"]: w for w in check.json["warnings"]}
    assert {"plugins/broken.yaml", "plugins/dying.yaml", "plugins/ghost.yaml"} <= set(warned)
    assert warned["plugins/ghost.yaml"]["code"] == "plugin_unavailable"
    human = fw("home", "check")
    assert human.exit_code == 0 and "ghost" in human.stdout
    shown = fwj("plugin", "show", "ghost")
    assert shown["installed"] is False and shown["enabled"] is True and "not installed" in shown["error"]


def test_a_sandboxed_plugin_sees_neither_the_home_nor_the_network(home, test_plugins, monkeypatch):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    # Python imports from a folder that holds the home too: the box binds it, and hides the home in it
    monkeypatch.setenv("PYTHONPATH", f"{test_plugins}{os.pathsep}{home.parent}")
    fwj("plugin", "enable", "misbehaving", "--secret-setting", "token", input=CANARY)
    agent()
    key_file = str(home / "secrets/plugin/misbehaving.json")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        port = listener.getsockname()[1]
        plain = fwj("run", "start", "--agent", "a1")["run_id"]
        read = fw("tool", "call", "--run", plain, "plugin__misbehaving__read", "--args", json.dumps({"path": key_file}))
        assert read.exit_code == 0 and "[redacted]" in read.json["result"]["text"]  # unconfined it can: redaction is all there is
        assert fw("tool", "call", "--run", plain, "plugin__misbehaving__connect", "--args", json.dumps({"port": port})).exit_code == 0

        fwj("plugin", "enable", "misbehaving", "--sandbox")
        boxed = fwj("run", "start", "--agent", "a1")
        assert "plugin__misbehaving__read" in boxed["tools"]
        read = fw("tool", "call", "--run", boxed["run_id"], "plugin__misbehaving__read", "--args", json.dumps({"path": key_file}))
        assert read.exit_code == 7 and "No such file" in read.json["error"]["message"]
        connect = fw("tool", "call", "--run", boxed["run_id"], "plugin__misbehaving__connect", "--args", json.dumps({"port": port}))
        assert connect.exit_code == 7 and connect.json["error"]["reason"] == "plugin_tool"
        echoed = fw("tool", "call", "--run", boxed["run_id"], "plugin__misbehaving__echo", "--args", '{"text": "boxed"}')
        assert echoed.json["result"]["text"] == "boxed" and echoed.json["result"]["token_set"] is True


def test_plugin_code_never_runs_in_fws_own_process(home, test_plugins, example_plugin):
    fwj("plugin", "enable", "misbehaving")
    fwj("plugin", "enable", "example")
    agent()
    probe = f"""
import sys
from framework_cli.cli.main import main
for args in (["plugin", "list", "--json"], ["plugin", "show", "example", "--json"], ["run", "start", "--agent", "a1", "--json"],
             ["agent", "tools", "a1", "--json"], ["home", "check", "--json"]):
    sys.argv = ["fw", "--home", {str(home)!r}, *args]
    try:
        main()
    except SystemExit as exc:
        assert exc.code == 0, (args, exc.code)
loaded = sorted(m for m in sys.modules if m.startswith(("fw_test_plugins", "fw_example_plugin")))
print("LOADED", loaded, file=sys.stderr)
"""
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "LOADED []"
    assert '"plugin__example__greet"' in proc.stdout


def test_a_one_off_call_starts_the_plugin_for_that_call_only(home, example_plugin):
    fwj("plugin", "enable", "example")
    agent()
    run_id = fwj("run", "start", "--agent", "a1")["run_id"]
    r = fw("tool", "call", "--run", run_id, "plugin__example__word_count", "--args", '{"text": "a b c"}')
    assert r.exit_code == 0 and r.json["result"]["words"] == 3
    assert my_plugin_processes() == []
    bad = fw("tool", "call", "--run", run_id, "plugin__example__word_count", "--args", '{"words": 3}')
    assert bad.exit_code == 4 and bad.json["error"]["code"] == "invalid"  # checked against the tool's schema first


def test_the_example_plugins_own_tests_pass():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:randomly", "-p", "no:cacheprovider",
                           str(EXAMPLE_PLUGIN / "tests")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout


def test_ctrl_c_during_a_hanging_plugin_call_stops_it_at_once(home, test_plugins):
    import signal

    fwj("plugin", "enable", "misbehaving", "--timeout", "600")
    script = [{"tool_calls": [{"name": "plugin__misbehaving__hang", "arguments": {}}]}, {"content": "never"}]
    with ChatServer(script) as server:
        agent(base_url=server.base_url)
        proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", "--message", "go", "--json"], env={**os.environ, "FW_HOME": str(home)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not [line for line in processes_with(f"--parent {proc.pid} ") if "--serve" in line] and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the call is under way
        stopped = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and json.loads(out)["error"]["code"] == "interrupted"
    assert time.monotonic() - stopped < 15
    assert wait_until_gone(f"--parent {proc.pid} ") == []


def test_an_external_runner_sees_plugin_and_sandbox_tools_through_the_gateway(home, example_plugin, gateway):  # noqa: F811 (the fixture)
    fwj("plugin", "enable", "example")
    agent(sandbox={})
    _, token = started("--agent", "a1")
    assets, error = gateway_call(gateway, token, "fw_list_assets", {"asset_types": ["plugin_tools", "sandbox_tools"]})
    assert not error and set(assets) == {"run_id", "plugin_tools", "sandbox_tools", "unavailable_tools"}
    assert [t["name"] for t in assets["plugin_tools"]] == ["plugin__example__word_count", "plugin__example__greet", "plugin__example__sign"]
    assert "sandbox__read_file" in [t["name"] for t in assets["sandbox_tools"]]
    greeted, error = gateway_call(gateway, token, "fw_call_tool", {"tool_name": "plugin__example__greet", "parameters": {"name": "Ada"}})
    assert not error and greeted["result"] == {"text": "Hello, Ada!"}
    direct, error = gateway_call(gateway, token, "plugin__example__word_count", {"text": "a b"})
    assert not error and direct["result"]["words"] == 2


def test_enable_and_disable_have_a_dry_run_that_writes_nothing(home, example_plugin):
    make_basics()
    fwj("plugin", "enable", "example")
    before = snapshot(home)
    dry = fwj("plugin", "enable", "example", "--setting", "greeting=Yo", "--secret-setting", "signing_key", "--dry-run",
              input=CANARY)
    assert dry["dry_run"] is True and "+  greeting: Yo" in dry["diff"] and CANARY not in dry["diff"]
    assert {"path": "secrets/plugin/example.json", "action": "write"} in dry["files"]
    gone = fwj("plugin", "disable", "example", "--dry-run")
    assert gone["dry_run"] is True and gone["files"] == [{"path": "plugins/example.yaml", "action": "remove"}]
    unchanged(home, before)
