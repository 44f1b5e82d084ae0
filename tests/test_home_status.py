"""Issue 21, item 18: `fw home` alone says which home is in use and why, what it holds, and
`fw home check`'s verdict."""

from __future__ import annotations

from conftest import fw, fwj, make_basics


def test_fw_home_names_the_home_from_fw_home(home):
    make_basics()
    doc = fwj("home")
    assert doc["home"] == str(home.resolve()) and doc["origin"] == "FW_HOME"
    assert doc["ok"] is True and doc["counts"]["agent"] == 1 and doc["counts"]["model"] == 1
    text = fw("home").stdout
    assert f"Home: {home.resolve()} (from $FW_HOME)" in text and "1 agent" in text and "Check: clean." in text
    # principals, bindings and bots are counted too (they are no resource kinds)
    fwj("principal", "create", "helper", "--kind", "agent")
    fwj("binding", "set", "helper", "--agent", fwj("resource", "list", "agent")["items"][0]["name"])
    doc = fwj("home")
    principals = len(fwj("principal", "list")["principals"])
    assert doc["identities"] == {"principals": principals, "bindings": 1, "bots": 0} and principals >= 1
    assert f"Runs as: {principals} principal{'s' if principals != 1 else ''}, 1 binding, 0 bots" in fw("home").stdout


def test_fw_home_names_a_home_given_with_home(home, tmp_path):
    other = tmp_path / "other"
    fw("home", "init", str(other))
    doc = fwj("--home", str(other), "home")
    assert doc["home"] == str(other.resolve()) and doc["origin"] == "--home"


def test_fw_home_says_the_default_is_used(home, tmp_path, monkeypatch):
    monkeypatch.delenv("FW_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    r = fw("home", "--json")
    assert r.exit_code == 3 and r.json["error"]["origin"] == "default", r
    assert "no --home, no $FW_HOME" in r.json["error"]["message"] and "fw home init" in r.json["error"]["hint"]
    fw("home", "init")
    assert fwj("home")["origin"] == "default"


def test_fw_home_gives_the_checks_verdict(home):
    (home / "agents/default/bad.yaml").write_text("model: [unclosed\n")
    doc = fwj("home")
    assert doc["ok"] is False and doc["problems"] == 1
    assert "Check: 1 problem; see them with `fw home check`." in fw("home").stdout
