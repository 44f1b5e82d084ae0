"""Shell completion names what the home holds, per kind, and the shell asked for."""

import os
import shlex
import shutil
import subprocess

import pytest
from conftest import fw, fw_bin, fwj, make_basics


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


# What each shell does with the script `fw --show-completion SHELL` prints, in the real shell: the
# script asks fw for the line typed so far (the zsh stub of `_arguments` prints what zsh would offer).
SHELLS = {
    "bash": 'source {script}; COMP_WORDS=({words}); COMP_CWORD={at}; _fw_completion fw; printf "%s\\n" "${{COMPREPLY[@]}}"',
    "zsh": 'compdef() {{ : }}; _arguments() {{ print -rl -- "$@" }}; source {script}; words=({words}); CURRENT={current}; _fw_completion',
    "fish": "source {script}; complete -C {line}",
}


def shell_completes(shell: str, words: list[str], tmp_path) -> list[str]:
    """What `shell` offers for the last of `words` (typed after `fw`), with no FW_HOME set."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (.ci/run installs it)")
    script = tmp_path / f"fw.{shell}"
    script.write_text(fw("--show-completion", shell).stdout)
    line = ["fw", *words]
    if shell == "bash":  # bash breaks words at `=` (COMP_WORDBREAKS)
        line = [part for word in line for part in (_broken_at_equals(word) if word.startswith("-") else [word])]
    code = SHELLS[shell].format(script=shlex.quote(str(script)), words=" ".join(shlex.quote(w) for w in line), at=len(line) - 1,
                                current=len(line), line=shlex.quote(" ".join(line)))
    env = {k: v for k, v in os.environ.items() if k != "FW_HOME"}
    env["PATH"] = os.path.dirname(fw_bin()) + os.pathsep + env["PATH"]
    out = subprocess.run([shell, "-f" if shell == "zsh" else "-c", *(["-c"] if shell == "zsh" else []), code],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60).stdout
    if shell == "zsh":  # *: :(("a" "b")) or *: :(("--opt":"its help"))
        return [item.split('":"')[0].strip('"') for item in out.split(":((", 1)[-1].rstrip(")\n").split('" "')] if ":((" in out else []
    return [item.split("\t")[0] for item in out.splitlines() if item]


def _broken_at_equals(word: str) -> list[str]:
    """`--opt=VALUE` as bash's COMP_WORDS holds it: `--opt`, `=`, `VALUE` (no word after an `=` at the end)."""
    option, equals, value = word.partition("=")
    return [option, equals, value] if value else [option, equals] if equals else [option]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_completes_names_of_the_home_a_late_home_names(shell, full, home, tmp_path):
    assert shell_completes(shell, ["--home", str(home), "session", "show", ""], tmp_path) == ["s1"]
    assert shell_completes(shell, ["agent", "edit", "--home", str(home), ""], tmp_path) == ["a1"]  # --home after the command
    assert shell_completes(shell, ["bot", "show", "--json", f"--home={home}", "d"], tmp_path) == ["desk"]
    assert shell_completes(shell, ["agent", "edit", "a1", "--home", str(home), "--add-b"], tmp_path) == ["--add-builtin-tool"]
    # an option's value given with `=`: bash completes the value after its `=`, zsh and fish the whole word
    whole = shell != "bash"
    assert shell_completes(shell, ["agent", "edit", "a1", f"--home={home}", "--model=m"], tmp_path) == ["--model=m1" if whole else "m1"]
    assert shell_completes(shell, ["agent", "edit", "a1", f"--home={home}", "--model="], tmp_path) == ["--model=m1" if whole else "m1"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_a_quoted_word_on_the_line_is_read_as_the_shell_reads_it(shell, full, home, tmp_path):
    spaced = tmp_path / "my home"
    spaced.symlink_to(home)
    typed = f'"{spaced}"'  # as typed: in quotes, since it holds a space
    assert shell_completes(shell, ["--home", typed, "session", "show", ""], tmp_path) == ["s1"]
    assert shell_completes(shell, ["agent", "edit", "--home", typed, ""], tmp_path) == ["a1"]
