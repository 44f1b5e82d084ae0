"""The sandbox: bubblewrap (`bwrap`, Debian package `bubblewrap`) runs a program confined: one
command line built in one function, probed once per run, never bypassed.

    problem = probe()                       # None: the sandbox works here; else why not
    box = Box(workspace, network=False, hidden=hidden_paths(home, [workspace]))
    argv = confine(program_argv, box)       # the command line that runs it in the box

In the box: the system (`/usr`, `/bin`, `/lib*`, `/etc` without its secret files) read-only;
the workspace read-write at its own path, and the program's working folder; a private `/tmp`,
`/proc` and `/dev`; nothing else of this machine (no home folder, no `secrets/` or `state.db`
of the framework home, which is hidden under an empty tmpfs when a bound folder holds it); no
network unless allowed; its own PID, IPC, UTS (and, unprivileged, user) namespaces; no
capabilities; a session of its own; killed when its parent goes. fw never runs a command
meant for the box without it: a sandbox that does not work is `unavailable`.

The workspace of a run (of `exec` and the sandbox tools only) is its binding's `directory`
when one is set, else `<home>/workspaces/<principal>/` (managed runs) or
`<home>/workspaces/<agent>/` (explicit runs), created on first use.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from ..domain.runs import WORKSPACES, workspace_of
from ..errors import FwError
from ..home.store import Home

PROGRAM = "bwrap"
NO_SANDBOX = "none"  # execution.sandbox: the old behaviour, chosen explicitly
REASON = "sandbox_unavailable"
PROBE_SECONDS = 10.0
# The system, read-only (a symlink, as /bin is on merged-/usr systems, is made again as one).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Files of /etc that hold secrets; the box sees them empty (a folder: an empty tmpfs).
ETC_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh/ssh_host_*_key",
               "/etc/ssl/private", "/etc/sudoers", "/etc/sudoers.d", "/etc/NetworkManager/system-connections",
               "/etc/credstore", "/etc/credstore.encrypted", "/etc/machine-id")
INSTALL_HINT = "install bubblewrap (Debian and Ubuntu: `apt-get install bubblewrap`) so that `bwrap` is on PATH"


@dataclass(frozen=True)
class Box:
    """What one confined program may see besides the system."""

    workspace: str | None = None  # bound read-write at its own path; the working folder
    network: bool = False
    hidden: tuple[str, ...] = ()  # paths in the box covered by an empty tmpfs (the home, when a bound folder holds it)
    read_only: tuple[str, ...] = ()  # more folders bound read-only at their own paths (Python, for a plugin)


def find_bwrap() -> str | None:
    """The `bwrap` program on PATH, or None."""
    return shutil.which(PROGRAM)


def bwrap_argv(bwrap: str, box: Box) -> list[str]:
    """The whole `bwrap` command line for `box`, up to and with the `--` that comes before the
    program. The order matters: a later mount covers an earlier one."""
    argv = [bwrap]
    for path in SYSTEM:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in _etc_secrets():
        argv += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", os.devnull, path]
    argv += ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    for path in box.read_only:
        argv += ["--ro-bind", path, path]
    if box.network:
        argv += _resolver_binds()
    # A hidden home that holds the workspace is covered before the workspace is bound into it;
    # one that the workspace holds, after.
    holds = [p for p in box.hidden if box.workspace is not None and is_within(os.path.abspath(box.workspace), p)]
    for path in holds:
        argv += ["--tmpfs", path]
    if box.workspace is not None:
        argv += ["--bind", box.workspace, box.workspace]
    for path in box.hidden:
        if path not in holds:
            argv += ["--tmpfs", path]
    argv += ["--unshare-all", *(["--share-net"] if box.network else []), "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    folder = box.workspace or "/tmp"
    argv += ["--setenv", "HOME", folder, "--chdir", folder, "--"]
    return argv


def _etc_secrets() -> list[str]:
    found: list[str] = []
    for pattern in ETC_SECRETS:
        found += sorted(glob.glob(pattern)) if "*" in pattern else [pattern] if os.path.lexists(pattern) else []
    return [path for path in found if not os.path.islink(path)]


def _resolver_binds() -> list[str]:
    """With the network allowed, the folder /etc/resolv.conf points into (systemd-resolved's,
    under /run), so that names resolve in the box too."""
    target = os.path.realpath("/etc/resolv.conf")
    if not os.path.islink("/etc/resolv.conf") or target.startswith(("/etc/", "/usr/")):
        return []
    folder = os.path.dirname(target)
    return ["--ro-bind-try", folder, folder]


def confine(argv: list[str], box: Box) -> list[str]:
    """The command line that runs `argv` in `box`; `unavailable` when bwrap is not there."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise unavailable(f"{PROGRAM} is not installed or not on PATH")
    return bwrap_argv(bwrap, box) + list(argv)


def probe() -> str | None:
    """Whether the sandbox works here: None when a trivial program runs in a box, else why not
    (in words). A run asks once, when it starts."""
    bwrap = find_bwrap()
    if bwrap is None:
        return f"{PROGRAM} is not installed or not on PATH"
    # `true` as the box's PID 1: bwrap's own init there, once its parent has gone, would be left
    # for the system's init to reap (a command runs under a supervisor, which reaps it).
    argv = bwrap_argv(bwrap, Box())[:-1] + ["--as-pid-1", "--", "true"]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=PROBE_SECONDS, env=_probe_env())
    except subprocess.TimeoutExpired:
        return f"{PROGRAM} did not finish a trivial program in {PROBE_SECONDS:g} s"
    except OSError as exc:
        return f"{PROGRAM} could not be started: {exc.strerror or type(exc).__name__}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{PROGRAM} failed ({said[-1][:200] if said else f'exit code {done.returncode}'})"
    return None


def _probe_env() -> dict[str, str]:
    return {key: os.environ[key] for key in ("PATH", "LANG") if key in os.environ}


def unavailable(why: str) -> FwError:
    return FwError("unavailable", f"the sandbox is not available: {why}", INSTALL_HINT, reason=REASON)


# -- the workspace ---------------------------------------------------------------------------
def open_workspace(home: Home, run: dict[str, Any]) -> str:
    """The run's workspace, ready for use: one of the home's own (`workspaces/NAME`) is created
    the first time; a binding's folder must exist. Never the home itself, nor a folder inside
    it other than `workspaces/`: `invalid`."""
    workspace = workspace_of(home, run)
    root = os.path.realpath(home.root)
    own = os.path.join(root, WORKSPACES)
    real = os.path.realpath(workspace)
    if is_within(real, root) and not is_within(real, own):
        raise FwError("invalid", "the run's workspace (its binding's directory) is the framework home or a folder inside it",
                      "give the binding a folder outside the home, or none (then <home>/workspaces/PRINCIPAL is used): "
                      "`fw binding set PRINCIPAL --agent AGENT --directory DIR`", field="directory")
    if os.path.isdir(real):
        return workspace
    if is_within(real, own) and not os.path.lexists(workspace):
        with home.locked():
            home.make_dir(os.path.relpath(real, root))
        return workspace
    what = "is not a folder" if os.path.exists(workspace) else "is missing"
    raise FwError("not_found", f"the run's working folder (its binding's directory) {what}",
                  "create the folder (`fw binding list` shows it), or give the binding another with "
                  "`fw binding set PRINCIPAL --agent AGENT --directory DIR`", field="directory")


def box_for(home: Home, workspace: str, network: bool) -> Box:
    """The box of a run's command: its workspace, the network if allowed, the home hidden."""
    return Box(workspace, network=network, hidden=hidden_paths(home, [workspace]))


def is_within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies below it (both real, absolute paths)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def hidden_paths(home: Home, bound: list[str]) -> tuple[str, ...]:
    """Where the home shows in a box whose own bound folders (workspace, Python) are `bound`,
    the system's besides: there it is covered by an empty tmpfs. A home that no bound folder
    holds is not in the box at all."""
    root = os.path.realpath(home.root)
    hidden = []
    for folder in [*(f for f in SYSTEM if not os.path.islink(f)), *bound]:
        real = os.path.realpath(folder)
        if is_within(root, real):
            hidden.append(os.path.normpath(os.path.join(os.path.abspath(folder), os.path.relpath(root, real))))
    return tuple(dict.fromkeys(hidden))
