"""What a new user reaches for: version, -h, completion, did-you-mean, the small commands,
plain messages and one rule for error codes."""

import json
import os
import pty
import re
import subprocess
import time

import pytest
from conftest import REPO, fw, fw_bin, fw_proc, fwj, make_basics, snapshot


def complete(home, line: str) -> list[str]:
    """What the installed fw offers bash for the last word of `line`."""
    words = line.split(" ")
    env = {**os.environ, "FW_HOME": str(home), "_FW_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
    proc = subprocess.run([fw_bin()], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


# -- version, help, completion -----------------------------------------------------------------
def test_version_matches_the_package(home):
    version = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    result = fw("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"fw {version}"
    assert fwj("--version") == {"name": "fw", "version": version}
    assert fw_proc("--version").stdout.strip() == f"fw {version}"


@pytest.mark.parametrize("args", [[], ["resource"], ["resource", "write"], ["agent", "edit"]])
def test_h_is_help(home, args):
    short, long = fw(*args, "-h"), fw(*args, "--help")
    assert short.exit_code == 0 and short.stdout == long.stdout and "Usage" in short.stdout


def test_completion_offers_kinds_names_categories_principals_and_groups(sample):
    fw_proc("resource", "list", "agent", home=sample)
    assert complete(sample, "fw resource list m") == ["mcp", "model"]
    assert complete(sample, "fw resource read agent ") == ["helper", "ops", "researcher"]
    assert complete(sample, "fw resource delete model gpt-4o-") == ["gpt-4o-mini"]
    assert complete(sample, "fw agent show r") == ["researcher"]
    # ops mounts resource_management: only the groups it does not mount yet are offered
    assert complete(sample, "fw agent edit ops --add-builtin-tool ") == ["local_execution", "task_collaboration"]
    assert complete(sample, "fw resource list agent --category r") == ["research"]
    assert complete(sample, "fw category delete prompt w") == ["writing"]
    assert complete(sample, "fw binding enable o") == ["ops"]
    assert complete(sample, "fw res") == ["resource"]
    assert complete(sample, f"fw --home {sample} principal delete a") == ["alice"]


def test_completion_in_a_missing_home_offers_nothing_and_says_nothing(tmp_path):
    assert complete(tmp_path / "nowhere", "fw resource read agent ") == []


def test_show_and_install_completion(home, tmp_path):
    # setsid: no shell among fw's parents, as under some test runners and IDEs; $SHELL tells
    env = {**os.environ, "HOME": str(tmp_path), "FW_HOME": str(home), "SHELL": "/bin/bash"}
    shown = subprocess.run(["setsid", fw_bin(), "--show-completion"], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert shown.returncode == 0 and "_FW_COMPLETE" in shown.stdout, shown.stderr
    installed = subprocess.run(["setsid", fw_bin(), "--install-completion"], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert installed.returncode == 0, installed.stderr
    assert "_FW_COMPLETE" in "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file() and "fw" in p.name)
    assert ".bash_completions" in (tmp_path / ".bashrc").read_text()


# -- did you mean ---------------------------------------------------------------------------
@pytest.mark.parametrize("given", ["models", "Model", "agnet", "harnesses"])
def test_a_kind_one_or_two_edits_away_is_suggested(home, given):
    expected = {"models": "model", "Model": "model", "agnet": "agent", "harnesses": "harness"}[given]
    error = fwj("resource", "list", given, code=4)["error"]
    assert (error["code"], error["did_you_mean"]) == ("invalid", expected)
    assert f"`fw resource list {expected} --json`" in error["hint"]  # the command as typed, put right


def test_names_one_or_two_edits_away_are_suggested_and_far_ones_not(sample):
    assert fwj("resource", "read", "agent", "opps", code=3)["error"]["did_you_mean"] == "ops"
    assert fwj("agent", "show", "reseacher", code=3)["error"]["did_you_mean"] == "researcher"
    assert fwj("run", "start", "--principal", "opz", code=3)["error"]["did_you_mean"] == "ops"
    assert fwj("category", "delete", "prompt", "writng", code=3)["error"]["did_you_mean"] == "writing"
    assert fwj("binding", "disable", "opps", code=3)["error"]["did_you_mean"] == "ops"
    assert fwj("principal", "delete", "alise", code=3)["error"]["did_you_mean"] == "alice"
    assert fwj("resource", "write", "agent", "x", "--create", "--data", '{"model": "gpt-4"}', code=4)["error"]["did_you_mean"] == "gpt-4o"
    assert fwj("tool", "call", "--manager", "resource_list", "--args", '{"kind": "agents"}', code=4)["error"]["did_you_mean"] == "agent"
    far = fwj("resource", "read", "agent", "zzzzzz", code=3)["error"]
    assert "did_you_mean" not in far and "did you mean" not in far["hint"]


# -- the small commands -------------------------------------------------------------------------
def test_principal_delete(home):
    make_basics()
    fwj("principal", "create", "bot", "--kind", "agent")
    fwj("binding", "set", "bot", "--agent", "a1")
    before = snapshot(home)
    error = fwj("principal", "delete", "bot", code=6)["error"]
    assert error["code"] == "in_use" and "fw binding remove bot" in error["hint"]
    assert fwj("principal", "delete", "ghost", code=3)["error"]["code"] == "not_found"
    assert fwj("principal", "delete", "../x", code=4)["error"]["code"] == "invalid"
    assert snapshot(home) == before
    fwj("binding", "remove", "bot")
    assert fwj("principal", "delete", "bot") == {"principal": "bot", "deleted": True}
    assert fwj("principal", "list")["principals"] == []
    assert fw("principal", "delete", "bot").exit_code == 3


def _age_run(home, run_id, seconds):
    """Move a run's lease (and end) into the past, as if it had stopped `seconds` ago."""
    from datetime import datetime, timedelta, timezone

    path = home / f"runs/{run_id}.json"
    record = json.loads(path.read_text())
    past = (datetime.now(timezone.utc) - timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    record["lease_expires_at"] = past
    if record["ended_at"]:
        record["ended_at"] = past
    path.write_text(json.dumps(record))


def test_run_prune(home):
    make_basics()
    active = fwj("run", "start", "--agent", "a1")["run_id"]
    ended_old = fwj("run", "start", "--agent", "a1")["run_id"]
    fwj("run", "end", ended_old)
    _age_run(home, ended_old, 3 * 86400)
    ended_new = fwj("run", "start", "--agent", "a1")["run_id"]
    fwj("run", "end", ended_new)
    expired = fwj("run", "start", "--agent", "a1")["run_id"]
    _age_run(home, expired, 3600)
    (home / "runs/run-20200101T000000-0000dead.json").write_text("{damaged")
    assert fwj("run", "prune", "--ended", "--older-than", "2d") == {"pruned": [ended_old], "kept": 4}
    assert fwj("run", "prune", "--ended") == {"pruned": [ended_new], "kept": 3}
    assert fwj("run", "prune", "--older-than", "2h") == {"pruned": [], "kept": 3}
    assert fwj("run", "prune") == {"pruned": [expired], "kept": 2}
    assert {r["run_id"] for r in fwj("run", "list")["runs"]} == {active, "run-20200101T000000-0000dead"}
    for bad in ("soon", "-1d", "3y", ""):
        assert fwj("run", "prune", "--older-than", bad, code=4)["error"]["code"] == "invalid"
    assert "Pruned 0 runs; kept 2." in fw("run", "prune").stdout


def test_run_start_quiet_prints_only_the_id(home):
    make_basics()
    result = fw("run", "start", "--agent", "a1", "-q")
    assert result.exit_code == 0 and re.fullmatch(r"run-\d{8}T\d{6}-[0-9a-f]{8}\n", result.stdout)
    assert fwj("run", "show", result.stdout.strip())["status"] == "active"


def test_resource_list_without_a_kind_lists_every_kind(sample):
    doc = fwj("resource", "list")
    assert [k["kind"] for k in doc["kinds"]] == ["provider", "model", "prompt", "skill", "mcp", "harness", "agent"]
    for listing in doc["kinds"]:
        assert listing == fwj("resource", "list", listing["kind"])
    only = fwj("resource", "list", "--category", "research")
    assert [(k["kind"], [i["name"] for i in k["items"]]) for k in only["kinds"]] == [("agent", ["researcher"])]
    assert fwj("resource", "list", "--category", "reserch", code=3)["error"]["did_you_mean"] == "research"
    human = fw("resource", "list")
    assert human.exit_code == 0
    for title in ("providers", "models", "prompts", "skills", "mcps", "harnesses", "agents"):
        assert title in human.stdout


def test_resource_schema_names_each_field(home):
    doc = fwj("resource", "schema", "provider")
    fields = {f["field"]: f for f in doc["fields"]}
    assert fields["base_url"]["required"] is True and "http or https URL" in fields["base_url"]["accepts"]
    assert doc["schema"]["properties"].keys() == {"base_url", "api", "api_key_env", "api_key", "description"}
    assert "body" in {f["field"] for f in fwj("resource", "schema", "prompt")["fields"]}
    human = fw("resource", "schema", "agent")
    assert human.exit_code == 0 and "builtin_tools" in human.stdout
    assert fwj("resource", "schema", "agents", code=4)["error"]["did_you_mean"] == "agent"


def test_mcp_serve_on_a_terminal_says_what_it_waits_for(home):
    parent, child = pty.openpty()
    proc = subprocess.Popen([fw_bin(), "mcp", "serve", "--manager"], stdin=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "FW_HOME": str(home)})
    os.close(child)
    try:
        time.sleep(0.5)
        os.write(parent, b"\x04")  # Ctrl-D: end of input
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(parent)
        if proc.poll() is None:
            proc.kill()
    text = err.decode()
    assert "waiting for an MCP client on standard input" in text and "Ctrl-D" in text and "Ctrl-C" in text
    assert proc.returncode == 0 and out == b""


def test_mcp_serve_from_a_pipe_prints_no_note(home):
    result = fw_proc("mcp", "serve", "--manager", home=home, input="")
    assert result.exit_code == 0 and "waiting" not in result.stderr


@pytest.mark.parametrize("args", [["resource", "list", "agent", "--home", "HOME"], ["agent", "list", "--home=HOME"], ["resource", "--home", "HOME", "list", "agent"]])
def test_home_after_the_command_is_taken(home, args, monkeypatch):
    monkeypatch.delenv("FW_HOME")
    args = [a.replace("HOME", str(home)) for a in args]
    assert "items" in fwj(*args)


# -- messages in plain words -------------------------------------------------------------------
def test_validation_messages_are_plain_words(home):
    error = fwj("resource", "write", "provider", "p", "--create", "--data", '{"base_url": "https://u:pw@x.test", "api_key_env": "K"}', code=4)["error"]
    assert error["message"] == "base_url must be an http or https URL without user:password@ (e.g. https://api.openai.com/v1)"
    for data in ('{"base_url": "ftp://x", "api_key_env": "K"}', '{"base_url": "https://x.test", "api_key_env": "1K"}'):
        error = fwj("resource", "write", "provider", "p", "--create", "--data", data, code=4)["error"]
        assert "^" not in error["message"] and "pattern" not in error["message"]
    for args in (
        ["resource", "write", "mcp", "m", "--create", "--data", '{"transport": "sse", "command": "x"}'],
        ["principal", "create", "p", "--kind", "robot"],
        ["resource", "write", "harness", "h", "--create", "--data", '{"type": "t", "capabilities": {"tool_calling": "yes"}}'],
        ["resource", "write", "agent", "a", "--create", "--data", '{"skills": "x"}'],
        ["resource", "write", "agent", "a", "--create", "--data", '{"colour": "red"}'],
    ):
        error = fwj(*args, code=4)["error"]
        text = error["message"] + error["hint"]
        assert "Input should" not in text and "schemas/" not in text and not re.search(r"\ba (agent|mcp)\b", text), error
    assert fwj("resource", "write", "mcp", "m", "--create", "--data", '{"transport": "sse", "command": "x"}', code=4)["error"]["hint"].startswith("an mcp takes transport")


def test_counts_agree_with_their_nouns(home):
    fwj("category", "create", "harness", "team")
    fwj("resource", "write", "harness", "h1", "--create", "--category", "team", "--data", '{"type": "t"}')
    assert "(1 entry)" in fwj("category", "delete", "harness", "team", code=6)["error"]["message"]
    (home / "harnesses/default/bad.yaml").write_text("type: [\n")
    assert "1 corrupt file:" in fw("resource", "list", "harness").stdout
    assert "1 problem in" in fw("home", "check").stdout
    (home / "agents/default/notes.txt").write_text("x")
    warning = fwj("home", "check", code=4)["warnings"][0]["message"]
    assert "is not an agent file" in warning


def test_help_texts_show_redacted_and_say_what_category_does(home):
    assert "[redacted]" in fw("resource", "read", "--help").stdout
    for args in (["agent", "list", "--help"], ["resource", "list", "--help"]):
        text = " ".join(fw(*args).stdout.replace("│", " ").split())
        assert "every category" in text and "move it" not in text, text
    assert "move it" in " ".join(fw("resource", "write", "--help").stdout.replace("│", " ").split())


# -- one rule for codes -----------------------------------------------------------------------
CODES = [
    (["run", "start", "--agent", "a1", "--lease", "0"], "invalid"),
    (["run", "start", "--agent", "a1", "--lease", "soon"], "invalid"),
    (["binding", "set", "bot", "--agent", "a1", "--max-rounds", "0"], "invalid"),
    (["binding", "set", "bot", "--agent", "a1", "--max-rounds", "x"], "invalid"),
    (["audit", "list", "--limit", "0"], "invalid"),
    (["resource", "write", "agent", "a1", "--data", "{oops"], "invalid"),
    (["tool", "call", "--manager", "resource_list", "--args", "{oops"], "invalid"),
    (["resource", "list", "agnt"], "invalid"),
    (["run", "show", "../etc"], "invalid"),
    (["resource", "list", "agent", "--category", "ghost"], "not_found"),
    (["category", "delete", "agent", "ghost"], "not_found"),
    (["resource", "write", "agent", "a1", "--category", "ghost", "--data", "{}"], "not_found"),
    (["resource", "write", "agent", "a1", "--data", "@/nonexistent.json"], "not_found"),
    (["run", "show", "run-20200101T000000-00000000"], "not_found"),
    (["binding", "set", "nobody", "--agent", "a1"], "not_found"),
    (["run", "start", "--agent", "a1", "--lease"], "usage"),
    (["run", "start", "--agent", "a1", "--bogus"], "usage"),
    (["run", "start"], "usage"),
    (["resource", "read", "agent"], "usage"),
    (["resource", "write", "agent", "a1"], "usage"),
]


@pytest.mark.parametrize("args,code", CODES, ids=[" ".join(a) for a, _ in CODES])
def test_one_rule_for_codes(home, args, code):
    make_basics()
    fwj("principal", "create", "bot", "--kind", "agent")
    before = snapshot(home)
    result = fw(*args, env={"FW_JSON": "1"})
    assert result.json["error"]["code"] == code, result
    assert result.exit_code == {"invalid": 4, "not_found": 3, "usage": 2}[code]
    after = snapshot(home)
    before.pop("audit.jsonl", None), after.pop("audit.jsonl", None)
    assert after == before


# -- what changed, what is left -------------------------------------------------------------------
def test_a_stale_confirmation_in_human_mode_shows_what_changed(home):
    make_basics()
    fwj("agent", "create", "a2", "--model", "m1")
    result = fw("resource", "delete", "model", "m1", "--recursive", "--confirm", "agent/a2,agent/a1,model/m1")
    assert result.exit_code == 6
    assert "added:" not in result.stderr and "gone:" not in result.stderr and "reordered" in result.stderr
    result = fw("resource", "delete", "model", "m1", "--recursive", "--confirm", "agent/a1,agent/a2,agent/a3,model/m1")
    assert "gone: agent/a3" in result.stderr
    result = fw("resource", "delete", "model", "m1", "--recursive", "--confirm", "agent/a1,model/m1")
    assert "added: agent/a2" in result.stderr


def test_agent_edit_says_unchanged_and_shows_the_groups(home):
    make_basics()
    saved = fw("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    assert saved.stdout.startswith("Saved agent a1") and "Built-in tool groups: resource_management." in saved.stdout
    same = fw("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    assert same.stdout.startswith("Unchanged: agent a1") and "Built-in tool groups: resource_management." in same.stdout
    assert fwj("agent", "edit", "a1", "--description", "x")["changed"] is True
    assert fwj("agent", "edit", "a1", "--description", "x")["changed"] is False
    assert "Built-in tool groups: none." in fw("agent", "edit", "a1", "--builtin-tool", "").stdout


def test_audit_list_piped_keeps_every_name_whole(home):
    make_basics()
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    run_id = fwj("run", "start", "--agent", "a1")["run_id"]
    fw("tool", "call", "--run", run_id, "framework_resource_category_delete", "--args", '{"kind": "agent", "category": "nope"}')
    fw("tool", "call", "--run", "run-20200101T000000-00000000", "framework_resource_list", "--args", '{"kind": "agent"}')
    fw("tool", "call", "--manager", "resource_list", "--args", '{"kind": "agent"}')
    lines = fw("audit", "list").stdout.splitlines()  # piped: whole cells (a terminal's fit: test_tables.py)
    assert len(lines) == 4, lines
    caller, run, tool, outcome = lines[1].split()[2:]
    assert (caller, run, tool, outcome) == ("runtime:a1", run_id[-8:], "framework_resource_category_delete", "not_found")
    assert lines[-1].split()[-1] == "ok" and "not_found" in lines[1]


def test_listing_a_kind_reads_and_writes_only_its_own_index(home):
    make_basics()
    for path in home.rglob("*.yaml"):
        os.utime(path, (1_700_000_000, 1_700_000_000))  # settled files are cached
    fwj("resource", "list", "agent")
    assert sorted(p.name for p in (home / ".index").iterdir()) == ["agents.json"]
    fwj("resource", "list", "model")
    assert sorted(p.name for p in (home / ".index").iterdir()) == ["agents.json", "models.json"]
    (home / ".index.json").write_text("{}")  # an index of an earlier version goes
    fwj("resource", "list", "provider")
    assert not (home / ".index.json").exists()


def test_json_output_is_one_document_with_a_record_a_line(sample):
    result = fw("resource", "list", "agent", "--json")
    lines = result.stdout.splitlines()
    assert json.loads(result.stdout)["kind"] == "agent"
    assert [json.loads(line.strip().rstrip(","))["name"] for line in lines[3:-2]] == ["helper", "ops", "researcher"]


def test_an_index_whose_checksum_fails_is_checked_entry_by_entry(home):
    make_basics()
    for path in home.rglob("*.yaml"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    expected = fwj("resource", "list", "agent")
    index = home / ".index/agents.json"
    digest, body = index.read_text().split("\n", 1)
    entry = json.dumps(json.loads(body)["files"]["agents/default/a1.yaml"][1], separators=(",", ":"))
    damaged = body.replace(entry, '{"summary":{},"refs":7}')
    assert damaged != body
    index.write_text(digest + "\n" + damaged)  # the checksum no longer fits
    assert fwj("resource", "list", "agent") == expected
