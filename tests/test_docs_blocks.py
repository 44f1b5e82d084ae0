"""Every shell block of the documentation runs as printed: each document's `sh` blocks, in order,
as one bash script in a fresh shell, on a fresh checkout (sample_home, examples/, the installed
fw) with a home folder of its own and a scripted model server where the docs name a provider.

A line that cannot run here says so where the reader sees it, with its reason, at its end:
`# [not run: REASON]`; a whole block, on its first line. Those lines are left out, and nothing
else is. README.md's blocks are run by tests/test_tour.py (its set-up command by
tests/test_startup.py), docs/qq-napcat.md's by tests/test_docs_napcat.py (they play NapCat
beside the listener they start): each is checked here only for its languages and markers."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import pytest
from conftest import CANARY, REPO
from fakes.chat_server import ChatServer
from test_tour import fresh_checkout, fresh_shell_env, tour_script

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN_ELSEWHERE = {"README.md", "qq-napcat.md"}
NOT_RUN = re.compile(r"#.*\[not run: ([^\]]+)\]\s*$")
PLACEHOLDERS = {"http://127.0.0.1:8080/v1": None, "MODEL-YOUR-SERVER-SERVES": "m-1"}


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return re.findall(r"^```([^\n`]*)\n(.*?)^```$", text, re.S | re.M)


def commands(body: str) -> list[str]:
    """The block's commands, continued lines joined, blank lines and lines marked not run left out."""
    lines = body.splitlines()
    if lines and NOT_RUN.search(lines[0]) and lines[0].lstrip().startswith("#"):
        return []
    found, pending = [], ""
    for line in lines:
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        command = pending + line
        if not _whole(command):  # a quoted argument goes on over the next line
            pending = command + "\n"
            continue
        command, pending = command.strip(), ""
        if command and not NOT_RUN.search(command):
            found.append(command)
    return found


def _whole(command: str) -> bool:
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def test_every_block_of_the_docs_names_its_language_and_every_skip_its_reason():
    for doc in DOCS:
        for language, body in blocks(doc.read_text()):
            assert language.strip(), f"{doc.name}: a block without a language (sh, yaml, json, python, text): {body[:60]!r}"
            for line in body.splitlines():
                if "not run" in line:
                    found = NOT_RUN.search(line)
                    assert found and len(found.group(1).strip()) > 5, f"{doc.name}: a skip without its reason: {line!r}"


@pytest.mark.parametrize("doc", [d for d in DOCS if d.name not in RUN_ELSEWHERE and any(lang == "sh" for lang, _ in blocks(d.read_text()))],
                         ids=lambda d: d.name)
def test_the_shell_blocks_of_a_document_run_as_printed(doc, tmp_path):
    script_commands = [c for language, body in blocks(doc.read_text()) if language == "sh" for c in commands(body)]
    checkout = fresh_checkout(tmp_path)
    shutil.copytree(REPO / "examples", checkout / "examples", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    with ChatServer([{"content": "Three agents."}], repeat_last=True) as server:
        env = fresh_shell_env(tmp_path, server)
        env.update(ANTHROPIC_API_KEY=CANARY, SIGNING_KEY="docs-signing-key-5d1f")  # what the docs ask the reader to set
        env["FW_HOME"] = str(tmp_path / "user" / "home")  # one fresh home a document (a block may point elsewhere)
        script = tour_script([". .venv/bin/activate", 'fw home init "$FW_HOME" >/dev/null', *script_commands])
        for placeholder, value in PLACEHOLDERS.items():
            script = script.replace(placeholder, value or server.base_url)
        proc = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
    report = f"{doc.name}: exit {proc.returncode}\n--- stderr\n{proc.stderr[-5000:]}\n--- stdout\n{proc.stdout[-3000:]}"
    assert proc.returncode == 0, report
    assert "Traceback" not in proc.stdout + proc.stderr, report
    assert CANARY not in proc.stdout + proc.stderr, report
