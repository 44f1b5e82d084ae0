"""A run id is taken whole or by a unique part (its end, as `fw audit list` shows it, or its
start), as git takes short hashes; an ambiguous part is refused with the candidates."""

import json

import pytest
from conftest import audit_entries, fw, fwj, make_basics, snapshot

pytestmark = pytest.mark.engines


def two_runs():
    make_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management")
    return fwj("run", "start", "--agent", "a1")["run_id"], fwj("run", "start", "--agent", "a1")["run_id"]


def test_the_short_id_audit_list_shows_is_taken_by_run_show_end_and_tool(home):
    first, second = two_runs()
    fw("tool", "call", "--run", first, "framework_resource_list", "--args", '{"kind": "agent"}')
    shown = [line.split()[3] for line in fw("audit", "list").stdout.splitlines()[1:] if line.strip()]
    short = shown[-1]
    assert len(short) < len(first) and first.endswith(short)
    assert fwj("run", "show", short)["run_id"] == first
    assert fwj("run", "show", first[:-4])["run_id"] == first  # a prefix, too
    assert [t["name"] for t in fwj("tool", "list", "--run", short)["tools"]] == fwj("run", "show", first)["tools"]
    called = json.loads(fw("tool", "call", "--run", short, "framework_resource_list", "--args", '{"kind": "agent"}').stdout)
    assert called["items"][0]["name"] == "a1"
    assert fwj("run", "end", second[-8:])["run_id"] == second
    assert fwj("run", "show", second)["status"] == "ended"
    audit_runs = [entry["run_id"] for entry in audit_entries(home)]
    assert audit_runs[-1] == first  # the audit records the whole id, whatever was typed


def test_an_ambiguous_part_is_refused_with_the_candidates(home):
    first, second = two_runs()
    before = snapshot(home)
    result = fw("run", "end", "run-20", "--json")
    assert result.exit_code == 6, result
    error = result.json["error"]
    assert error["code"] == "conflict" and sorted(error["candidates"]) == sorted([first, second])
    assert snapshot(home) == before
    human = fw("run", "show", "run-20")
    assert first in human.stderr and second in human.stderr


def test_a_part_that_matches_nothing_is_not_found_with_a_close_one(home):
    first, _ = two_runs()
    typo = first[-8:-1] + ("0" if first[-1] != "0" else "1")
    error = fw("run", "show", typo, "--json").json["error"]
    assert error["code"] == "not_found"
    assert fw("run", "show", "not-a-run", "--json").json["error"]["code"] == "invalid"


def test_a_part_too_short_to_name_a_run_says_how_long_one_must_be(home):
    r = fw("run", "show", "5fb", "--json")
    assert r.exit_code != 0 and r.json["error"]["code"] == "invalid", r
    assert "too short" in r.json["error"]["message"] and "4 characters" in r.json["error"]["message"], r
    assert "is not a run id" in fw("run", "show", "zz9z", "--json").json["error"]["message"]
