"""A full disk (CONTRACT section 11, issue 27 item 9), on a real full file system: a small tmpfs
mounted for the test. Every command that must write says `unavailable` with `reason:
disk_full` (exit 7), and leaves the home and state.db as they were, with no temporary file."""

from __future__ import annotations

import errno
import json
import os
import subprocess

import pytest
from conftest import fw, fwj, snapshot


@pytest.fixture
def full_home(tmp_path, monkeypatch):
    """A home on a 4 MiB tmpfs, with a provider, a model, an agent, a user and a state.db;
    then the rest of the file system filled up."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a small file system cannot be mounted here (mount says: {mounted.stderr.strip() or 'not permitted'}); "
                    "this test needs root, or CAP_SYS_ADMIN")
    try:
        root = disk / "home"
        monkeypatch.setenv("FW_HOME", str(root))
        assert fw("home", "init").exit_code == 0
        fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "https://x.test/v1"}),
            "--api-key-stdin", input="sk-full-disk-0123456789")
        fwj("resource", "write", "model", "m1", "--create", "--data", json.dumps({"provider": "p1", "model_id": "m"}))
        fwj("agent", "create", "a1", "--model", "m1")
        fwj("principal", "create", "alice", "--kind", "user")
        fwj("session", "create", "s0", "--member", "alice")
        fwj("resource", "list", "agent")  # the index, written while there is room
        _fill(disk / "filler")
        yield root
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _fill(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    block = b"\0" * 65536
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    return
                block = block[: len(block) // 2]
    finally:
        os.close(fd)


def temp_files(home):
    return [str(p) for p in home.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.parametrize("args", [
    ["resource", "write", "provider", "p2", "--create", "--data",
     '{"base_url": "https://y.test/v1", "api_key_env": "K", "description": "' + "d" * 4000 + '"}'],
    ["agent", "edit", "a1", "--description", "x" * 4000],
    ["agent", "create", "a2", "--model", "m1", "--description", "y" * 4000],
    ["principal", "create", "bob", "--kind", "user"],
    ["resource", "write", "provider", "p1", "--api-key-stdin"],
    ["session", "create", "s1", "--member", "alice", "--title", "z" * 4000],
    ["message", "post", "s0", "--as", "alice", "w" * 20000],
])
def test_a_write_on_a_full_disk_is_disk_full_and_changes_nothing(full_home, args):
    before = snapshot(full_home)
    for json_mode in (True, False):
        r = fw(*args, *(["--json"] if json_mode else []), input="sk-another-key-0123456789" if "--api-key-stdin" in args else None)
        assert r.exit_code == 7, r
        if json_mode:
            error = r.json["error"]
            assert (error["code"], error["reason"]) == ("unavailable", "disk_full"), error
            assert "free some space" in error["hint"]
        else:
            assert "full" in r.stderr and "Traceback" not in r.stderr
            assert "move state.db aside" not in r.output
        assert snapshot(full_home) == before
        assert temp_files(full_home) == []


def test_reading_on_a_full_disk_works_or_says_disk_full_and_leaves_no_temp_file(full_home):
    before = snapshot(full_home)
    listed = fwj("resource", "list", "agent")
    assert [a["name"] for a in listed["items"]] == ["a1"]
    check = fwj("home", "check")
    assert check["ok"] is True and [w["code"] for w in check["warnings"]] in ([], ["disk_full"]), check
    # state.db cannot even be opened without room for its shared-memory file: said so, nothing damaged
    r = fw("message", "list", "s0", "--json")
    assert r.exit_code == 7 and r.json["error"]["reason"] == "disk_full", r
    assert snapshot(full_home) == before
    assert temp_files(full_home) == []
