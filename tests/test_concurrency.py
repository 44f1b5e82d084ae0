"""Nothing lost: parallel fw processes all land, and a killed writer leaves whole files."""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import fw_bin, fwj, make_basics


def run_parallel(home, commands):
    env = dict(os.environ, FW_HOME=str(home))
    procs = [subprocess.Popen([fw_bin(), *cmd, "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in commands]
    results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    for code, out, err in results:
        assert code == 0, (out, err)
    return [json.loads(out) for _, out, _ in results]


def test_six_parallel_creators_all_land(home):
    make_basics(with_key=False)
    docs = run_parallel(home, [["agent", "create", f"par{i}", "--model", "m1"] for i in range(6)])
    assert [d["name"] for d in docs] == [f"par{i}" for i in range(6)]
    names = {i["name"] for i in fwj("agent", "list")["items"]}
    assert {f"par{i}" for i in range(6)} <= names


def test_six_parallel_patches_of_one_file_lose_no_update(home):
    fwj("resource", "write", "mcp", "shared", "--create", "--data", '{"transport": "stdio", "command": "srv"}')
    run_parallel(home, [["resource", "write", "mcp", "shared", "--data", json.dumps({"env": {f"K{i}": f"value-{i}-abcdef"}})] for i in range(6)])
    env = fwj("resource", "read", "mcp", "shared")["data"]["env"]
    assert sorted(env) == [f"K{i}" for i in range(6)]


def test_parallel_mounts_of_one_agent_all_land(home):
    make_basics(with_key=False)
    groups = ["resource_management", "task_collaboration", "local_execution"]
    run_parallel(home, [["agent", "edit", "a1", "--add-builtin-tool", g] for g in groups] + [["resource", "write", "agent", "a1", "--data", '{"description": "d"}']])
    data = fwj("agent", "show", "a1")["data"]
    assert sorted(data["builtin_tools"]) == sorted(groups) and data["description"] == "d"


# A writer that stops in the middle of its one write, where the test says, and says so: the
# test hook slows fw's own file writes down (4 KiB at a time, flushed) and parks the process
# at the chosen point, so the kill lands there every time, not by luck.
WRITER = r"""
import os
import sys
import time

from framework_cli.domain.resources import resource_write
from framework_cli.home.store import Home

home_path, pause, body = sys.argv[1], sys.argv[2], sys.argv[3]
real_write, real_replace = os.write, os.replace
CHUNK = 4096


def park(what, path):
    print(what, path, flush=True)
    time.sleep(600)


def slow_write(fd, data):
    path = os.readlink(f"/proc/self/fd/{fd}")
    if ".big.md." not in path:
        return real_write(fd, data)
    data = bytes(data)
    for start in range(0, len(data), CHUNK):
        if pause == "mid_write" and start <= len(data) // 2 < start + CHUNK:
            park("paused", path)
        real_write(fd, data[start:start + CHUNK])
    return len(data)


def paused_replace(src, dst, *args, **kwargs):
    if pause == "before_replace" and str(dst).endswith("big.md"):
        park("paused", src)
    real_replace(src, dst, *args, **kwargs)
    if pause == "after_replace" and str(dst).endswith("big.md"):
        park("paused", dst)


os.write, os.replace = slow_write, paused_replace
resource_write(Home.open(home_path), "prompt", "big", {"body": body * 400_000 + "\n"})
print("finished", flush=True)
"""

OLD, NEW = "A" * 400_000 + "\n", "B" * 400_000 + "\n"


@pytest.mark.parametrize("pause", ["mid_write", "before_replace", "after_replace"])
def test_sigkill_mid_write_leaves_the_old_or_the_new_file(home, tmp_path, pause):
    fwj("resource", "write", "prompt", "big", "--create", "--data", json.dumps({"body": OLD}))
    target = home / "prompts/default/big.md"
    old_bytes = target.read_bytes()
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(home), pause, "B"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split(" ", 1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert line[0] == "paused", line
    where = Path(line[1].strip())
    body = fwj("resource", "read", "prompt", "big")["body"]
    temps = sorted(p.name for p in target.parent.glob(".big.md.*.tmp"))
    if pause == "after_replace":
        assert body == NEW
        assert where == target and temps == []
    else:
        # killed while the write was under way: the target is untouched, wholly the old file
        assert body == OLD
        assert target.read_bytes() == old_bytes
        # and the write really was under way, in a temp file beside the target
        assert where.parent == target.parent and where.name in temps, (where, temps)
        written = where.read_bytes()
        if pause == "mid_write":
            assert 0 < len(written) < len(old_bytes)
            assert written.startswith(b"---\n---\nBBBB") and written.endswith(b"B")
        else:
            assert written == old_bytes.replace(b"A", b"B")
    # the leftover temp file is fw's own: never a resource, never a problem
    assert [i["name"] for i in fwj("resource", "list", "prompt")["items"]] == ["big", "default"]
    assert fwj("home", "check")["ok"] is True
    leftovers = [p.name for p in target.parent.iterdir() if not p.name.startswith(".")]
    assert sorted(leftovers) == ["big.md", "default.md"]
    # the lock died with the writer: the next write goes through
    fwj("resource", "write", "prompt", "big", "--data", '{"body": "done\\n"}')
    assert fwj("resource", "read", "prompt", "big")["body"] == "done\n"


def test_readers_never_see_a_half_written_file(home):
    fwj("resource", "write", "prompt", "p", "--create", "--data", json.dumps({"body": "x" * 200_000}))
    stop = time.monotonic() + 2.0

    def write_loop():
        i = 0
        while time.monotonic() < stop:
            subprocess.run([fw_bin(), "resource", "write", "prompt", "p", "--data", "-"], input=json.dumps({"body": str(i % 10) * 200_000}),
                           env=dict(os.environ, FW_HOME=str(home)), capture_output=True, check=True, text=True)
            i += 1

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(write_loop)
        while not future.done():
            body = (home / "prompts/default/p.md").read_text().split("---\n", 2)[2].removesuffix("\n")  # fw ends the file with one
            assert len(set(body)) == 1 and len(body) == 200_000
        future.result()


def test_runs_ending_while_prunes_run_are_ended_or_gone_never_brought_back(home):
    """A run's record has a lock of its own: `fw run end` and `fw run prune` of the same runs
    at once, in many processes, leave every run ended or pruned, and no pruned record is
    written back by an end that read it first."""
    make_basics(with_key=False)
    runs = [fwj("run", "start", "--agent", "a1", "--lease", "1")["run_id"] for _ in range(16)]
    time.sleep(1.2)  # every lease has run out: prune may take any of them, an end may still end it
    env = dict(os.environ, FW_HOME=str(home))
    commands = [["run", "end", r] for r in runs] + [["run", "prune"] for _ in range(4)]
    procs = [subprocess.Popen([fw_bin(), *c, "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in commands]
    results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]
    ends, prunes = results[:len(runs)], results[len(runs):]
    for code, out, err in ends:  # ended, or already pruned
        assert code == 0 and json.loads(out)["status"] == "ended" or code == 3 and json.loads(out)["error"]["code"] == "not_found", (out, err)
    pruned = {r for code, out, err in prunes for r in json.loads(out)["pruned"]}
    assert all(code == 0 for code, _, _ in prunes)
    left = {p.stem for p in (home / "runs").glob("run-*.json")}
    assert not left & pruned, f"pruned records written back: {sorted(left & pruned)}"
    assert {r["status"] for r in fwj("run", "list")["runs"]} <= {"ended"}
    assert left | pruned == set(runs)


def test_runs_start_and_end_while_another_process_holds_the_homes_lock(home):
    """Run records are not configuration: a run starts and ends while a write of the home's
    files (another fw process, here a held `.lock`) is in progress."""
    import fcntl

    make_basics(with_key=False)
    fd = os.open(home / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        env = dict(os.environ, FW_HOME=str(home))
        started = subprocess.run([fw_bin(), "run", "start", "--agent", "a1", "--quiet"], env=env, capture_output=True,
                                 text=True, timeout=60)
        assert started.returncode == 0, started.stderr
        ended = subprocess.run([fw_bin(), "run", "end", started.stdout.strip(), "--json"], env=env, capture_output=True,
                               text=True, timeout=60)
        assert ended.returncode == 0 and json.loads(ended.stdout)["status"] == "ended", ended.stderr
    finally:
        os.close(fd)
