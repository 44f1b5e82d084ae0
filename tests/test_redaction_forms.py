"""A key echoed back in another form, cut short, or too short to stand out (CONTRACT section 11;
issue items 2 to 4): it is redacted before anything is cut, in every output, error, file and
row of state.db; and `fw home check` warns about a key too short to redact well."""

from __future__ import annotations

import html
import json
import re
import sqlite3
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from conftest import CANARY, ODD_CANARY, fw, fw_proc, fwj, leaked
from fakes.chat_server import ChatServer
from fakes.onebot_server import OneBotServer, failed

RAW = str(Path(__file__).parent / "fakes" / "raw_mcp_server.py")
EVENT = {"type": "message.received", "actor": {"id": "20002"}, "group": {"id": "30003"}, "message": {"id": "777", "text": "hi", "mentions_bot": True}}


def agent_on(base_url, key=ODD_CANARY, **provider):
    data = {"base_url": base_url, **({"api_key": key} if key else {}), **provider}
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps(data))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("agent", "create", "a1", "--model", "m1")


def rows_of(home, table):
    db = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        return [" ".join(map(str, row)) for row in db.execute(f"SELECT * FROM {table}")]
    finally:
        db.close()


def pieces_of(value, size=8):
    return [value[i:i + size] for i in range(len(value) - size + 1)]


# -- item 3: a key echoed URL-encoded, HTML-escaped, or cut by one character ----------------
@pytest.mark.parametrize("echo", [
    pytest.param(lambda k: quote(k, safe=""), id="url-encoded"),
    pytest.param(lambda k: html.escape(k), id="html-escaped"),
    pytest.param(lambda k: k[:-1], id="cut-by-one"),
    pytest.param(lambda k: json.dumps(k)[1:-1], id="json-escaped"),
    pytest.param(lambda k: quote(k), id="url-encoded-keeping-slashes"),
    pytest.param(lambda k: html.escape(k).replace("&quot;", "&#34;").replace("&#x27;", "&#39;"), id="html-decimal-quotes"),
    pytest.param(lambda k: "".join(c if c.isalnum() else f"&#{ord(c)};" for c in k), id="html-numeric-entities"),
    pytest.param(lambda k: json.dumps(k)[1:-1].replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"),
                 id="json-escaped-as-go-does"),
])
def test_an_echoed_key_in_any_form_is_redacted_in_output_and_in_state_db(home, echo):
    said = f"invalid api key: {echo(ODD_CANARY)} (check your account)"
    script = [{"status": 401, "body": json.dumps({"error": {"message": said}})}]
    with ChatServer(script, repeat_last=True) as server:
        agent_on(server.base_url)
        for flags in (["--json"], []):
            r = fw("agent", "run", "a1", "--message", "hi", *flags)  # the leak check of `fw` reads every form
            assert r.exit_code == 7 and "[redacted]" in r.output and "(check your account)" in r.output, r
        # a dispatched turn keeps the error in state.db
        fwj("principal", "create", "alice", "--kind", "user")
        fwj("principal", "create", "ops", "--kind", "agent")
        fwj("binding", "set", "ops", "--agent", "a1", "--policy", "all")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        fwj("message", "post", "s1", "--as", "alice", "hello")
        fwj("dispatch", "--once")
    errors = [t["error"] for t in fwj("session", "show", "s1")["session"]["turns"]]
    assert len(errors) == 1 and "[redacted]" in errors[0], errors
    for table in ("turns", "messages"):
        assert not [row for row in rows_of(home, table) if leaked(row)], table


def test_a_key_with_odd_characters_round_trips_as_the_header_and_is_never_shown(home):
    with ChatServer([{"content": f"you sent {quote(ODD_CANARY, safe='')} and {html.escape(ODD_CANARY)}"}]) as server:
        agent_on(server.base_url)
        doc = fwj("agent", "run", "a1", "--message", "hi")
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {ODD_CANARY}"
    assert doc["answer"] == "you sent [redacted] and [redacted]"


# -- item 4: a short key from the environment --------------------------------------------------
def test_a_five_character_key_from_the_environment_is_redacted_and_home_check_warns(home, monkeypatch):
    monkeypatch.setenv("SHORT_LLM_KEY", "abcde")
    with ChatServer([{"status": 401, "body": "bad key Bearer abcde; abcdef is not it"}], repeat_last=True) as server:
        agent_on(server.base_url, key=None, api_key_env="SHORT_LLM_KEY")
        for flags in (["--json"], []):
            r = fw("agent", "run", "a1", "--message", "hi", *flags)
            assert r.exit_code == 7 and "Bearer [redacted]" in r.output and "abcdef is not it" in r.output, r
            assert not re.search(r"\babcde\b", r.output), r
    assert server.requests[0]["headers"]["authorization"] == "Bearer abcde"
    check = fwj("home", "check")
    assert check["ok"] is True
    (warning,) = [w for w in check["warnings"] if w["code"] == "short_key"]
    assert "$SHORT_LLM_KEY" in warning["message"] and "whole word" in warning["message"]
    assert "abcde" not in json.dumps(warning)
    monkeypatch.setenv("SHORT_LLM_KEY", "abc")
    human = fw("home", "check")
    assert human.exit_code == 0 and "not redacted" in human.output, human
    assert "is clean" not in human.output and "has no problem" in human.output and "1 warning above" in human.output, human
    monkeypatch.setenv("SHORT_LLM_KEY", "a-long-enough-key")
    assert [w for w in fwj("home", "check")["warnings"] if w["code"] == "short_key"] == []


# -- item 2: redact first, then cut ------------------------------------------------------------
def test_a_onebot_error_with_the_token_across_the_cut_shows_no_piece_of_it(home):
    token = "ob-CUT-9f8e7d6c5b4a39281706f5e4d3c2"  # 34 characters
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "http://127.0.0.1:9/v1", "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "m-1", "capabilities": {"tool_call": True}}))
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", "events": ["message.*"]}))
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1")
    with OneBotServer(token=token) as ob:
        fwj("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--url", ob.url, "--access-token-stdin", input=token)
        run = fwj("event", "handle", "qq", "--event", json.dumps(EVENT), "--no-run")["run"]
        # the first 25 characters of the token end the first 200 of what the platform says
        ob.answers["send_group_msg"] = failed(1200, "x" * 175 + token + " is muted")
        r = fw("tool", "call", "--run", run["run_id"], "event_reply", "--args", '{"text": "hi"}')
    assert r.exit_code == 7 and r.json["error"]["reason"] == "bot", r
    assert "[redacted]" in r.json["error"]["message"]
    assert not [p for p in pieces_of(token) if p in r.output], r.output


def test_an_mcp_servers_stderr_with_a_secret_across_the_cut_shows_no_piece_of_it(home):
    secret = "env-SECRET-0123456789abcdefghijkl"  # 33 characters: 31 of them before the cut at 500
    data = {"transport": "stdio", "command": sys.executable, "args": [RAW, "--stderr", "y" * 469 + "$RAW_TOKEN"],
            "env": {"RAW_TOKEN": secret}}
    fwj("resource", "write", "mcp", "dies", "--create", "--data", json.dumps(data))
    agent_on("http://127.0.0.1:9/v1", key=CANARY)
    fwj("agent", "edit", "a1", "--mcp", "dies")
    for json_mode in (True, False):
        started = fw_proc("run", "start", "--agent", "a1", *(["--json"] if json_mode else []), home=home)
        assert started.exit_code == 0, started
        assert not [p for p in pieces_of(secret) if p in started.output], started.output
    run_id = fwj("run", "list")["runs"][-1]["run_id"]
    record = (home / "runs" / f"{run_id}.json").read_text()
    detail = next(u["detail"] for u in json.loads(record)["unavailable_tools"] if u["name"] == "mcp__dies__*")
    assert "yyyy" in detail and "[redacted]" in detail, detail
    assert not [p for p in pieces_of(secret) if p in record]
    shown = fw("run", "show", run_id)
    assert not [p for p in pieces_of(secret) if p in shown.output]


def test_an_mcp_servers_stderr_line_longer_than_is_kept_leaves_no_piece_of_a_secret_past_the_cut(home):
    """A line longer than fw keeps (16 KiB) is cut once; the rest of that line is skipped up to
    its newline, never kept as lines of its own that a secret across the cut could end or start."""
    secret = "env-SECRET-fedcba9876543210zyxwvu"
    line = "y" * (16384 - 12) + "$RAW_TOKEN" + "z" * 40000 + "$RAW_TOKEN" + "q" * 3000
    data = {"transport": "stdio", "command": sys.executable, "args": [RAW, "--stderr", line + "\nthe last words"],
            "env": {"RAW_TOKEN": secret}}
    fwj("resource", "write", "mcp", "dies", "--create", "--data", json.dumps(data))
    agent_on("http://127.0.0.1:9/v1", key=CANARY)
    fwj("agent", "edit", "a1", "--mcp", "dies")
    started = fw_proc("run", "start", "--agent", "a1", "--json", home=home)
    assert started.exit_code == 0, started
    run_id = json.loads(started.stdout)["run_id"]
    record = (home / "runs" / f"{run_id}.json").read_text()
    detail = next(u["detail"] for u in json.loads(record)["unavailable_tools"] if u["name"] == "mcp__dies__*")
    assert "the last words" in detail and "zzzz" not in detail and "qqqq" not in detail, detail
    assert not [p for p in pieces_of(secret) if p in record + started.output]
