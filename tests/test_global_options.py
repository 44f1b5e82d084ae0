"""Issue 21, item 17: --home and --json are taken anywhere on the command line, before or
after the command, as kubectl, gh and git take their global flags."""

from __future__ import annotations

import json

import pytest
from conftest import fw, fw_proc, fwj, make_basics


@pytest.mark.parametrize("where", ["first", "after the group", "last", "equals"])
def test_home_is_taken_anywhere(home, tmp_path, monkeypatch, where):
    other = tmp_path / "other"
    assert fw("home", "init", str(other)).exit_code == 0
    fwj("--home", str(other), "category", "create", "agent", "elsewhere")
    args = {
        "first": ["--home", str(other), "category", "list", "agent"],
        "after the group": ["category", "--home", str(other), "list", "agent"],
        "last": ["category", "list", "agent", "--home", str(other)],
        "equals": ["category", "list", "agent", f"--home={other}"],
    }[where]
    assert "elsewhere" in fwj(*args)["categories"]
    assert "elsewhere" not in fwj("category", "list", "agent")["categories"]  # FW_HOME is still the default


@pytest.mark.parametrize("args", [["--json", "resource", "list", "agent"], ["resource", "--json", "list", "agent"],
                                  ["resource", "list", "--json", "agent"], ["resource", "list", "agent", "--json"]])
def test_json_is_taken_anywhere(home, args):
    make_basics()
    r = fw(*args)
    assert r.exit_code == 0 and [i["name"] for i in json.loads(r.stdout)["items"]] == ["a1"], r


def test_an_error_with_a_late_home_names_that_home_in_its_hint(home, tmp_path):
    r = fw("resource", "read", "agent", "nope", "--home", str(home))
    assert r.exit_code == 3 and f"--home {home}" in r.stderr, r


def test_after_a_double_dash_nothing_is_an_option(home):
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice")
    r = fw("message", "post", "s1", "--as", "alice", "--json", "--", "--home")
    assert r.exit_code == 0 and r.json["message"]["text"] == "--home", r


def test_the_installed_fw_takes_a_late_home(home):
    result = fw_proc("home", "check", "--home", str(home), "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["ok"] is True, result


@pytest.mark.parametrize("args", [["session", "list", "--home"], ["status", "--home"], ["agent", "list", "--home", "--json"],
                                  ["--home", "--json", "agent", "list"]])
def test_a_home_without_its_path_is_a_usage_error_wherever_it_is(home, args):
    r = fw(*args)
    assert r.exit_code == 2 and "'--home' requires an argument" in r.output, r
    if "--json" in args:
        assert json.loads(r.stdout)["error"]["code"] == "usage"
