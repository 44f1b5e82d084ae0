"""The external runner: a program that runs an agent itself (a coding agent CLI, a workflow
engine, any program that speaks MCP), named by a harness of type `external`.

For one run it gets the run's own gateway on an ephemeral loopback port, and is started in the
run's working folder with only PATH, HOME, LANG, TERM, FW_GATEWAY_URL, FW_GATEWAY_TOKEN and
FW_RUN_ID in its environment and the input text on standard input. Its standard output,
trimmed, is the answer. It runs under the process supervisor: at the timeout, when it exits,
and when its run is ended meanwhile (a cancelled task, `fw run end`; looked at twice a second),
everything it started is stopped, so nothing it started outlives the run. fw calls no model
for such a run.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from ..domain.run_records import load_run, present
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..runtime.supervisor import run_supervised
from ..tools.service import REFUSALS

DEFAULT_RUNNER_TIMEOUT = 600.0
KEPT_ENV = ("PATH", "HOME", "LANG", "TERM")
OUTPUT_KEPT = 1 << 20  # bytes of the runner's standard output kept: the answer
STDERR_TAIL = 2000  # characters of its standard error an error shows (the end, where the reason is)

# What serves one run's gateway while its runner works: (home, run id, the run's open MCP
# connections, on_call) -> a context that yields the gateway's URL. It is a network door
# (serve/), so the CLI hands it in; `on_call(name, arguments, document, is_error)` hears each call.
OnCall = Callable[[str, Any, dict[str, Any], bool], None]
GatewayStarter = Callable[[Home, str, Any, OnCall], AbstractContextManager[str]]


@dataclass
class RunJob:
    """What a runner works on: the run (its record and token, its open MCP connections), the
    input text and the earlier messages of its conversation."""

    home: Home
    record: dict[str, Any]
    token: str
    sources: Any
    message: str
    history: list[dict[str, Any]] | None = None
    on_event: Callable[[dict[str, Any]], None] | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class ExternalRunner:
    def __init__(self, gateway: GatewayStarter | None, timeout: float) -> None:
        self.gateway, self.timeout = gateway, timeout

    def run(self, job: RunJob) -> dict[str, Any]:
        record = job.record
        argv = (record.get("runner") or {}).get("command") or []
        if self.gateway is None:
            raise FwError("unavailable", "this command cannot serve the gateway an external runner needs",
                          "run the agent with `fw agent run`, `fw dispatch` or `fw event handle`", reason="runner")
        if not argv:
            raise FwError("invalid", "the run's harness has no command", "give the harness a command", reason="runner")
        _check_folder(record["directory"])
        guard = threading.Lock()

        def heard(name: str, arguments: Any, doc: dict[str, Any], is_error: bool) -> None:
            call = _tool_call(name, arguments, doc, is_error)
            with guard:
                job.tool_calls.append(call)
            if job.on_event:
                job.on_event({"type": "tool_call", **call})

        with self.gateway(job.home, record["run_id"], job.sources, heard) as url:
            env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
            env.update(FW_GATEWAY_URL=url, FW_GATEWAY_TOKEN=job.token, FW_RUN_ID=record["run_id"])
            done = _start(argv, record["directory"], env, self.timeout, job.message, lambda: _status(job.home, record["run_id"]) != "active")
        if done.stopped:
            expired = _status(job.home, record["run_id"]) == "expired"
            raise FwError("lease_expired" if expired else "run_ended",
                          ("the run's lease ran out" if expired else "the run was ended (a cancelled task, `fw run end`)")
                          + " while its external runner worked; it and everything it started were stopped",
                          "start a new run if the work is still wanted", reason="runner")
        if done.timed_out:
            raise FwError("unavailable", f"the external runner did not finish within {self.timeout:g} s; it and everything it started were stopped",
                          "give it longer with --timeout SECONDS, or look at what it waits for", reason="runner", timed_out=True)
        if done.exit_code != 0:
            tail = redact(done.stderr.decode("utf-8", errors="replace"))[-STDERR_TAIL:].strip()
            raise FwError("unavailable", f"the external runner exited with status {done.exit_code}" + (f": {tail}" if tail else ""),
                          "its standard error (the end of it is shown) says why", reason="runner", exit_code=done.exit_code,
                          stderr=tail)
        answer = redact(done.stdout.decode("utf-8", errors="replace")).strip()
        return {"run_id": record["run_id"], "status": "completed", "answer": answer, "rounds": 0,
                "finish_reason": "stop", "tool_calls": list(job.tool_calls), "runner": "external"}


def _status(home: Any, run_id: str) -> str:
    """The run's status now: active, ended or expired (a damaged record: ended, it may not act)."""
    try:
        return str(present(load_run(home, run_id))["status"])
    except FwError:
        return "ended"


def _program(argv: list[str], env: dict[str, str]) -> list[str]:
    """The command with its program found as a shell finds it: a bare name on PATH; a name with
    a `/` from the folder fw was started in (not the run's working folder, where it then runs);
    `unavailable` naming what was tried when it is not there."""
    program = argv[0]
    if "\0" in program:
        raise FwError("invalid", "the harness's command holds a NUL character", "give it plain text", reason="runner")
    if "/" not in program:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        if found is None:
            raise FwError("unavailable", f"the external runner's program {program!r} was not found on PATH ({env.get('PATH', os.defpath)})",
                          "install it, or give the harness's command a path to it", reason="runner")
        return [os.path.abspath(found), *argv[1:]]  # a relative entry of PATH is the folder fw started in, not the run's
    path = os.path.abspath(os.path.expanduser(program))
    if not os.path.isfile(path):
        raise FwError("unavailable", f"the external runner's program {program!r} was not found: tried {path} "
                      "(a path is taken from the folder fw was started in)", "give the harness's command an absolute path, "
                      "or start fw in the folder the path is relative to", reason="runner")
    return [path, *argv[1:]]


def _start(argv: list[str], folder: str, env: dict[str, str], timeout: float, text: str,
           stop_when: Callable[[], bool] | None = None) -> Any:
    argv = _program(argv, env)
    try:
        return run_supervised(argv, cwd=folder, env=env, timeout=timeout, stdin=text.encode("utf-8"), keep=OUTPUT_KEPT,
                              stop_when=stop_when)
    except (FileNotFoundError, NotADirectoryError):
        raise FwError("unavailable", f"the external runner's program {argv[0]!r} was not found",
                      "give the harness a command whose program is on PATH, or a path", reason="runner") from None
    except PermissionError:
        raise FwError("unavailable", f"the external runner's program {argv[0]!r} may not be run (permission denied)",
                      "check the file's permissions", reason="runner") from None
    except ValueError:
        raise FwError("invalid", "the harness's command holds a NUL character", "give it plain text", reason="runner") from None
    except OSError as exc:
        raise FwError("unavailable", f"the external runner could not be started: {exc.strerror}", "check the harness's command",
                      reason="runner") from None


def _check_folder(directory: str) -> None:
    if not os.path.isdir(directory):
        raise FwError("not_found", "the run's working folder (its binding's directory) is missing or not a folder",
                      "create it, or give the binding another with `fw binding set PRINCIPAL --agent AGENT --directory DIR`",
                      field="directory")


def _tool_call(name: str, arguments: Any, doc: dict[str, Any], is_error: bool) -> dict[str, Any]:
    """One call the runner made through the gateway, as `fw agent run` lists tool calls (a
    call through fw_call_tool by the name of the tool it called)."""
    if name == "fw_call_tool" and isinstance(arguments, dict) and isinstance(arguments.get("tool_name"), str):
        name = arguments["tool_name"]
    if not is_error:
        return {"name": name, "outcome": "ok"}
    code = (doc.get("error") or {}).get("code", "internal")
    return {"name": name, "outcome": "refused" if code in REFUSALS else "error", "error": code}
