"""provider_models against a real HTTP server on 127.0.0.1; resource_test without network."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import CANARY, fw, fwj


class Provider(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        auth = self.headers.get("Authorization", "")
        if self.path == "/v1/models" and auth == f"Bearer {CANARY}":
            self._send(200, {"object": "list", "data": [{"id": "model-b"}, {"id": "model-a"}]})
        elif self.path == "/echo/models":
            self._send(500, {"error": f"bad request, you sent {auth}"})
        elif self.path == "/straddle/models":  # the key placed across the 200th character
            body = ("x" * 190 + auth.removeprefix("Bearer ") + " and more").encode()
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/junk/models":
            self._send(200, "not a list")
        else:
            self._send(401, {"error": "unauthorized"})

    def _send(self, status, payload):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def provider(name, base_url, **extra):
    fwj("resource", "write", "provider", name, "--create", "--data", json.dumps({"base_url": base_url, **extra}))


def test_models_are_listed_with_the_stored_key(server):
    provider("local", server + "/v1", api_key=CANARY)
    assert fwj("resource", "models", "local") == {"models": ["model-a", "model-b"]}
    result = fw("tool", "call", "--manager", "provider_models", "--args", '{"reference": "local"}')
    assert result.exit_code == 0 and result.json == {"models": ["model-a", "model-b"]}
    human = fw("resource", "models", "local")
    assert "model-a" in human.stdout


def test_models_with_a_key_from_the_environment(server, monkeypatch):
    provider("envp", server + "/v1", api_key_env="LOCAL_TEST_KEY")
    assert fwj("resource", "models", "envp", code=4)["error"]["code"] == "invalid"
    monkeypatch.setenv("LOCAL_TEST_KEY", CANARY)
    result = fw("resource", "models", "envp", "--json")
    assert result.exit_code == 0 and result.json["models"] == ["model-a", "model-b"]


def test_a_key_the_server_echoes_back_is_redacted_everywhere(server, home):
    provider("echo", server + "/echo", api_key=CANARY)
    for args in (["resource", "models", "echo"], ["resource", "models", "echo", "--json"]):
        result = fw(*args)
        assert result.exit_code == 7, result
        assert CANARY not in result.output
        assert "[redacted]" in result.output
    result = fw("tool", "call", "--manager", "provider_models", "--args", '{"reference": "echo"}')
    assert result.exit_code == 7 and result.json["error"]["code"] == "unavailable"
    assert CANARY not in result.output and CANARY not in (home / "audit.jsonl").read_text()


def test_wrong_key_junk_answers_and_unreachable_servers_are_unavailable(server):
    provider("wrong", server + "/v1", api_key="sk-not-the-right-one-123")
    assert fwj("resource", "models", "wrong", code=7)["error"]["code"] == "unavailable"
    provider("junk", server + "/junk", api_key=CANARY)
    assert fwj("resource", "models", "junk", code=7)["error"]["code"] == "unavailable"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider("down", f"http://127.0.0.1:{port}/v1", api_key=CANARY)
    doc = fwj("resource", "models", "down", code=7)
    assert doc["error"]["code"] == "unavailable" and CANARY not in json.dumps(doc)


def test_resource_test_is_static(home, monkeypatch, tmp_path):
    provider("p1", "https://nowhere.invalid/v1", api_key_env="UNSET_VAR_FOR_TEST")
    doc = fw("resource", "test", "provider", "p1", "--json")
    assert doc.exit_code == 4
    checks = {c["name"]: c for c in doc.json["checks"]}
    assert checks["api_key_env"]["ok"] is False and doc.json["ok"] is False
    monkeypatch.setenv("UNSET_VAR_FOR_TEST", "x")
    assert fwj("resource", "test", "provider", "p1")["ok"] is True
    marker = tmp_path / "started"
    fwj("resource", "write", "mcp", "m1", "--create", "--data", json.dumps({"transport": "stdio", "command": "definitely-not-installed-cmd", "args": [str(marker)]}))
    doc = fw("resource", "test", "mcp", "m1", "--json")
    assert doc.exit_code == 4 and {c["name"]: c["ok"] for c in doc.json["checks"]}["command"] is False
    fwj("resource", "write", "mcp", "m2", "--create", "--data", json.dumps({"transport": "stdio", "command": "touch", "args": [str(marker)]}))
    assert fwj("resource", "test", "mcp", "m2")["ok"] is True
    assert not marker.exists()  # nothing was started
    result = fw("tool", "call", "--manager", "resource_test", "--args", '{"kind": "agent", "reference": "x"}')
    assert result.exit_code == 4 and result.json["error"]["code"] == "invalid" and result.json["error"]["field"] == "kind"


def test_a_key_echoed_across_the_cut_is_redacted_before_the_cut(server):
    provider("p1", f"{server}/straddle", api_key=CANARY)
    r = fw("resource", "models", "p1", "--json")
    assert r.exit_code == 7 and r.json["error"]["code"] == "unavailable", r
    message = r.json["error"]["message"]
    assert "[redacted]" in message
    assert CANARY[:12] not in message  # not even the part before the cut
