"""Every test drives fw through its front door, on a fresh home of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.testing
from typer.testing import CliRunner

from framework_cli.cli.main import build_app

REPO = Path(__file__).resolve().parent.parent
SAMPLE_HOME = REPO / "sample_home"
CANARY = "sk-CANARY-7f3a9c1e5b2d4f60"
APP = build_app()

# Typer turns the app into a click command on every CliRunner.invoke: for fw's whole app that is
# most of an in-process call's time. The command is built from the same app each time, so build
# it once per test process (an installed `fw` still builds its own on every start).
_build_command = typer.testing._get_command
_click_command = _build_command(APP)
typer.testing._get_command = lambda app: _click_command if app is APP else _build_command(app)


class Result:
    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr

    @property
    def json(self):
        return json.loads(self.stdout)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def __repr__(self) -> str:
        return f"Result(exit={self.exit_code}, stdout={self.stdout[:2000]!r}, stderr={self.stderr[:2000]!r})"


def fw(*args: str, input: str | None = None, env: dict | None = None) -> Result:
    """Run fw in-process through Typer's CliRunner."""
    runner = CliRunner()
    result = runner.invoke(APP, list(args), input=input, env=env, catch_exceptions=False)
    # Every output of every test is checked for the canary key: a leak anywhere fails.
    assert CANARY not in result.stdout + result.stderr, f"the canary key leaked: fw {' '.join(args)}"
    return Result(result.exit_code, result.stdout, result.stderr)


def fwj(*args: str, input: str | None = None, code: int = 0):
    """Run fw with --json and return the parsed document, checking the exit code."""
    result = fw(*args, "--json", input=input)
    assert result.exit_code == code, result
    assert "Traceback" not in result.output
    return result.json


def fw_bin() -> str:
    found = shutil.which("fw", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert found, "the fw console script is not installed"
    return found


def fw_proc(*args: str, input: str | None = None, home: Path | None = None, timeout: float = 60) -> Result:
    """Run the installed fw console script in a subprocess."""
    env = dict(os.environ)
    if home is not None:
        env["FW_HOME"] = str(home)
    proc = subprocess.run([fw_bin(), *args], input=input, capture_output=True, text=True, env=env, timeout=timeout)
    assert CANARY not in proc.stdout + proc.stderr, f"the canary key leaked: fw {' '.join(args)}"
    return Result(proc.returncode, proc.stdout, proc.stderr)


def snapshot(home: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file of the home with its bytes, mode and mtime, except fw's own cache and lock."""
    out = {}
    for path in sorted(home.rglob("*")):
        rel = path.relative_to(home).as_posix()
        if rel.split("/", 1)[0] in (".index", ".index.json", ".lock"):
            continue
        st = path.stat()
        out[rel] = (path.read_bytes() if path.is_file() else b"<dir>", st.st_mode, st.st_mtime_ns if path.is_file() else 0)
    return out


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "home"
    monkeypatch.setenv("FW_HOME", str(root))
    monkeypatch.delenv("FW_JSON", raising=False)
    result = fw("home", "init")
    assert result.exit_code == 0, result
    return root


@pytest.fixture
def sample(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "sample"
    shutil.copytree(SAMPLE_HOME, root, ignore=shutil.ignore_patterns(".index", ".index.json", ".lock"))
    monkeypatch.setenv("FW_HOME", str(root))
    return root


def make_basics(with_key: bool = True) -> None:
    """A provider (with the canary key), a model with tool calling, and an agent on it."""
    data = {"base_url": "https://llm.example.test/v1"}
    if with_key:
        data["api_key"] = CANARY
    else:
        data["api_key_env"] = "LLM_KEY"
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps(data))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "m-1", "capabilities": {"tool_call": True}}))
    fwj("agent", "create", "a1", "--model", "m1")
