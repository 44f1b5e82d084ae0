"""`exec`: run a program on the host for a run that mounts `local_execution` with
`execution.enabled`. argv only, never a shell; a minimal environment; each output stream cut
at 64 KiB of bytes, at a character boundary; known secret values redacted. The program runs
under a supervisor (`supervisor.py`): at the timeout, when the program exits, and when fw is
interrupted, terminated or killed, everything it started is killed, whatever it did to get away
(`setsid`, detaching), and no output read waits past the timeout."""

from __future__ import annotations

import os
from typing import Any

from ..errors import FwError
from ..home import secrets
from .supervisor import run_supervised

STREAM_CAP = 64 * 1024  # bytes kept of each stream
KEPT_ENV = ("PATH", "HOME", "LANG", "TERM")
_SLACK = 4096  # read past the cap before redacting, so that a key across the cut is still found


def exec_program(argv: list[str], directory: str, timeout_seconds: float = 60, stdin: str | None = None) -> dict[str, Any]:
    _check_folder(directory)
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    try:
        done = run_supervised(argv, cwd=directory, env=env, timeout=timeout_seconds,
                              stdin=(stdin or "").encode("utf-8"), keep=STREAM_CAP + _SLACK)
    except (FileNotFoundError, NotADirectoryError):
        raise FwError("not_found", "the program was not found", "give argv[0] as a program on PATH or as a path") from None
    except PermissionError:
        raise FwError("denied", "the program may not be run (permission denied)", "check the file's permissions") from None
    except ValueError:  # a NUL byte in an argument
        raise FwError("invalid", "argv holds a NUL character", "pass plain text arguments", field="argv") from None
    except OSError as exc:
        raise FwError("invalid", f"the program could not be started: {exc.strerror}", "check argv") from None
    out, out_cut = _text(done.stdout, done.stdout_bytes)
    err, err_cut = _text(done.stderr, done.stderr_bytes)
    return {"exit_code": done.exit_code, "stdout": out, "stderr": err, "timed_out": done.timed_out, "truncated": out_cut or err_cut}


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
