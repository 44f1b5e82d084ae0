"""Issue 21, item 26: every file fw writes ends with a newline, and one broken YAML file gives
the same error text whether fw reads it or writes it."""

from __future__ import annotations

import json

import pytest
from conftest import CANARY, fw, fwj, make_basics


def test_every_file_fw_writes_ends_with_a_newline(home):
    make_basics()
    fwj("resource", "write", "prompt", "p1", "--create", "--data", json.dumps({"body": "Be brief."}))
    fwj("resource", "write", "prompt", "p2", "--create", "--data", json.dumps({"description": "d", "body": "Two\nlines"}))
    fwj("resource", "write", "skill", "s1", "--create", "--data", json.dumps({"description": "d", "body": "Do it."}))
    fwj("resource", "write", "prompt", "p2", "--data", json.dumps({"description": "changed"}))
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")
    run = fwj("run", "start", "--agent", "a1")["run_id"]
    fw("tool", "call", "--run", run, "framework_resource_list", "--args", '{"kind": "agent"}')
    written = [p for p in home.rglob("*") if p.is_file() and not p.name.startswith(".")
               and p.name not in ("state.db", "state.db-wal", "state.db-shm") and ".index" not in p.parts]
    assert len(written) > 10
    for path in written:
        text = path.read_text()
        assert not text or text.endswith("\n"), f"{path.relative_to(home)} does not end with a newline"
    assert fwj("resource", "read", "prompt", "p1")["body"] == "Be brief.\n"


def test_a_body_given_without_its_newline_is_no_change_against_one_with_it(home):
    fwj("resource", "write", "prompt", "p1", "--create", "--data", json.dumps({"body": "Be brief.\n"}))
    assert fwj("resource", "write", "prompt", "p1", "--data", json.dumps({"body": "Be brief."}))["changed"] is False


@pytest.mark.parametrize("broken", ["model: m1\ndescription: [oops\n", "model: m1\n  bad: indent\n", "model: m1\nmodel: m2\n"])
def test_a_broken_file_gives_the_same_error_on_read_and_on_write(home, broken):
    make_basics()
    (home / "agents/default/a1.yaml").write_text(broken)
    read = fwj("resource", "read", "agent", "a1", code=4)["error"]
    write = fwj("resource", "write", "agent", "a1", "--data", '{"description": "x"}', code=4)["error"]
    assert read["code"] == write["code"] == "corrupt"
    assert read["message"] == write["message"]
    assert (home / "agents/default/a1.yaml").read_text() == broken
    assert CANARY not in read["message"]
