"""A dispatch run by several processes (`fw dispatch --processes N`): how many by default, each
one's part of --concurrency, which principals each claims (`Share`), and the processes the first
one starts and waits for (`Helpers`). Light to import: the command line starts the others before
it loads the engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import zlib
from collections.abc import Callable
from typing import Any

from ..errors import FwError

MAX_CONCURRENCY = 100_000
RUNS_PER_PROCESS = 256  # by default, one process for every so many turns and tasks in flight (up to the cores)
MAX_PROCESSES = 64
HELPER_STOP_SECONDS = 30.0  # for the dispatcher processes told to stop to end their runs, before they are killed
KILLED_SECONDS = 5.0  # for a killed one's output to close


def check_concurrency(concurrency: Any) -> int:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise FwError("invalid", f"--concurrency is a whole number from 1 to {MAX_CONCURRENCY}", "e.g. --concurrency 256",
                      field="concurrency")
    return concurrency


def default_processes(concurrency: int) -> int:
    """How many processes share a dispatch's work by default: one for every RUNS_PER_PROCESS
    turns and tasks in flight, up to the cores this process may use (one event loop keeps a
    few hundred runs going; past that, starting and ending them wants more than one core)."""
    return max(1, min(usable_cores(), concurrency // RUNS_PER_PROCESS, MAX_PROCESSES))


def usable_cores() -> int:
    """The cores this process may run on, and no more than its control group's CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as limit:  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"
            quota, period = limit.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


def check_processes(processes: Any, concurrency: int) -> int:
    if isinstance(processes, bool) or not isinstance(processes, int) or not 1 <= processes <= min(MAX_PROCESSES, concurrency):
        raise FwError("invalid", f"--processes is a whole number from 1 to {min(MAX_PROCESSES, concurrency)} (at most --concurrency)",
                      f"e.g. --processes {default_processes(concurrency)}, the default for --concurrency {concurrency}", field="processes")
    return processes


def shares_of(concurrency: int, processes: int) -> list[int]:
    """Each process's part of `concurrency`: as even as whole numbers allow, adding up to it."""
    return [concurrency // processes + (1 if k < concurrency % processes else 0) for k in range(processes)]


class Helpers:
    """The other processes of a dispatch run by several: started from this process's main
    thread (each arms a death signal on it, so that killed, this process takes them with it),
    told to stop when it is, waited for at its end; each prints its summary as JSON."""

    def __init__(self, argvs: list[list[str]], concurrency: int = 0) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.concurrency = concurrency  # theirs, together
        self._results: list[dict[str, Any] | None] | None = None
        self._errors: dict[int, str] = {}
        self._gone_before_stop: set[int] | None = None  # those that had exited when they were told to stop
        try:
            for argv in argvs:
                # a session of their own: Ctrl-C reaches only this process, which stops them
                self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True))
        except BaseException as exc:
            self.stop()
            self.finish(HELPER_STOP_SECONDS)
            if isinstance(exc, OSError):
                raise FwError("unavailable", f"a dispatcher process could not be started: {exc.strerror}",
                              "run it in one process: --processes 1") from None
            raise

    def ended(self) -> list[int]:
        """The shares of the processes that have exited (the first helper has share 1)."""
        return [k + 1 for k, proc in enumerate(self.procs) if proc.poll() is not None]

    def alive(self) -> int:
        return sum(proc.poll() is None for proc in self.procs)

    def stop(self) -> None:
        """Tell each to stop, once: a second SIGTERM, come after its stop had ended its loop,
        would interrupt it as it prints its summary."""
        if self._gone_before_stop is not None:
            return
        self._gone_before_stop = {k for k, proc in enumerate(self.procs) if proc.poll() is not None}
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)  # each ends its runs, as this process does
                except OSError:
                    pass

    def finish(self, bound: float | None) -> list[dict[str, Any] | None]:
        """Wait for them all (up to `bound` seconds in all, then those left are killed): each
        one's summary, or None when it did not end with one (interrupted, failed, killed).
        Asked again, the same answer."""
        if self._results is not None:
            return self._results
        deadline = None if bound is None else time.monotonic() + bound
        results: list[dict[str, Any] | None] = []
        for k, proc in enumerate(self.procs, start=1):
            try:
                out, _ = proc.communicate(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    out, _ = proc.communicate(timeout=KILLED_SECONDS)
                except subprocess.TimeoutExpired:  # its pipe held by something it left: not waited for longer
                    out = b""
            try:
                doc = json.loads(out or b"null")
            except ValueError:
                doc = None
            summary = doc if proc.returncode == 0 and isinstance(doc, dict) and isinstance(doc.get("turns"), dict) else None
            results.append(summary)
            if summary is None:
                error = doc.get("error") if isinstance(doc, dict) and isinstance(doc.get("error"), dict) else {}
                why = f": {error.get('code')}: {error.get('message')}" if error else ""
                self._errors[k - 1] = (f"process {k + 1} of {len(self.procs) + 1} of this dispatch ended with exit code "
                                       f"{proc.returncode}{why}; the work of its share left was run by the first")
        self._results = results
        return results

    def interrupted(self) -> bool:
        """Whether any ended its runs as it stopped (exit 130), once `finish` has waited."""
        return any(proc.returncode == 130 for proc in self.procs)

    def notes(self) -> list[str]:
        """What to tell of those that ended without a summary before anyone told them to stop."""
        gone = self._gone_before_stop
        return [text for k, text in sorted(self._errors.items()) if gone is None or k in gone]


class Share:
    """Which principals one process of a dispatch run by several (`--processes`) claims work of:
    those whose name falls in its own share (by a hash of the name, so each principal's turns
    stay in one process), and the shares of the processes it has seen end (`ended`: the
    other processes' shares that are over), so that no work is left unclaimed. The lanes keep
    every principal's work in order and one at a time whichever process claims it."""

    def __init__(self, index: int, count: int, ended: Callable[[], list[int]] | None = None) -> None:
        self.count = count
        self.shares = {index}
        self._ended = ended

    def mine(self, principal: str) -> bool:
        return zlib.crc32(principal.encode("utf-8")) % self.count in self.shares

    def look(self) -> None:
        if self._ended is not None:
            self.shares.update(self._ended())
