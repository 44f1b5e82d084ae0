"""Issue 21, item 16: --dry-run on every write prints the change as a unified diff of the
file and writes nothing (the home stays byte for byte as it was; state.db too)."""

from __future__ import annotations

import json

import pytest
from conftest import CANARY, fw, fwj, make_basics, snapshot


def test_resource_write_dry_run_prints_a_diff_and_writes_nothing(home):
    make_basics()
    before = snapshot(home)
    r = fw("resource", "write", "agent", "a1", "--data", '{"description": "tidy"}', "--dry-run")
    assert r.exit_code == 0, r
    assert "--- a/agents/default/a1.yaml\n+++ b/agents/default/a1.yaml\n" in r.stdout
    assert "+description: tidy\n" in r.stdout and "nothing was written" in r.stdout
    assert snapshot(home) == before


def test_a_dry_create_diffs_against_nothing_and_json_carries_the_diff(home):
    make_basics()
    before = snapshot(home)
    doc = fwj("resource", "write", "model", "m2", "--create", "--data", '{"provider": "p1", "model_id": "x"}', "--dry-run")
    assert doc["dry_run"] is True and doc["name"] == "m2"
    assert doc["diff"].startswith("--- /dev/null\n+++ b/models/default/m2.yaml\n")
    assert doc["files"] == [{"path": "models/default/m2.yaml", "action": "write"}]
    assert snapshot(home) == before
    assert fw("resource", "read", "model", "m2").exit_code == 3


def test_a_dry_run_of_a_key_names_the_secret_file_never_the_key(home):
    before = snapshot(home)
    r = fw("resource", "write", "provider", "p9", "--create", "--data", '{"base_url": "https://x.test/v1"}',
           "--api-key-stdin", "--dry-run", input=CANARY)
    assert r.exit_code == 0 and "secrets/provider/p9.json: would be written" in r.stdout, r
    assert snapshot(home) == before


@pytest.mark.parametrize("args", [
    ["agent", "create", "a2", "--model", "m1"],
    ["agent", "edit", "a1", "--add-builtin-tool", "resource_management"],
    ["binding", "set", "p1", "--agent", "a1"],
    ["category", "create", "agent", "research"],
    ["bot", "add", "desk", "--adapter", "local", "--principal", "p1"],
])
def test_every_write_takes_dry_run(home, args):
    make_basics()
    fwj("principal", "create", "p1", "--kind", "agent")
    before = snapshot(home)
    doc = fwj(*args, "--dry-run")
    assert doc["dry_run"] is True and doc["diff"], doc
    assert snapshot(home) == before
    assert fwj("bot", "list")["bots"] == []


def test_bot_set_dry_run(home):
    make_basics()
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")
    before = snapshot(home)
    r = fw("bot", "set", "desk", "--unsupported-api", "send_message", "--offline", "--dry-run")
    assert r.exit_code == 0 and "+unsupported_apis:\n+  - send_message\n" in r.stdout, r
    assert snapshot(home) == before
    assert fwj("bot", "show", "desk")["online"] is True


def test_a_dry_run_that_changes_nothing_says_so(home):
    make_basics()
    r = fw("agent", "edit", "a1", "--model", "m1", "--dry-run")
    assert r.exit_code == 0 and "No change" in r.stdout, r


def test_a_refused_dry_run_is_refused_as_the_write_would_be(home):
    make_basics()
    before = snapshot(home)
    doc = fwj("resource", "write", "agent", "a1", "--data", json.dumps({"model": "nope"}), "--dry-run", code=4)
    assert doc["error"]["code"] == "invalid"
    assert snapshot(home) == before


def test_a_dry_run_names_no_secret_file_that_is_not_there_and_keeps_the_files_text(home):
    """A provider whose key comes from the environment has no secrets file: a dry run says
    nothing of one. The diff is the file's text as it is: a comment naming fw is not rewritten
    to carry --home, as the commands fw prints for the reader are."""
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "https://x.test/v1", "api_key_env": "K"}))
    path = home / "providers/default/p1.yaml"
    path.write_text("# and fw keeps it under secrets/\n" + path.read_text())
    before = snapshot(home)
    for args in (["--json"], []):
        r = fw("--home", str(home), "resource", "write", "provider", "p1", "--data", '{"description": "y"}', "--dry-run", *args)
        assert r.exit_code == 0, r
        text = r.json["diff"] if args else r.stdout
        assert "secrets/" not in text.replace("# and fw keeps it under secrets/", ""), text
        assert " # and fw keeps it under secrets/\n" in text and "--home" not in text, text
        if args:
            assert all(not f["path"].startswith("secrets/") for f in r.json["files"]), r.json
    assert snapshot(home) == before
