"""Shell completion names what the home holds, per kind, and the shell asked for."""

import pytest
from conftest import fw, fwj, make_basics


def complete(*words: str) -> list[str]:
    """What bash completion offers for the last word of `fw WORDS...`."""
    line = ["fw", *words]
    result = fw(env={"_FW_COMPLETE": "complete_bash", "COMP_WORDS": " ".join(line), "COMP_CWORD": str(len(line) - 1)})
    return result.stdout.split()


@pytest.fixture
def full(home):
    make_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management")
    fwj("category", "create", "model", "mcat")
    fwj("category", "create", "agent", "acat")
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("principal", "create", "ops", "--kind", "agent")
    fwj("binding", "set", "ops", "--agent", "a1")
    fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "ops")
    return fwj("run", "start", "--agent", "a1")["run_id"]


def test_names_of_every_kind_complete(full):
    run_id = full
    assert complete("run", "show", "") == [run_id]
    assert complete("tool", "call", "--run", run_id[-8:], "framework_resource_l") == ["framework_resource_list"]
    assert complete("tool", "call", "--manager", "resource_l") == ["resource_list"]
    assert complete("session", "show", "") == ["s1"]
    assert complete("message", "post", "s1", "--as", "") == ["alice", "ops"]
    assert complete("session", "create", "s2", "--member", "a") == ["alice"]
    assert complete("bot", "show", "") == ["desk"]
    assert complete("event", "handle", "d") == ["desk"]
    assert complete("principal", "create", "x", "--kind", "") == ["agent", "manager", "user"]
    assert complete("agent", "edit", "a1", "--model", "") == ["m1"]
    assert complete("memory", "list", "o") == ["ops"]


def test_a_category_completes_for_its_own_kind(full):
    assert complete("resource", "write", "model", "m1", "--category", "") == ["default", "mcat"]
    assert complete("resource", "write", "agent", "a1", "--category", "") == ["acat", "default"]


def test_remove_builtin_tool_offers_only_mounted_groups(full):
    assert complete("agent", "edit", "a1", "--remove-builtin-tool", "") == ["resource_management"]
    assert "resource_management" not in complete("agent", "edit", "a1", "--add-builtin-tool", "")


@pytest.mark.parametrize("shell,mark", [("zsh", "#compdef fw"), ("fish", "complete --command fw"), ("bash", "complete -o default -F")])
def test_show_completion_prints_the_script_of_the_shell_named(shell, mark, home):
    out = fw("--show-completion", shell).stdout
    assert mark in out, out[:300]
