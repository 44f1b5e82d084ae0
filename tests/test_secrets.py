import json
import stat

from conftest import CANARY, fw, fw_proc, fwj, snapshot


def files_outside_secrets(home):
    for path in home.rglob("*"):
        if path.is_file() and "secrets" not in path.relative_to(home).parts:
            yield path


def assert_canary_nowhere(home, outputs):
    for text in outputs:
        assert CANARY not in text
    for path in files_outside_secrets(home):
        assert CANARY.encode() not in path.read_bytes(), path


def test_a_key_given_in_data_lives_only_under_secrets(home):
    outputs = []
    r = fw("resource", "write", "provider", "p1", "--create", "--json", "--data",
           json.dumps({"base_url": "https://llm.test/v1", "api_key": CANARY}))
    assert r.exit_code == 0, r
    assert r.json["data"] == {"base_url": "https://llm.test/v1", "api_key_set": True}
    outputs.append(r.output)
    for args in (["resource", "read", "provider", "p1"], ["resource", "list", "provider"], ["home", "check"]):
        outputs.append(fw(*args).output)
        outputs.append(fw(*args, "--json").output)
    secret_file = home / "secrets/provider/p1.json"
    assert CANARY in secret_file.read_text()
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "secrets").stat().st_mode) == 0o700
    assert stat.S_IMODE(secret_file.parent.stat().st_mode) == 0o700
    assert_canary_nowhere(home, outputs)


def test_a_key_from_stdin_with_the_installed_fw(home):
    r = fw_proc("resource", "write", "provider", "p1", "--create", "--api-key-stdin", "--json",
                "--data", '{"base_url": "https://llm.test/v1"}', input=f"  {CANARY}\n", home=home)
    assert r.exit_code == 0, r
    assert r.json["data"]["api_key_set"] is True
    assert json.loads((home / "secrets/provider/p1.json").read_text())["api_key"] == CANARY
    assert_canary_nowhere(home, [r.output])


def test_errors_never_echo_a_key(home):
    outputs = []
    before = snapshot(home)
    for data in (
        {"base_url": "not a url " + CANARY, "api_key": CANARY},
        {"base_url": "https://x.test", "api_key": CANARY, "api_key_env": "K"},
        {"base_url": "https://x.test", "api_key": CANARY, "colour": CANARY},
        {"base_url": CANARY, "api_key": CANARY},
    ):
        r = fw("resource", "write", "provider", "p1", "--create", "--data", json.dumps(data))
        assert r.exit_code == 4 and r.stderr.startswith("Error:") and r.stdout == "", r
        outputs.append(r.output)
        r = fw("resource", "write", "provider", "p1", "--create", "--data", json.dumps(data), "--json")
        assert r.exit_code == 4 and r.json["error"]["code"] == "invalid", r
        outputs.append(r.output)
    r = fw("resource", "write", "provider", "p1", "--create", "--data", "{bad json " + CANARY)
    assert r.exit_code == 4 and r.stderr.startswith("Error: --data is not valid JSON"), r
    outputs.append(r.output)
    assert snapshot(home) == before
    assert_canary_nowhere(home, outputs)


def test_key_source_rules(home):
    assert fwj("resource", "write", "provider", "p1", "--create", "--data", '{"base_url": "https://x.test"}', code=4)["error"]["code"] == "invalid"
    assert "empty" in fwj("resource", "write", "provider", "p1", "--create", "--data", '{"base_url": "https://x.test", "api_key": " "}', code=4)["error"]["message"]
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "https://x.test", "api_key": CANARY}))
    # an update may omit the key and keeps it
    doc = fwj("resource", "write", "provider", "p1", "--data", '{"description": "d"}')
    assert doc["data"]["api_key_set"] is True
    assert json.loads((home / "secrets/provider/p1.json").read_text())["api_key"] == CANARY
    # both at once is refused
    assert fwj("resource", "write", "provider", "p1", "--data", '{"api_key_env": "K"}', code=4)["error"]["code"] == "invalid"
    # switching to an environment variable is one patch, and removes the stored key
    doc = fwj("resource", "write", "provider", "p1", "--data", '{"api_key_env": "K", "api_key": null}')
    assert doc["data"]["api_key_set"] is False and doc["data"]["api_key_env"] == "K"
    assert not (home / "secrets/provider/p1.json").exists()


def test_api_key_stdin_rules(home):
    r = fw("resource", "write", "provider", "p1", "--create", "--api-key-stdin", "--json", "--data", '{"base_url": "https://x.test"}', input="\n")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid"
    assert not (home / "providers/default/p1.yaml").exists()
    before = snapshot(home)
    r = fw("resource", "write", "harness", "h1", "--create", "--api-key-stdin", "--json", "--data", '{"type": "t"}', input=CANARY)
    assert r.exit_code == 2 and r.json["error"]["code"] == "usage"
    assert "providers only" in r.json["error"]["message"]
    assert snapshot(home) == before
    assert_canary_nowhere(home, [r.output])


def test_mcp_env_and_header_values_are_secrets(home):
    outputs = []
    r = fw("resource", "write", "mcp", "x", "--create", "--json", "--data",
           json.dumps({"transport": "stdio", "command": "srv", "env": {"TOKEN": CANARY}}))
    assert r.exit_code == 0, r
    assert r.json["data"]["env"] == {"TOKEN": "[redacted]"}
    outputs.append(r.output)
    outputs += [fw("resource", "read", "mcp", "x").output, fw("resource", "list", "mcp", "--json").output]
    r = fw("resource", "write", "mcp", "x", "--json", "--data", json.dumps({"env": {"OTHER": "value-2-abcdef"}}))
    assert r.json["data"]["env"] == {"TOKEN": "[redacted]", "OTHER": "[redacted]"}
    outputs.append(r.output)
    assert_canary_nowhere(home, outputs)
    assert stat.S_IMODE((home / "secrets/mcp/x.json").stat().st_mode) == 0o600


def test_mcp_header_values_live_only_under_secrets(home):
    outputs = []
    r = fw("resource", "write", "mcp", "web", "--create", "--json", "--data",
           json.dumps({"transport": "http", "url": "https://mcp.test/x", "headers": {"Authorization": f"Bearer {CANARY}"}}))
    assert r.exit_code == 0, r
    assert r.json["data"]["headers"] == {"Authorization": "[redacted]"}
    outputs.append(r.output)
    text = (home / "mcps/default/web.yaml").read_text()
    assert "headers" not in text and "Authorization" not in text
    secret_file = home / "secrets/mcp/web.json"
    assert json.loads(secret_file.read_text()) == {"headers": {"Authorization": f"Bearer {CANARY}"}}
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    # a patch adds a header beside the stored one, and still only under secrets/
    r = fw("resource", "write", "mcp", "web", "--json", "--data", json.dumps({"headers": {"X-Team": "team-secret-42"}}))
    assert r.exit_code == 0, r
    assert r.json["data"]["headers"] == {"Authorization": "[redacted]", "X-Team": "[redacted]"}
    outputs.append(r.output)
    assert json.loads(secret_file.read_text())["headers"] == {"Authorization": f"Bearer {CANARY}", "X-Team": "team-secret-42"}
    for args in (["resource", "read", "mcp", "web"], ["resource", "list", "mcp"], ["home", "check"]):
        outputs += [fw(*args).output, fw(*args, "--json").output]
    assert not any("team-secret-42" in o for o in outputs)
    assert not any(b"team-secret-42" in p.read_bytes() for p in files_outside_secrets(home))
    assert_canary_nowhere(home, outputs)
    # null removes one header
    fwj("resource", "write", "mcp", "web", "--data", '{"headers": {"X-Team": null}}')
    assert json.loads(secret_file.read_text())["headers"] == {"Authorization": f"Bearer {CANARY}"}


def test_mcp_headers_written_by_hand_move_to_secrets_on_the_next_write(home):
    (home / "mcps/default/web.yaml").write_text(f"transport: http\nurl: https://mcp.test/x\nheaders:\n  Authorization: Bearer {CANARY}\n")
    assert [w["code"] for w in fwj("home", "check")["warnings"]] == ["plaintext_secret"]
    assert fwj("resource", "read", "mcp", "web")["data"]["headers"] == {"Authorization": "[redacted]"}
    fwj("resource", "write", "mcp", "web", "--data", '{"description": "moved"}')
    assert (home / "mcps/default/web.yaml").read_text() == "transport: http\nurl: https://mcp.test/x\ndescription: moved\n"
    assert json.loads((home / "secrets/mcp/web.json").read_text()) == {"headers": {"Authorization": f"Bearer {CANARY}"}}
    assert fwj("home", "check")["warnings"] == []
    assert_canary_nowhere(home, [])


def test_a_key_written_by_hand_is_never_shown_and_moves_on_the_next_write(home):
    (home / "providers/default/hand.yaml").write_text(f"base_url: https://x.test\napi_key: {CANARY}\n")
    outputs = [fw("resource", "read", "provider", "hand", "--json").output, fw("resource", "list", "provider").output]
    check = fwj("home", "check")
    assert [w["code"] for w in check["warnings"]] == ["plaintext_secret"]
    assert all(CANARY not in o for o in outputs)
    doc = fwj("resource", "write", "provider", "hand", "--data", '{"description": "moved"}')
    assert doc["data"]["api_key_set"] is True
    assert CANARY not in (home / "providers/default/hand.yaml").read_text()
    assert CANARY in (home / "secrets/provider/hand.json").read_text()
    assert fwj("home", "check")["warnings"] == []
    assert_canary_nowhere(home, outputs)


def test_credentials_in_a_url_are_refused(home):
    before = snapshot(home)
    for kind, data in (
        ("provider", {"base_url": f"https://user:{CANARY}@llm.test/v1", "api_key_env": "K"}),
        ("mcp", {"transport": "http", "url": f"https://u:{CANARY}@mcp.test/x"}),
    ):
        result = fw("resource", "write", kind, "x1", "--create", "--json", "--data", json.dumps(data))
        assert result.exit_code == 4 and result.json["error"]["code"] == "invalid"
        assert CANARY not in result.output
    assert snapshot(home) == before
    fwj("resource", "write", "mcp", "ok1", "--create", "--data", json.dumps({"transport": "http", "url": "https://mcp.test/x?team=a@b"}))
