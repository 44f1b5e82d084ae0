"""`exec`: run a program on the host for a run that mounts `local_execution` with
`execution.enabled`. argv only, never a shell; a minimal environment; each output stream cut
at 64 KiB; the whole process group killed at the timeout; known secret values redacted."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any

from ..errors import FwError
from ..home import secrets

STREAM_CAP = 64 * 1024  # characters kept of each stream
KEPT_ENV = ("PATH", "HOME", "LANG", "TERM")
_SLACK = 4096  # read past the cap before redacting, so that a key across the cut is still found


def exec_program(argv: list[str], directory: str, timeout_seconds: float = 60, stdin: str | None = None) -> dict[str, Any]:
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    try:
        proc = subprocess.Popen(
            argv, cwd=directory, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, killed whole at the timeout
        )
    except FileNotFoundError:
        raise FwError("not_found", "the program was not found", "give argv[0] as a program on PATH or as a path") from None
    except PermissionError:
        raise FwError("denied", "the program may not be run (permission denied)", "check the file's permissions") from None
    except NotADirectoryError:
        raise FwError("invalid", "the working folder is not a folder", "check the binding's directory") from None
    except ValueError:  # a NUL byte in an argument
        raise FwError("invalid", "argv holds a NUL character", "pass plain text arguments", field="argv") from None
    except OSError as exc:
        raise FwError("invalid", f"the program could not be started: {exc.strerror}", "check argv") from None
    out, err = _Reader(proc.stdout), _Reader(proc.stderr)
    _feed(proc, stdin)
    timed_out = False
    try:
        code: int | None = proc.wait(timeout_seconds)
    except subprocess.TimeoutExpired:
        code, timed_out = None, True
    finally:
        # Whatever is left of the program's process group goes with it: children it left
        # running in the background, or everything at the timeout or on Ctrl-C.
        _kill_group(proc)
    if code is None:
        code = proc.wait()
    out.join(), err.join()
    return {
        "exit_code": code,
        "stdout": out.text(),
        "stderr": err.text(),
        "timed_out": timed_out,
        "truncated": out.truncated or err.truncated,
    }


def _feed(proc: subprocess.Popen, stdin: str | None) -> None:
    def write() -> None:
        try:
            if stdin:
                proc.stdin.write(stdin.encode("utf-8"))  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            pass

    threading.Thread(target=write, daemon=True).start()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _Reader:
    """Drains one stream to its end (so the program never blocks on a full pipe), keeping
    only its start."""

    def __init__(self, stream: Any) -> None:
        self.kept = bytearray()
        self.seen = 0
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def _drain(self, stream: Any) -> None:
        limit = STREAM_CAP * 4 + _SLACK  # bytes: a character is at most four
        for chunk in iter(lambda: stream.read(65536), b""):
            self.seen += len(chunk)
            if len(self.kept) < limit:
                self.kept += chunk[: limit - len(self.kept)]
        stream.close()

    def join(self) -> None:
        self.thread.join()

    @property
    def truncated(self) -> bool:
        return len(self._decoded()) > STREAM_CAP or self.seen > len(self.kept)

    def _decoded(self) -> str:
        return self.kept.decode("utf-8", errors="replace")

    def text(self) -> str:
        # redact first, then cut: a key that straddles the cut is still a key
        return secrets.redact(self._decoded()[: STREAM_CAP + _SLACK])[:STREAM_CAP]
