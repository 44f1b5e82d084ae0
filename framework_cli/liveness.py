"""Which process is this, and is another one still alive: the one way fw tells a live owner
(of a claimed turn, of a run) from a dead one.

A process is named by its host (the machine's name, its boot and its process namespace, so two
containers of one name and kernel are told apart) and by `pid:start` (its start time, so a
reused pid is another process). On its own host a process is gone when no process of that pid
and start lives; elsewhere only a heartbeat can tell, and the caller decides how old is dead.
"""

from __future__ import annotations

import os
import socket


def _host() -> str:
    parts = [socket.gethostname()]
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            parts.append(boot.read().strip())
        parts.append(os.readlink("/proc/self/ns/pid"))
    except OSError:
        pass  # not Linux: the name alone, and the heartbeat decides
    return "/".join(parts)


HOST = _host()


def machine_of(host: str) -> str:
    """The machine's name in a host as `_host` makes it (what a person reads; the boot id and
    the namespace that follow tell containers of one name apart)."""
    return str(host or "").split("/", 1)[0]


def pid_of(process: str) -> str:
    """The pid of a process as `me` names it (`pid:start`)."""
    return str(process or "").split(":", 1)[0]


def process_id(pid: int) -> str | None:
    """A process as `pid:start`, where its start time is known, so a reused pid is another
    process; None when there is no such process, or it has died (a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # someone else's process, alive
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return str(pid)
    return None if fields[0] in ("Z", "X") else f"{pid}:{fields[19]}"


_me: dict[int, str] = {}  # pid -> this process as `pid:start` (a forked child has a pid of its own)


def me() -> str:
    """This process, as `pid:start` (read once: a process's start time never changes)."""
    pid = os.getpid()
    known = _me.get(pid)
    if known is None:
        known = _me[pid] = process_id(pid) or str(pid)
    return known


def gone_here(process: str) -> bool:
    """Whether a process of this host (`pid:start`, or a bare pid) has gone."""
    pid = int(process.split(":", 1)[0])
    return process_id(pid) != process if ":" in process else process_id(pid) is None


def die_with(parent: int) -> bool:
    """Have this process sent SIGTERM when `parent` (the process that started it, from a thread
    that lives as long as it does) goes, however it goes (Linux; elsewhere nothing is armed).
    False when the parent has gone already."""
    import signal

    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    return os.getppid() == parent
