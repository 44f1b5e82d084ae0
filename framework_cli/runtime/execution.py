"""`exec`: run a program for a run that mounts `local_execution` with `execution.enabled`, or
that has the sandbox tools (`sandbox__exec`). argv only, never a shell; a minimal environment;
in the sandbox (`sandbox.py`) unless the agent chose `execution.sandbox: none`; each output
stream cut at 64 KiB of bytes, at a character boundary; known secret values redacted. The
program runs under a supervisor (`supervisor.py`): at the timeout, when the program exits, and
when fw is interrupted, terminated or killed, everything it started is killed, whatever it did
to get away (`setsid`, detaching), and no output read waits past the timeout."""

from __future__ import annotations

import os
from typing import Any

from ..errors import FwError
from ..home import secrets
from .sandbox import PROGRAM, Box, confine, unavailable
from .supervisor import run_supervised

STREAM_CAP = 64 * 1024  # bytes kept of each stream
KEPT_ENV = ("PATH", "HOME", "LANG", "TERM")
_SLACK = 4096  # read past the cap before redacting, so that a key across the cut is still found


def exec_program(argv: list[str], directory: str, timeout_seconds: float = 60, stdin: str | None = None,
                 box: Box | None = None) -> dict[str, Any]:
    """Run `argv` in `directory`; in `box` when one is given (then `directory` is its workspace)."""
    _check_folder(directory)
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    if "\0" in "".join(argv):
        raise _nul()
    command = confine(argv, box) if box is not None else argv
    try:
        done = run_supervised(command, cwd=directory, env=env, timeout=timeout_seconds,
                              stdin=(stdin or "").encode("utf-8"), keep=STREAM_CAP + _SLACK)
    except (FileNotFoundError, NotADirectoryError):
        if box is not None:
            raise unavailable(f"{PROGRAM} could not be started") from None
        raise _not_found() from None
    except PermissionError:
        raise _not_permitted() from None
    except ValueError:  # a NUL byte in an argument
        raise _nul() from None
    except OSError as exc:
        raise FwError("invalid", f"the program could not be started: {exc.strerror}", "check argv") from None
    if box is not None:
        _refuse_failed_start(done)
    out, out_cut = _text(done.stdout, done.stdout_bytes)
    err, err_cut = _text(done.stderr, done.stderr_bytes)
    return {"exit_code": done.exit_code, "stdout": out, "stderr": err, "timed_out": done.timed_out, "truncated": out_cut or err_cut}


def _not_found() -> FwError:
    return FwError("not_found", "the program was not found", "give argv[0] as a program on PATH or as a path")


def _not_permitted() -> FwError:
    return FwError("denied", "the program may not be run (permission denied)", "check the file's permissions")


def _nul() -> FwError:
    return FwError("invalid", "argv holds a NUL character", "pass plain text arguments", field="argv")


# What bwrap says when the program it was to run cannot be run: it exits 1, having said only this.
_BWRAP_EXEC_FAILED = f"{PROGRAM}: execvp "


def _refuse_failed_start(done: Any) -> None:
    """A program the box could not start is the same error as one outside it could not (and
    its name, which bwrap quotes, is not echoed)."""
    said = done.stderr.decode("utf-8", "replace").strip()
    if done.exit_code != 1 or not said.startswith(_BWRAP_EXEC_FAILED) or "\n" in said:
        return
    if said.endswith(("Permission denied", "Is a directory")):
        raise _not_permitted()
    raise _not_found()


def _check_folder(directory: str) -> None:
    """The working folder is checked first: a missing one is not a missing program."""
    if os.path.isdir(directory):
        return
    what = "is not a folder" if os.path.exists(directory) else "is missing"
    raise FwError("not_found", f"the run's working folder (its binding's directory) {what}",
                  "create the folder (`fw binding list` shows it), or give the binding another with "
                  "`fw binding set PRINCIPAL --agent AGENT --directory DIR`", field="directory")


def _text(kept: bytes, seen: int) -> tuple[str, bool]:
    """A stream as text, redacted first and then cut at STREAM_CAP bytes (a key across the
    cut is still a key; a character across it is left out whole); whether it was cut."""
    redacted = secrets.redact(kept.decode("utf-8", errors="replace")).encode("utf-8")
    cut = redacted[:STREAM_CAP].decode("utf-8", errors="ignore")  # only a character split at the end is dropped
    return cut, len(redacted) > STREAM_CAP or seen > len(kept)
