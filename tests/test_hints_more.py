"""More hints run as printed: next steps per principal kind, a missing category, mistyped
names of every kind, an empty or typed key, and placeholders where the name is known."""

import json
import os
import pty
import re
import select
import shlex
import subprocess

import pytest
from conftest import CANARY, fw, fw_bin, fwj, make_basics, snapshot
from test_hints import follow_the_hint, hint_commands, run_printed


@pytest.fixture
def basics(home):
    make_basics()
    return home


def printed_commands(text: str) -> list[str]:
    return [c for c in re.findall(r"`([^`]+)`", text) if re.match(r"(printf .*\| )?fw ", c)]


def test_a_user_or_manager_gets_no_binding_step_and_an_agent_one_that_works(basics):
    for kind in ("user", "manager"):
        out = fw("principal", "create", f"p-{kind}", "--kind", kind).stdout
        assert "binding" not in out and "AGENT" not in out, out
    out = fw("principal", "create", "a1", "--kind", "agent").stdout
    [command] = printed_commands(out)
    assert command == "fw binding set a1 --agent a1"
    assert run_printed(command, basics).returncode == 0
    assert fwj("binding", "list")["bindings"][0]["principal"] == "a1"


def test_moving_into_a_missing_category_names_category_create(basics):
    failed = fw("resource", "write", "agent", "a1", "--category", "nocat", "--data", "{}")
    assert "--create" not in failed.stderr, failed
    follow_the_hint(basics, "resource", "write", "agent", "a1", "--category", "nocat", "--data", "{}")
    assert fwj("resource", "read", "agent", "a1")["category"] == "nocat"


def _session_with_triage(h):
    fwj("principal", "create", "triage", "--kind", "agent")
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice", "--member", "triage")


TYPOS = {
    "a session member": ["session", "create", "s3", "--member", "triagr"],
    "a message author": ["message", "post", "s1", "--as", "triagr", "hi"],
    "a bot's principal": ["bot", "add", "b1", "--adapter", "local", "--principal", "triagr"],
    "a memory owner": ["memory", "list", "triagr"],
    "a session": ["session", "show", "s2"],
    "a group": ["agent", "edit", "a1", "--builtin-tool", "resource_managment"],
    "a group of a new agent": ["agent", "create", "a9", "--builtin-tool", "resource_managment"],
    "an event pattern": ["agent", "edit", "a1", "--add-event", "mesage.received"],
    "a platform tool": ["agent", "edit", "a1", "--add-platform-tool", "platform_send_mesage"],
}


@pytest.mark.parametrize("case", list(TYPOS))
def test_a_mistyped_name_gets_a_did_you_mean_that_works_as_printed(basics, case):
    _session_with_triage(basics)
    args = TYPOS[case]
    doc = fw(*args, "--json").json["error"]
    assert doc.get("did_you_mean"), doc
    before = snapshot(basics)
    failed = fw(*args)
    assert snapshot(basics) == before
    assert "|" not in failed.stderr.split("Hint: ", 1)[1], failed  # no `user|agent` to paste
    corrected = hint_commands(failed.stderr)[0]
    assert "did you mean `fw " in failed.stderr and doc["did_you_mean"] in corrected
    assert run_printed(corrected, basics).returncode == 0, corrected


def test_a_mistyped_bot_and_tool_get_a_did_you_mean(basics):
    fwj("principal", "create", "bot", "--kind", "agent")
    fwj("binding", "set", "bot", "--agent", "a1")
    fwj("bot", "add", "b1", "--adapter", "local", "--principal", "bot")
    assert fw("bot", "show", "b2", "--json").json["error"]["did_you_mean"] == "b1"
    called = json.loads(fw("tool", "call", "--manager", "resouce_list", "--args", '{"kind": "agent"}').stdout)
    assert called["error"]["did_you_mean"] == "resource_list"
    assert "`fw tool call --manager resource_list" in called["error"]["hint"]


def test_a_new_principal_named_nowhere_is_created_by_one_command(basics):
    failed = fw("session", "create", "s3", "--member", "zed")
    assert "|" not in failed.stderr, failed
    follow_the_hint(basics, "session", "create", "s3", "--member", "zed")
    assert fwj("session", "show", "s3")["session"]["members"] == ["zed"]


def test_posting_as_a_missing_principal_names_steps_that_work(basics):
    _session_with_triage(basics)
    follow_the_hint(basics, "message", "post", "s1", "--as", "zed", "hi")
    assert fwj("message", "list", "s1")["messages"][0]["author"] == "zed"


def test_a_memory_list_of_nobody_is_not_found(basics):
    result = fw("memory", "list", "nobody", "--json")
    assert result.exit_code == 3 and result.json["error"]["code"] == "not_found"


def test_an_empty_key_on_stdin_names_the_whole_command(basics):
    args = ["resource", "write", "provider", "p2", "--create", "--data", '{"base_url": "https://x.example.test/v1"}', "--api-key-stdin"]
    failed = fw(*args, input="")
    [command] = hint_commands(failed.stderr)
    assert "--create --data" in command and command.startswith('printf %s "$KEY" | fw resource write provider p2')
    follow_the_hint(basics, *args)
    assert fwj("resource", "read", "provider", "p2")["data"]["api_key_set"] is True


def test_a_key_typed_at_a_terminal_is_read_without_echo(basics):
    """On a terminal, --api-key-stdin prompts and does not show what is typed."""
    argv = [fw_bin(), "resource", "write", "provider", "p3", "--create", "--data", '{"base_url": "https://x.example.test/v1"}', "--api-key-stdin"]
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(argv[0], argv, {**os.environ, "FW_HOME": str(basics)})
    seen = b""
    while b"API key" not in seen:
        ready, _, _ = select.select([fd], [], [], 30)
        assert ready, seen
        seen += os.read(fd, 1024)
    os.write(fd, CANARY.encode() + b"\r")
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert CANARY.encode() not in seen
    assert fwj("resource", "read", "provider", "p3")["data"]["api_key_set"] is True


def test_no_model_names_the_agent_and_the_model(basics):
    fwj("resource", "write", "agent", "bare", "--create", "--data", "{}")
    failed = fw("agent", "run", "bare", "--message", "hi")
    [command] = hint_commands(failed.stderr)
    assert command == "fw agent edit bare --model m1"
    assert run_printed(command, basics).returncode == 0


def test_a_missing_memory_key_names_the_list_command(basics):
    fwj("principal", "create", "ops", "--kind", "agent")
    follow_the_hint(basics, "memory", "read", "ops", "nothing", retry=False)


def test_home_init_ends_with_a_whole_provider_command(tmp_path):
    where = tmp_path / "fresh"
    out = fw("home", "init", str(where)).stdout
    command = out.strip().splitlines()[-1].strip()
    assert "..." not in command and "NAME" not in command
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                          env={**os.environ, "PATH": os.path.dirname(fw_bin()) + os.pathsep + os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    assert fw("--home", str(where), "resource", "read", "provider", "openai", "--json").exit_code == 0


def test_a_home_that_is_a_file_is_not_hinted_to_home_init(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    failed = fw("--home", str(afile), "agent", "list")
    assert failed.exit_code == 3 and "home init " + str(afile) not in failed.stderr, failed
    assert shlex.quote(str(afile)) not in " ".join(printed_commands(failed.stderr))


def test_a_corrected_delete_leaves_out_the_confirmation_of_the_mistyped_name(home):
    make_basics(with_key=False)
    error = fwj("resource", "delete", "agent", "a2", "--confirm", "agent/a2", code=3)["error"]
    assert error["did_you_mean"] == "a1" and "`fw resource delete agent a1 --json`?" in error["hint"], error
    error = fwj("resource", "delete", "agent", "--confirm=agent/a2", "a2", code=3)["error"]
    assert "`fw resource delete agent a1 --json`?" in error["hint"], error


def test_a_mistyped_choice_in_data_gets_the_choice_meant_and_never_the_value_quoted(basics):
    r = fw("resource", "write", "agent", "a1", "--data", '{"builtin_tools": ["resource_managment"]}', "--json")
    error = r.json["error"]
    assert error["code"] == "invalid" and error["field"] == "builtin_tools[0]", error
    assert error["hint"].startswith("did you mean 'resource_management'?") and "resource_managment" not in error["message"], error
