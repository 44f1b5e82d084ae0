"""The supervisor of one program: a small process fw starts between itself and the program, so
that nothing the program starts can outlive it.

    python -I -S _supervise.py --parent PID [--timeout S] [--status FD] [--env-keys VAR] -- PROGRAM ARG...

It is run by path with the standard library only (no site, no fw import), so it starts fast.
Linux gives it what it needs:
- PR_SET_CHILD_SUBREAPER: every process the program leaves behind, one that called `setsid`
  or detached itself included, becomes this process's child instead of init's, so it can still
  be found and killed;
- PR_SET_PDEATHSIG: when fw goes (killed included), this process gets SIGTERM. fw starts it
  from one thread that lives as long as fw does, because the signal follows the thread that
  forked, not the process.

The program runs in a session of its own. When it exits, when the timeout passes, or on
SIGTERM, SIGINT or SIGHUP (fw stopping, fw gone), every descendant is killed and reaped before
this process exits: nothing it started is left. This process holds the program's standard
streams open until then, so an end of file on them means the whole tree is gone.

The status descriptor, when given, gets one line `started PID`, or `failed ERRNO` when the
program could not be started, then `ended CODE TIMED_OUT STOPPED` (CODE negative for a signal).
"""

import ctypes
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
KILL_SECONDS = 10.0  # a bound on killing the tree (a process stuck in the kernel cannot be reaped)


def main(argv):
    opts, program = _parse(argv)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    status = _Status(opts.get("status"))
    if os.getppid() != int(opts["parent"]):
        return 1  # fw went before the death signal was armed: start nothing
    stopped = []
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for number in STOP_SIGNALS:
        signal.signal(number, lambda *_: stopped.append(True))
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the select below
    env = _environment(opts.get("env-keys"))
    try:
        pid = os.posix_spawnp(program[0], program, env, setsid=True, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except OSError as exc:
        status.write(f"failed {exc.errno or 0}")
        sys.stderr.write(f"cannot start {program[0]}: {exc.strerror}\n")
        return 127
    status.write(f"started {pid}")
    timeout = float(opts["timeout"]) if "timeout" in opts else None
    code, timed_out = _wait(pid, timeout, stopped, wake_r)
    _kill_tree(pid)
    status.write(f"ended {code if code is not None else -signal.SIGKILL} {int(timed_out)} {int(bool(stopped))}")
    if code is None:
        return 128 + signal.SIGKILL
    return code if code >= 0 else 128 - code


def _parse(argv):
    opts = {}
    words = iter(argv)
    for word in words:
        if word == "--":
            break
        opts[word.lstrip("-")] = next(words)
    program = list(words)
    if not program or "parent" not in opts:
        sys.exit("usage: _supervise.py --parent PID [--timeout S] [--status FD] [--env-keys VAR] -- PROGRAM ARG...")
    return opts, program


def _environment(keys_var):
    """The program's environment: this process's, or only the variables $keys_var names (a
    JSON list), so that no value ever has to be on a command line."""
    if not keys_var:
        return dict(os.environ)
    import json

    keys = json.loads(os.environ[keys_var])
    return {k: os.environ[k] for k in keys if k in os.environ}


class _Status:
    def __init__(self, fd):
        self.fd = int(fd) if fd is not None else None
        if self.fd is not None:
            os.set_inheritable(self.fd, False)  # the program has no business with it

    def write(self, line):
        if self.fd is None:
            return
        try:
            os.write(self.fd, (line + "\n").encode())
        except OSError:
            pass  # fw is gone: nobody reads it


def _wait(pid, timeout, stopped, wake_r):
    """Reap children until the program exits (its exit code), the timeout passes or a stop
    signal comes: (code or None, timed_out)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        code = _reap(pid)
        if code is not None:
            return code, False
        if stopped:
            return None, False
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None, True
        ready, _, _ = select.select([wake_r], [], [], left)
        if ready:
            os.read(wake_r, 4096)


def _reap(pid):
    """Reap every child that has exited (orphans come here too); the program's exit code if
    it was one of them."""
    code = None
    while True:
        try:
            child, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return code
        if child == 0:
            return code
        if child == pid:
            code = os.waitstatus_to_exitcode(status)


def _kill_tree(pid):
    """Kill and reap every descendant, until none is left (a killed parent's children come
    to this process, and are found on the next pass)."""
    try:
        os.killpg(pid, signal.SIGKILL)  # the program's session, at once
    except OSError:
        pass
    me = os.getpid()
    give_up = time.monotonic() + KILL_SECONDS
    while time.monotonic() < give_up:
        _reap(None)
        left = _descendants(me)
        if not left:
            return
        for child, state in left:
            if state != b"Z":
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.002)


def _descendants(root):
    """(pid, state) of every process below `root`, from /proc."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append((int(name), fields[0]))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child[0])
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
