"""Every hint works as printed: the commands a common error's hint names are run as they
are printed, and each succeeds; then the command that failed succeeds, or gets further."""

import json
import os
import re
import shlex
import subprocess

import pytest
from conftest import CANARY, fw, fw_bin, fwj, make_basics
from fakes.chat_server import ChatServer

KEY = "sk-hint-test-key-5f1e2d"


def hint_commands(stderr: str) -> list[str]:
    """The `fw ...` commands quoted in an error's hint, in order."""
    hint = next(line for line in stderr.splitlines() if line.startswith("Hint: "))
    commands = [c for c in re.findall(r"`([^`]+)`", hint) if re.match(r"(printf .*\| )?fw ", c)]
    assert commands, f"the hint names no command to run: {hint}"
    return commands


def run_printed(command: str, home) -> subprocess.CompletedProcess:
    """A printed command in a shell, with the installed fw, as a user pastes it."""
    env = {**os.environ, "FW_HOME": str(home), "KEY": KEY, "PATH": os.path.dirname(fw_bin()) + os.pathsep + os.environ["PATH"]}
    proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert CANARY not in proc.stdout + proc.stderr
    return proc


def replaces(command: str, args: tuple[str, ...]) -> bool:
    """Whether a printed command is the failed one put right (`fw resource read agent a1` for
    `fw resource read agent a2`), rather than a step to take before it."""
    words = [w for w in shlex.split(command.split("| ")[-1]) if w]
    while words[1:2] == ["--home"]:
        words[1:3] = []
    head = [a for a in args if not a.startswith("-")][:2]
    return words[1:3] == head


def follow_the_hint(home, *args, retry=True):
    """Fail with `args` and run every command of the hint: each succeeds. A hint that puts
    the command right has then done it; one that names a step first lets it get further."""
    failed = fw(*args)
    assert failed.exit_code not in (0, 1), failed
    commands = hint_commands(failed.stderr)
    for command in commands:
        done = run_printed(command, home)
        assert done.returncode == 0, f"`{command}` failed: {done.stderr}"
    if not retry or any(replaces(c, args) for c in commands):
        return done
    again = fw(*args)
    assert again.exit_code == 0 or again.stderr.splitlines()[0] != failed.stderr.splitlines()[0], again
    return again


@pytest.fixture
def basics(home):
    make_basics()
    return home


def with_binding(home, enabled=True):
    fwj("principal", "create", "bot", "--kind", "agent")
    fwj("binding", "set", "bot", "--agent", "a1")
    if not enabled:
        fwj("binding", "disable", "bot")


CASES = {
    "a mistyped resource": (None, ["resource", "read", "agent", "a2"]),
    "a mistyped kind": (None, ["resource", "list", "agents"]),
    "a kind in capitals": (None, ["resource", "read", "Model", "m1"]),
    "a malformed name close to one": (None, ["resource", "read", "agent", "A1"]),
    "an update of a missing resource": (None, ["resource", "write", "harness", "h9", "--data", '{"type": "local"}']),
    "a create of an existing resource": (None, ["resource", "write", "agent", "a1", "--create", "--data", '{"description": "d"}']),
    "a write into a missing category": (None, ["resource", "write", "harness", "h1", "--create", "--category", "team", "--data", '{"type": "t"}']),
    "an unknown field": (None, ["resource", "write", "agent", "a1", "--data", '{"colour": "red"}']),
    "a mistyped model": (None, ["agent", "create", "a2", "--model", "m2"]),
    "a mistyped category": (None, ["resource", "list", "agent", "--category", "defualt"]),
    "a missing principal": (None, ["binding", "set", "carol", "--agent", "a1"]),
    "a mistyped principal": (lambda h: with_binding(h), ["binding", "set", "bto", "--agent", "a1"]),
    "a run of an unbound principal": (lambda h: fwj("principal", "create", "bot", "--kind", "agent"), ["run", "start", "--principal", "bot"]),
    "a run of a disabled binding": (lambda h: with_binding(h, enabled=False), ["run", "start", "--principal", "bot"]),
    "deleting a managed agent": (lambda h: with_binding(h), ["resource", "delete", "agent", "a1", "--confirm", "agent/a1"]),
    "deleting a principal in use": (lambda h: with_binding(h), ["principal", "delete", "bot"]),
    "a stale confirmation": (None, ["resource", "delete", "provider", "p1", "--recursive", "--confirm", "provider/p1"]),
    "a malformed run id": (None, ["run", "show", "not-a-run"]),
}


# Hints that show where to look (the fields a kind takes, the runs there are): the commands
# they name work, and the user then retypes the command, so there is nothing to retry.
LOOK_UPS = {"an unknown field", "a malformed run id"}


@pytest.mark.parametrize("case", list(CASES))
def test_the_hint_of_a_common_error_works_as_printed(basics, case):
    setup, args = CASES[case]
    if setup:
        setup(basics)
    args = [str(basics) if a == "HOME" else a for a in args]
    follow_the_hint(basics, *args, retry=case not in LOOK_UPS)


def test_a_mistyped_field_is_named_whole_and_fields_fw_keeps_are_never_offered(basics):
    error = fwj("resource", "write", "model", "m1", "--data", '{"capabilities": {"tool_cal": true}}', code=4)["error"]
    assert error["hint"].startswith("did you mean 'capabilities.tool_call'? A model takes provider")
    error = fwj("resource", "write", "agent", "a1", "--data", '{"builtin_tool": []}', code=4)["error"]
    assert error["hint"].startswith("did you mean 'builtin_tools'? An agent takes")
    assert not fwj("resource", "write", "agent", "a1", "--data", '{"colour": "red"}', code=4)["error"]["hint"].startswith("did you")
    fwj("principal", "create", "bot", "--kind", "agent")
    hint = fwj("binding", "set", "bot", "--agent", "a1", "--policy", "sometimes", code=4)["error"]["hint"]
    assert "policy" in hint and "enabled_by" not in hint and "enabled_at" not in hint


def test_a_non_empty_category_names_a_move_that_works(basics):
    fwj("category", "create", "harness", "team")
    fwj("resource", "write", "harness", "h1", "--create", "--category", "team", "--data", '{"type": "t"}')
    assert follow_the_hint(basics, "category", "delete", "harness", "team").exit_code == 0
    assert fwj("category", "list", "harness")["categories"] == ["default"]


def test_a_missing_home_names_home_init(tmp_path, basics):
    where = tmp_path / "elsewhere"
    assert follow_the_hint(basics, "--home", str(where), "agent", "list").exit_code == 0


def test_a_provider_whose_key_variable_is_unset_names_a_command_that_works(basics, monkeypatch):
    monkeypatch.delenv("TOUR_UNSET_KEY", raising=False)
    with ChatServer([{"content": "x"}]) as server:
        fwj("resource", "write", "provider", "envp", "--create", "--data", json.dumps({"base_url": server.base_url, "api_key_env": "TOUR_UNSET_KEY"}))
        again = follow_the_hint(basics, "resource", "models", "envp")
    assert again.exit_code == 0 and "m-1" in again.stdout, again


def test_a_damaged_secret_file_names_a_command_that_works(basics):
    (basics / "secrets/provider/p1.json").write_text("{not json")
    assert follow_the_hint(basics, "resource", "read", "provider", "p1").exit_code == 0


def test_hints_with_home_given_name_that_home(basics, tmp_path):
    other = tmp_path / "other"
    fwj("home", "init", str(other))
    fwj("--home", str(other), "resource", "write", "harness", "h1", "--create", "--data", '{"type": "t"}')
    result = fw("--home", str(other), "resource", "read", "harness", "h2")
    assert f"`fw --home {other} resource read harness h1`" in result.stderr, result
    for command in hint_commands(result.stderr):
        assert run_printed(command, basics).returncode == 0
