"""Issue 21, item 25: the tutorial's "Running an agent" steps run as printed on a copy of
sample_home, and leave the repository's files as they were (git status clean)."""

from __future__ import annotations

import re
import subprocess

from conftest import CANARY, REPO
from fakes.chat_server import ChatServer
from test_tour import fresh_checkout, fresh_shell_env, tour_script


def agent_run_commands() -> list[str]:
    section = (REPO / "docs" / "tutorial.md").read_text().split("\n## Running an agent\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, re.S | re.M)
    return [line.strip() for line in blocks[-1].splitlines() if line.strip()]


def git(checkout, *args):
    return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, check=True).stdout


def test_the_steps_work_on_a_copy_and_leave_git_clean(tmp_path):
    commands = agent_run_commands()
    assert not any("--home sample_home resource write" in c for c in commands), "a step writes into the tracked sample home"
    checkout = fresh_checkout(tmp_path)
    git(checkout, "init", "-q")
    git(checkout, "add", "sample_home")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-qm", "sample")
    with ChatServer([{"content": "Three agents."}], repeat_last=True) as server:
        env = fresh_shell_env(tmp_path, server)
        script = tour_script(["set -u", ". .venv/bin/activate", *commands])
        script = script.replace("http://127.0.0.1:8080/v1", server.base_url).replace("MODEL-YOUR-SERVER-SERVES", "m-1")
        proc = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
    report = f"exit {proc.returncode}\n{proc.stderr[-4000:]}\n{proc.stdout[-4000:]}"
    assert proc.returncode == 0, report
    assert "Three agents." in proc.stdout and "m-1" in proc.stdout, report
    assert CANARY not in proc.stdout + proc.stderr
    assert git(checkout, "status", "--porcelain", "--", "sample_home") == "", "the steps changed the tracked sample home"
