"""Nothing lost: parallel fw processes all land, and a killed writer leaves whole files."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from conftest import fw_bin, fwj, make_basics


def run_parallel(home, commands):
    env = dict(os.environ, FW_HOME=str(home))
    procs = [subprocess.Popen([fw_bin(), *cmd, "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in commands]
    results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    for code, out, err in results:
        assert code == 0, (out, err)
    return results


def test_six_parallel_creators_all_land(home):
    make_basics(with_key=False)
    run_parallel(home, [["agent", "create", f"par{i}", "--model", "m1"] for i in range(6)])
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


WRITER = r"""
import sys
from framework_cli.store import Home
from framework_cli.resources import resource_write
home = Home.open(sys.argv[1])
i = 0
print("ready", flush=True)
while True:
    body = ("A" if i % 2 else "B") * 400_000 + "\n"
    resource_write(home, "prompt", "big", {"body": body, "description": f"round {i}"})
    i += 1
"""


def test_sigkill_mid_write_leaves_the_old_or_the_new_file(home, tmp_path):
    fwj("resource", "write", "prompt", "big", "--create", "--data", json.dumps({"body": "A" * 400_000 + "\n"}))
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rng = random.Random(7)
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, str(script), str(home)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        doc = fwj("resource", "read", "prompt", "big")
        assert doc["body"] in ("A" * 400_000 + "\n", "B" * 400_000 + "\n")
        assert [i["name"] for i in fwj("resource", "list", "prompt")["items"]] == ["big", "default"]
        assert fwj("home", "check")["ok"] is True
        leftovers = [p.name for p in (home / "prompts/default").iterdir() if not p.name.startswith(".")]
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
            body = (home / "prompts/default/p.md").read_text().split("---\n", 2)[2]
            assert len(set(body)) == 1 and len(body) == 200_000
        future.result()
