"""The README's tour runs as printed, top to bottom, in a fresh shell after the set-up
command: its commands are taken from README.md, so the README cannot drift from fw."""

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import CANARY, REPO, SAMPLE_HOME, fw_bin
from fakes.chat_server import ChatServer


def tour_commands(readme: str) -> list[str]:
    """The commands of every code block under "## A tour", in order, a continued line joined
    to the next, blank lines left out."""
    section = readme.split("\n## A tour\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```(?:sh)?\n(.*?)^```$", section, re.S | re.M)
    assert blocks, "README.md has no code block under '## A tour'"
    commands, pending = [], ""
    for line in "".join(blocks).splitlines():
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        command = (pending + line).strip()
        pending = ""
        if command:
            commands.append(command)
    return commands


def tour_script(commands: list[str]) -> str:
    """One bash script, so that what a command exports reaches the next, as in a shell; it
    stops at the first command that fails, and names it."""
    lines = ["set -eo pipefail"]
    for number, command in enumerate(commands, 1):
        lines.append(f"echo {shlex.quote(f'[{number}] {command}')} >&2")
        lines.append(command)
    return "\n".join(lines) + "\n"


def fresh_checkout(tmp_path: Path) -> Path:
    """A folder laid out like the repository after the set-up command: sample_home, and the
    virtual environment that holds the installed fw."""
    venv = Path(fw_bin()).parent.parent
    if not (venv / "bin" / "activate").exists():
        pytest.skip("fw is not installed in a virtual environment")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copytree(SAMPLE_HOME, checkout / "sample_home", ignore=shutil.ignore_patterns(".index*", ".lock", ".locks"))
    (checkout / ".venv").symlink_to(venv)
    return checkout


def fresh_shell_env(tmp_path: Path, server: ChatServer) -> dict[str, str]:
    """A new user's environment: no FW_ variables, a home folder of its own, and the
    provider the README asks for, here the scripted local server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FW_", "VIRTUAL_ENV", "OPENAI_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(Path(fw_bin()).parent)))
    env.update(HOME=str(tmp_path / "user"), OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=CANARY)
    (tmp_path / "user").mkdir()
    return env


def test_the_readme_tour_runs_as_printed(tmp_path):
    commands = tour_commands((REPO / "README.md").read_text())
    assert commands[0].startswith(". .venv/bin/activate"), "the tour must put fw on PATH first"
    assert any(c.startswith("fw resource models") for c in commands), "the tour no longer reaches a provider"
    checkout = fresh_checkout(tmp_path)
    with ChatServer([{"content": "The home is tidy."}], repeat_last=True) as server:
        env = fresh_shell_env(tmp_path, server)
        proc = subprocess.run(
            ["bash", "-c", tour_script(commands)], cwd=checkout, env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=300,
        )
    report = f"exit {proc.returncode}\n--- stderr\n{proc.stderr[-6000:]}\n--- stdout\n{proc.stdout[-6000:]}"
    assert proc.returncode == 0, report
    assert "Traceback" not in proc.stdout + proc.stderr, report
    assert CANARY not in proc.stdout + proc.stderr, "the key leaked in the tour's output"
    assert "m-1" in proc.stdout  # the provider's model list came back
    assert "Yes, all green." in proc.stdout  # the local bot served the reply
    assert not (tmp_path / "user" / "my-home" / "providers" / "default" / "openai.yaml").exists()  # the tour cleans up


def test_tour_commands_joins_continued_lines():
    readme = "x\n## A tour\n\ntext\n\n```\nfw a \\\n    --b c   # note\n\nfw d\n```\n\n## Next\n"
    assert tour_commands(readme) == ["fw a      --b c   # note", "fw d"]
