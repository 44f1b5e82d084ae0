"""Programs fw runs on the host, each under its own supervisor (`_supervise.py`), so that a run
can end without leaving anything behind: not a child that called `setsid` or detached itself,
not after a timeout, not after fw is interrupted, terminated or killed.

    done = run_supervised(argv, cwd=folder, env=env, timeout=60, stdin=b"")
    done.exit_code, done.stdout, done.stderr, done.timed_out

Every output read has a deadline: the call returns by the timeout (plus a few seconds for the
supervisor to kill and report), whatever holds the program's pipes. `stop_all()` stops every
supervised program at once (Ctrl-C, SIGTERM); `exec` uses this, and so can anything else that
starts programs for a run (an external runner: its whole tree is stopped at its timeout).
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FwError

HELPER = str(Path(__file__).with_name("_supervise.py"))
GRACE_SECONDS = 5.0  # past the timeout: for the supervisor to kill the tree and report
DRAIN_SECONDS = 1.0  # once the supervisor has gone: for output still in the pipes
STOP_SECONDS = 5.0  # for a supervisor told to stop, before it is killed itself
STOP_CHECK_SECONDS = 0.5  # how often `stop_when` is asked
_CHUNK = 65536


def helper_command(*, timeout: float | None = None, status_fd: int | None = None, env_keys: str | None = None) -> list[str]:
    """The command line that starts a supervisor; the program's argv goes after it. With
    `env_keys`, the program gets only the variables that $env_keys (a JSON list) names."""
    command = [sys.executable, "-I", "-S", HELPER, "--parent", str(os.getpid())]
    if timeout is not None:
        command += ["--timeout", repr(float(timeout))]
    if status_fd is not None:
        command += ["--status", str(status_fd)]
    if env_keys is not None:
        command += ["--env-keys", env_keys]
    return [*command, "--"]


@dataclass
class Finished:
    exit_code: int | None  # negative: the signal that ended it; None: it was never seen to end
    stdout: bytes  # the start of each stream, up to `keep` bytes
    stderr: bytes
    stdout_bytes: int  # how many bytes the program wrote in all
    stderr_bytes: int
    timed_out: bool
    stopped: bool = False  # `stop_when` said so: it and everything it started were stopped


def run_supervised(
    argv: list[str], *, cwd: str, env: dict[str, str], timeout: float, stdin: bytes = b"", keep: int = 1 << 20,
    stop_when: Callable[[], bool] | None = None,
) -> Finished:
    """Run `argv` under a supervisor and return once it and everything it started are gone.
    `stop_when`, asked every STOP_CHECK_SECONDS while it runs, stops it early (its run was
    ended, say): then `Finished.stopped`. Starting errors are raised as `OSError`s (as
    `subprocess` raises them), a NUL in argv as `ValueError`; a program stopped by
    `stop_all()` raises `FwError("interrupted")`."""
    supervised = _Supervised(argv, cwd, env, timeout, keep)
    supervised.stop_when = stop_when
    return supervised.run(stdin)


ENV_KEYS_VAR = "FW_SUPERVISED_ENV"  # names the variables a long-lived program gets (see `start_supervised`)


def start_supervised(argv: list[str], *, cwd: str | None, env: dict[str, str]) -> subprocess.Popen:
    """Start a program that lives on (a plugin's process) under a supervisor of its own, its
    standard streams piped: it and everything it starts are killed when the supervisor is sent
    SIGTERM, and when fw goes. Started from the one spawning thread, as every supervisor is."""
    if _closing:
        raise _interrupted()
    command = helper_command(env_keys=ENV_KEYS_VAR) + list(argv)

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(
            command, cwd=cwd, env={**env, ENV_KEYS_VAR: json.dumps(sorted(env))}, start_new_session=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        with _live_guard:
            _kept.difference_update({p for p in _kept if p.poll() is not None})
            _kept.add(proc)
        return proc

    return _spawner.call(start)


def stop_all() -> None:
    """Stop every supervised program now (fw was interrupted or terminated), and start no more
    until `reopen()`."""
    global _closing
    _closing = True
    with _live_guard:
        live = list(_live)
    for supervised in live:
        supervised.interrupted = True
        supervised.signal_stop()
    with _live_guard:
        kept = [proc for proc in _kept if proc.poll() is None]
        _kept.clear()
    for proc in kept:  # long-lived programs (plugins' processes): their supervisors kill their trees
        proc.send_signal(signal.SIGTERM)
    for supervised in live:
        supervised.wait_stopped()
    for proc in kept:
        try:
            proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()


def reopen() -> None:
    """A new command in this process (tests run many) may start programs again."""
    global _closing
    _closing = False


_closing = False
_live: set[_Supervised] = set()
_kept: set[subprocess.Popen] = set()  # those of `start_supervised`, stopped by `stop_all` too
_live_guard = threading.Lock()


class _Spawner:
    """Starts every supervisor from one thread that lives as long as fw. PR_SET_PDEATHSIG
    fires when the thread that forked a process exits, not the process: a supervisor forked by
    a dispatcher's worker thread would be told fw is gone when that worker ends."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def call(self, job: Callable[[], Any]) -> Any:
        with self._guard:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="fw-process-starter", daemon=True)
                self._thread.start()
        box: dict[str, Any] = {}
        done = threading.Event()
        self._jobs.put((job, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _serve(self) -> None:
        while True:
            job, box, done = self._jobs.get()
            try:
                box["value"] = job()
            except BaseException as exc:  # handed to the caller
                box["error"] = exc
            done.set()


_spawner = _Spawner()


class _Supervised:
    def __init__(self, argv: list[str], cwd: str, env: dict[str, str], timeout: float, keep: int) -> None:
        self.argv, self.cwd, self.env, self.timeout, self.keep = argv, cwd, env, timeout, keep
        self.proc: subprocess.Popen | None = None
        self.program_pid: int | None = None
        self.interrupted = False
        self.out, self.err = bytearray(), bytearray()
        self.seen = {"out": 0, "err": 0}
        self.status = b""
        self.stop_when: Callable[[], bool] | None = None
        self.stopped = False

    def run(self, stdin: bytes) -> Finished:
        status_r = self._start()
        try:
            ended = self._pump(status_r, stdin)
            if not ended:
                self.signal_stop()
            self.wait_stopped()
        finally:
            self.signal_stop()  # an interruption (KeyboardInterrupt) on the way: stop it all
            self.wait_stopped()
            with _live_guard:
                _live.discard(self)
            os.close(status_r)
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):  # type: ignore[union-attr]
                stream.close()  # type: ignore[union-attr]
        return self._finished()

    # -- starting -----------------------------------------------------------------------------
    def _start(self) -> int:
        if _closing:
            raise _interrupted()
        status_r, status_w = os.pipe()

        def start() -> None:
            try:
                command = helper_command(timeout=self.timeout, status_fd=status_w) + list(self.argv)
                self.proc = subprocess.Popen(
                    command, cwd=self.cwd, env=self.env, pass_fds=(status_w,), start_new_session=True,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                )
                with _live_guard:
                    _live.add(self)
                    if _closing:  # stop_all() came while it was starting
                        self.interrupted = True
                        self.signal_stop()
            finally:
                os.close(status_w)

        try:
            _spawner.call(start)
        except BaseException:
            os.close(status_r)
            raise
        return status_r

    # -- while it runs ------------------------------------------------------------------------
    def _pump(self, status_r: int, stdin: bytes) -> bool:
        """Feed standard input and read the outputs and the status until all are closed, or
        until the deadline. Whether the supervisor was seen to end."""
        proc = self.proc
        assert proc is not None and proc.stdin and proc.stdout and proc.stderr
        sinks = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err", status_r: "status"}
        pending = memoryview(stdin)
        deadline = time.monotonic() + self.timeout + GRACE_SECONDS
        with selectors.DefaultSelector() as selector:
            for fd, name in sinks.items():
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ, name)
            os.set_blocking(proc.stdin.fileno(), False)
            selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "in")
            next_check = time.monotonic() + STOP_CHECK_SECONDS
            while any(key.data != "in" for key in selector.get_map().values()):
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    return self._ended
                if self.stop_when is not None and not self.stopped and now >= next_check:
                    next_check = now + STOP_CHECK_SECONDS
                    if self.stop_when():  # the supervisor kills the tree and goes; its streams then close
                        self.stopped = True
                        self.signal_stop()
                if self.stop_when is not None and not self.stopped:
                    left = min(left, max(0.0, next_check - now))
                for key, _ in selector.select(left):
                    if key.data == "in":
                        pending = self._feed(selector, key.fd, pending)
                    elif not self._read(key.fd, key.data):
                        selector.unregister(key.fd)
                        if key.data == "status":  # the supervisor has gone: what is left to read is there now
                            deadline = min(deadline, time.monotonic() + DRAIN_SECONDS)
        return self._ended

    def _feed(self, selector: selectors.BaseSelector, fd: int, pending: memoryview) -> memoryview:
        try:
            written = os.write(fd, pending[:_CHUNK]) if pending else 0
        except BlockingIOError:
            return pending
        except OSError:  # the program closed its input
            written = len(pending)
        pending = pending[written:]
        if not pending:
            selector.unregister(fd)
            self.proc.stdin.close()  # type: ignore[union-attr]
        return pending

    def _read(self, fd: int, name: str) -> bool:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return True
        if not data:
            return False
        if name == "status":
            self.status += data
            self._lines()
        else:
            kept = self.out if name == "out" else self.err
            self.seen[name] += len(data)
            kept += data[: max(0, self.keep - len(kept))]
        return True

    # -- stopping -----------------------------------------------------------------------------
    def signal_stop(self) -> None:
        """Tell the supervisor to kill the tree and go."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def wait_stopped(self) -> None:
        """Wait for the supervisor; one that does not go in time is killed, with the program's session."""
        if self.proc is None:
            return
        try:
            self.proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            if self.program_pid is not None:
                try:
                    os.killpg(self.program_pid, signal.SIGKILL)
                except OSError:
                    pass
            self.proc.wait()

    # -- the outcome ----------------------------------------------------------------------------
    def _lines(self) -> dict[str, list[str]]:
        lines = {}
        for line in self.status.decode("ascii", "replace").split("\n")[:-1]:  # whole lines only
            word, *rest = line.split() or [""]
            lines[word] = rest
        if "started" in lines and self.program_pid is None:
            self.program_pid = int(lines["started"][0])
        return lines

    @property
    def _ended(self) -> bool:
        return "ended" in self._lines()

    def _finished(self) -> Finished:
        lines = self._lines()
        if "failed" in lines:
            number = int(lines["failed"][0])
            raise OSError(number, os.strerror(number))
        if self.interrupted:
            raise _interrupted()
        code: int | None = None
        timed_out = False
        if "ended" in lines:
            code, timed_out = int(lines["ended"][0]), lines["ended"][1] == "1"
        else:  # the supervisor never reported: it was stopped at fw's deadline
            timed_out = True
        return Finished(code, bytes(self.out), bytes(self.err), self.seen["out"], self.seen["err"], timed_out and not self.stopped,
                        self.stopped)


def _interrupted() -> FwError:
    return FwError("interrupted", "the program was stopped: fw is stopping", "run it again once fw is running")
