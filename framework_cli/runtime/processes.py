"""The processes this process started, found from the process table, so that a server that
stops (`fw bot serve` on Ctrl-C) can stop whatever its runs left behind: MCP servers of runs
that were interrupted, programs of `exec` calls still waiting, and their process groups."""

from __future__ import annotations

import os
import signal
import subprocess
import time

GRACE_SECONDS = 1.0  # between SIGTERM and SIGKILL


def _parents() -> dict[int, int]:
    """pid -> ppid of every process, with zombies left out (they have stopped already)."""
    table: dict[int, int] = {}
    if os.path.isdir("/proc"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                table[int(entry)] = int(fields[1])
        return table
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,stat="], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and not parts[2].startswith("Z"):
            table[int(parts[0])] = int(parts[1])
    return table


def descendants(pid: int | None = None) -> list[int]:
    """Every living process below `pid` (this process by default), nearest first."""
    root = os.getpid() if pid is None else pid
    table = _parents()
    children: dict[int, list[int]] = {}
    for child, parent in table.items():
        children.setdefault(parent, []).append(child)
    found, queue = [], list(children.get(root, []))
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(children.get(current, []))
    return found


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            if os.getpgid(pid) == pid:  # a group leader (exec's programs are): its whole group
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_descendants() -> int:
    """Stop every process below this one: SIGTERM, then SIGKILL for what is left after a
    short grace. How many there were."""
    pids = descendants()
    if not pids:
        return 0
    _signal(pids, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline and set(descendants()) & set(pids):
        time.sleep(0.05)
    _signal([pid for pid in descendants() if pid in pids], signal.SIGKILL)
    return len(pids)
