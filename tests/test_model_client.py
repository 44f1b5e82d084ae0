"""The model client through `fw agent run` (and `fw dispatch`), against the scripted
chat-completions server: retries, finish_reason and refusals, error objects, index-less
tool-call pieces, malformed tool arguments, answers that trickle, and streaming to a terminal."""

import json
import os
import pty
import re
import select
import socket
import subprocess
import threading
import time

import pytest
from conftest import CANARY, fw, fw_bin, fw_proc, fwj, leaked
from fakes.chat_server import ChatServer


def setup_agent(base_url, builtin=("resource_management",)):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "model-x", "capabilities": {"tool_call": True}}))
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", "builtin_tools": list(builtin)}))


def run_json(*args, code=0):
    r = fw("agent", "run", "a1", "--message", "hi", *args, "--json")
    assert r.exit_code == code, r
    return r.json


def audit_lines(home):
    path = home / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- the connection -------------------------------------------------------------------------------
def self_signed(folder):
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return str(cert), str(key)


def test_a_model_over_https_is_reached_when_its_certificate_is_trusted_and_refused_clearly_when_not(home, tmp_path):
    cert, key = self_signed(tmp_path)
    with ChatServer([{"content": "over tls"}], repeat_last=True, tls=(cert, key)) as server:
        setup_agent(server.base_url)
        env = {**os.environ, "FW_HOME": str(home), "SSL_CERT_FILE": cert}
        trusted = subprocess.run([fw_bin(), "agent", "run", "a1", "--message", "hi", "--json"], capture_output=True, text=True,
                                 env=env, timeout=60)
        env.pop("SSL_CERT_FILE")  # the usual CA bundle does not know this server's certificate
        refused = subprocess.run([fw_bin(), "agent", "run", "a1", "--message", "hi", "--json"], capture_output=True, text=True,
                                 env=env, timeout=60)
    assert trusted.returncode == 0, trusted.stderr
    assert json.loads(trusted.stdout)["answer"] == "over tls"
    assert len(server.requests) == 1 and server.requests[0]["json"]["model"] == "model-x"
    assert refused.returncode == 7, refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert (error["code"], error["reason"]) == ("unavailable", "model")
    assert "TLS certificate could not be verified" in error["message"] and "SSL_CERT_FILE" in error["hint"]
    assert "Traceback" not in refused.stderr
    assert not leaked(trusted.stdout + trusted.stderr + refused.stdout + refused.stderr)


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_far_larger_than_what_is_read_ahead_arrives_whole(home, stream):
    text = "".join(f"line {n:06d} of a long answer\n" for n in range(40_000))  # about 1.2 MB
    with ChatServer([{"content": text, "stream": stream}]) as server:
        setup_agent(server.base_url)
        assert run_json()["answer"] == text


def test_a_model_nobody_listens_for_is_unreachable_at_once(home):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    setup_agent(f"http://127.0.0.1:{port}/v1")
    started = time.monotonic()
    error = run_json(code=7)["error"]
    assert time.monotonic() - started < 20
    assert error["code"] == "unavailable" and f"could not reach http://127.0.0.1:{port}/v1" in error["message"]
    assert "the connection was refused" in error["message"] and "port" in error["hint"], error  # why, not an exception's name


def test_a_model_host_that_does_not_resolve_says_so(home, monkeypatch):
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):  # the name service, at the edge: .invalid never resolves (RFC 6761)
        if str(host).endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    setup_agent("http://no-such-host.invalid/v1")
    error = run_json(code=7)["error"]
    assert "could not reach http://no-such-host.invalid/v1" in error["message"], error
    assert "its host name could not be resolved" in error["message"], error


def test_a_model_named_by_host_name_is_reached_and_only_a_name_races_its_addresses(home, monkeypatch):
    import asyncio

    from framework_cli.http_client import AsyncioBackend, _is_address

    # an address has one way to reach it: no happy-eyeballs race (Python 3.11 runs one even then)
    assert [_is_address(h) for h in ("127.0.0.1", "::1", "[::1]", "10.0.0.255")] == [True] * 4
    assert [_is_address(h) for h in ("localhost", "api.example.com", "1.2.3", "127.0.0.1.", "fe80::1%eth0")] == [False] * 5
    delays = []
    real = asyncio.BaseEventLoop.create_connection

    async def noted(self, *args, happy_eyeballs_delay=None, **kwargs):
        delays.append(happy_eyeballs_delay)
        return await real(self, *args, happy_eyeballs_delay=happy_eyeballs_delay, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", noted)
    with ChatServer([{"content": "hello"}]) as server:
        port = int(server.base_url.split(":")[2].split("/")[0])

        async def connect(host):
            stream = await AsyncioBackend().connect_tcp(host, port, timeout=10)
            await stream.aclose()

        asyncio.run(connect("127.0.0.1"))
        asyncio.run(connect("localhost"))
        assert delays == [None, 0.25]
        setup_agent(server.base_url.replace("127.0.0.1", "localhost"))  # the whole way, by name
        assert run_json()["answer"] == "hello"


class ClosingServer:
    """A TCP server on 127.0.0.1 that closes every connection as soon as it accepts it (an
    overloaded server, a balancer with nothing behind it). `handle` is what it does with one."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                self.handle(conn)

    def handle(self, conn):
        pass

    def close(self):
        self.sock.close()


def test_an_https_server_that_closes_at_once_fails_fast_not_after_the_timeout(home):
    server = ClosingServer()
    try:
        setup_agent(f"https://127.0.0.1:{server.port}/v1")
        for _ in range(4):  # the close may reach fw before or during the handshake: either way, at once
            started = time.monotonic()
            error = run_json("--timeout", "12", code=7)["error"]
            took = time.monotonic() - started
            assert took < 8, took  # the TLS handshake on a closed connection once waited for the whole timeout
            assert error["code"] == "unavailable" and "could not reach" in error["message"]
    finally:
        server.close()
    assert server.accepted >= 4


def test_a_kept_alive_connection_the_server_closed_while_the_loop_was_busy_is_not_reused():
    """The server closes an idle connection while the event loop is busy (it has not read the
    close yet): the next request must go out on a new connection, not fail on the dead one."""
    import asyncio

    from framework_cli import http_client

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    connections = []

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            connections.append(conn)
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok")
            time.sleep(0.05)
            conn.close()  # an idle keep-alive connection closed by the server (its keep-alive timeout)

    threading.Thread(target=serve, daemon=True).start()

    async def twice():
        client = http_client.async_http_client("http", 7)
        first = await client.get(f"http://127.0.0.1:{port}/", timeout=10)
        time.sleep(0.3)  # the loop is busy (other runs' work): the server's close is not read yet
        second = await client.get(f"http://127.0.0.1:{port}/", timeout=10)
        await http_client.close_async_clients()
        return first.status_code, second.status_code

    try:
        assert asyncio.run(twice()) == (200, 200)
        assert len(connections) == 2
    finally:
        listener.close()


# -- retries ---------------------------------------------------------------------------------
class EarlyAnswerServer(ClosingServer):
    """A server that reads a request's head, answers 413 without reading the body, and closes
    (a proxy with a body limit): what each connection's first read held is kept."""

    def __init__(self):
        self.heads: list[bytes] = []
        super().__init__()

    def handle(self, conn):
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += chunk
        self.heads.append(got)
        body = b'{"error": {"message": "the body is too large"}}'
        conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        conn.shutdown(socket.SHUT_WR)
        time.sleep(0.2)


@pytest.mark.parametrize("size", [10, 300_000])
def test_a_server_that_answers_before_reading_the_body_is_heard(home, size):
    """A request's head and a small body leave together; a large body is still being sent when
    the server answers and closes: either way its answer is what fw reports, never a broken pipe."""
    server = EarlyAnswerServer()
    try:
        setup_agent(f"http://127.0.0.1:{server.port}/v1")
        r = fw("agent", "run", "a1", "--message", "x" * size, "--json")
    finally:
        server.close()
    assert r.exit_code == 7, r
    error = r.json["error"]
    assert error["status"] == 413 and "the body is too large" in error["message"] and error["tries"] == 1, error
    if size == 10:
        assert b'"model"' in server.heads[0]  # the head and the body came in one piece
    assert CANARY not in r.output


def test_a_429_with_retry_after_is_tried_again_after_the_wait_it_asks_for(home):
    script = [{"status": 429, "headers": {"Retry-After": "1"}, "body": '{"error": {"message": "slow down"}}'}, {"content": "ok now"}]
    with ChatServer(script) as server:
        setup_agent(server.base_url)
        human = fw("agent", "run", "a1", "--message", "hi")
    assert human.exit_code == 0, human
    assert "ok now" in human.stdout
    assert "answered 429" in human.stderr and "trying again in 1 s (try 2 of 3)" in human.stderr
    assert len(server.requests) == 2


def test_5xx_answers_are_tried_again_up_to_twice(home):
    with ChatServer([{"status": 500, "body": "boom"}, {"status": 503, "body": "busy"}, {"content": "third time"}]) as server:
        setup_agent(server.base_url)
        doc = run_json()
    assert (doc["status"], doc["answer"], doc["rounds"]) == ("completed", "third time", 1)
    assert len(server.requests) == 3
    assert server.requests[0]["json"] == server.requests[2]["json"]  # the same request each time


def test_after_three_failed_tries_the_error_says_so_and_the_run_is_ended(home):
    with ChatServer([{"status": 502, "body": "bad gateway"}], repeat_last=True) as server:
        setup_agent(server.base_url)
        error = run_json(code=7)["error"]
    assert len(server.requests) == 3
    assert (error["code"], error["reason"], error["status"], error["tries"]) == ("unavailable", "model", 502, 3)
    assert "502" in error["message"] and "3 tries" in error["message"]
    assert fwj("run", "show", error["run_id"])["status"] == "ended"


@pytest.mark.parametrize("status", [408, 409, 504])
def test_timeouts_conflicts_and_gateway_timeouts_are_retried(home, status):
    with ChatServer([{"status": status, "body": "again"}, {"content": "fine"}]) as server:
        setup_agent(server.base_url)
        assert run_json()["answer"] == "fine"
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_other_4xx_answers_are_never_retried(home, status):
    with ChatServer([{"status": status, "body": "no"}, {"content": "must not be asked for"}]) as server:
        setup_agent(server.base_url)
        error = run_json(code=7)["error"]
    assert len(server.requests) == 1
    assert error["status"] == status and error["tries"] == 1 and "tries" not in error["message"]
    if status == 401:  # the provider is named: the hint works as pasted
        assert "`fw resource write provider p1 --api-key-stdin`" in error["hint"], error


def test_a_dropped_connection_is_tried_again(home):
    with ChatServer([{"drop": True}, {"content": "reconnected"}]) as server:
        setup_agent(server.base_url)
        assert run_json()["answer"] == "reconnected"
    assert len(server.requests) == 2


def test_a_retry_after_past_the_timeout_is_not_waited_for(home):
    with ChatServer([{"status": 429, "headers": {"Retry-After": "120"}, "body": "later"}, {"content": "never"}]) as server:
        setup_agent(server.base_url)
        error = run_json("--timeout", "3", code=7)["error"]
    assert len(server.requests) == 1
    assert error["status"] == 429 and error["tries"] == 1
    assert "asked to wait 120 s" in error["message"]


def test_one_http_client_serves_every_round_of_a_run(home):
    script = [{"tool_calls": [{"name": "framework_resource_list", "arguments": {"kind": "agent"}}]}] * 2 + [{"content": "done"}]
    with ChatServer(script) as server:
        setup_agent(server.base_url)
        assert run_json()["rounds"] == 3
    assert len({r["client_port"] for r in server.requests}) == 1  # one kept-alive connection


# -- finish_reason and refusals ----------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_a_cut_answer_reports_finish_reason_length(home, stream):
    with ChatServer([{"content": "The first half of", "finish_reason": "length", "stream": stream}], repeat_last=True) as server:
        setup_agent(server.base_url)
        doc = run_json()
        human = fw("agent", "run", "a1", "--message", "hi")
    assert (doc["status"], doc["answer"], doc["finish_reason"]) == ("completed", "The first half of", "length")
    assert "The first half of" in human.stdout and "length limit" in human.stdout


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusals_text_is_the_answer(home, stream):
    with ChatServer([{"refusal": "I can't help with that.", "stream": stream}]) as server:
        setup_agent(server.base_url)
        doc = run_json()
    assert (doc["status"], doc["answer"], doc["finish_reason"]) == ("completed", "I can't help with that.", "stop")


@pytest.mark.parametrize("stream", [False, True])
def test_a_content_filter_is_reported_not_called_an_empty_answer(home, stream):
    with ChatServer([{"content": None, "finish_reason": "content_filter", "stream": stream}], repeat_last=True) as server:
        setup_agent(server.base_url)
        doc = run_json()
        human = fw("agent", "run", "a1", "--message", "hi")
    assert (doc["status"], doc["answer"], doc["finish_reason"]) == ("completed", "", "content_filter")
    assert human.exit_code == 0 and "content filter" in human.stdout and "empty answer" not in human.output


def test_an_empty_answer_that_nothing_explains_is_still_unavailable(home):
    with ChatServer([{"content": ""}]) as server:
        setup_agent(server.base_url)
        error = run_json(code=7)["error"]
    assert "empty answer" in error["message"]


# -- tool calls ----------------------------------------------------------------------------------
def test_every_tool_call_the_model_asks_for_is_audited_malformed_ones_too(home):
    calls = [{"name": "framework_resource_list", "arguments": {"kind": "agent"}},
             {"name": "framework_resource_list", "arguments": "{not json"},
             {"name": "framework_resource_list", "arguments": "[1, 2]"},
             {"name": "framework_not_granted", "arguments": "{also not json"}]
    with ChatServer([{"tool_calls": calls}, {"content": "done"}]) as server:
        setup_agent(server.base_url)
        doc = run_json()
    assert [(c["outcome"], c.get("error")) for c in doc["tool_calls"]] == [
        ("ok", None), ("error", "invalid"), ("error", "invalid"), ("refused", "denied")]
    lines = audit_lines(home)
    assert [(l["tool"], l["outcome"], l["error"]) for l in lines] == [
        ("framework_resource_list", "ok", None), ("framework_resource_list", "error", "invalid"),
        ("framework_resource_list", "error", "invalid"), ("framework_not_granted", "refused", "denied")]
    answers = [json.loads(m["content"]) for m in server.requests[1]["json"]["messages"] if m["role"] == "tool"]
    assert "not valid JSON" in answers[1]["error"]["message"]
    assert "not a JSON object" in answers[2]["error"]["message"]
    assert answers[3]["error"]["code"] == "denied"


def test_streamed_tool_call_pieces_without_index_are_merged_by_id(home):
    calls = [{"name": "framework_resource_list", "arguments": {"kind": "agent"}, "id": "call_a"},
             {"name": "framework_resource_list", "arguments": {"kind": "model"}, "id": "call_b"}]
    with ChatServer([{"tool_calls": calls, "stream": True, "no_index": True}, {"content": "both listed"}]) as server:
        setup_agent(server.base_url)
        doc = run_json()
    assert doc["tool_calls"] == [{"name": "framework_resource_list", "outcome": "ok"}] * 2
    assistant = server.requests[1]["json"]["messages"][2]
    assert [(c["id"], json.loads(c["function"]["arguments"])) for c in assistant["tool_calls"]] == [
        ("call_a", {"kind": "agent"}), ("call_b", {"kind": "model"})]


# -- error objects in 200 answers ------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_an_error_object_gives_the_servers_message_and_a_fitting_hint(home, stream):
    error = {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}
    with ChatServer([{"error": error, "content": "partial", "stream": stream}]) as server:
        setup_agent(server.base_url)
        got = run_json(code=7)["error"]
    assert "Rate limit reached for requests" in got["message"]
    assert "OpenAI-compatible" not in got["hint"] and "rate limit" in got["hint"]
    assert len(server.requests) == 1


@pytest.mark.parametrize("offset", [180, 190, 199])
def test_an_error_objects_message_is_redacted_before_it_is_cut(home, offset):
    tail = " and more" * 30
    with ChatServer([{"error": {"message": "x" * offset + CANARY + tail}}]) as server:
        setup_agent(server.base_url)
        got = run_json(code=7)["error"]
    assert got["message"].endswith(": " + ("x" * offset + "[redacted]" + tail)[:200] + "..."), got


# -- answers that trickle ---------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_agent_run_timeout_bounds_an_answer_that_trickles(home, stream):
    with ChatServer([{"trickle": 0.5, "stream": stream}], repeat_last=True) as server:
        setup_agent(server.base_url)
        r = fw_proc("agent", "run", "a1", "--message", "hi", "--timeout", "3", "--json", home=home, timeout=60)
    assert r.exit_code == 7, r
    error = r.json["error"]
    assert error["reason"] == "model" and "in time" in error["message"]
    assert len(server.requests) == 1  # no retry past the deadline


def test_dispatch_timeout_bounds_an_answer_that_trickles(home):
    with ChatServer([{"trickle": 0.5}], repeat_last=True) as server:
        setup_agent(server.base_url)
        fwj("principal", "create", "alice", "--kind", "user")
        fwj("principal", "create", "ops", "--kind", "agent")
        fwj("binding", "set", "ops", "--agent", "a1")
        fwj("session", "create", "s1", "--member", "alice", "--member", "ops")
        fwj("message", "post", "s1", "--as", "alice", "hello @ops")
        r = fw_proc("dispatch", "--once", "--timeout", "3", "--json", home=home, timeout=60)
    assert r.exit_code == 0, r
    assert r.json["turns"]["failed"] == 1, r.json
    turn = fwj("session", "show", "s1")["session"]["turns"][0]
    assert turn["status"] == "failed"


# -- streaming to a terminal --------------------------------------------------------------------------
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def read_until(fd, wanted, buffer, deadline):
    while wanted not in buffer.decode(errors="replace"):
        assert time.monotonic() < deadline, f"never saw {wanted!r}: {buffer!r}"
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the other end closed
                chunk = b""
            if not chunk:
                assert wanted in buffer.decode(errors="replace"), f"never saw {wanted!r}: {buffer!r}"
            buffer += chunk
    return buffer


def read_to_end(fd, buffer, deadline):
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return buffer
            if not chunk:
                return buffer
            buffer += chunk
    raise AssertionError(f"the output never ended: {buffer!r}")


def test_on_a_terminal_the_answer_shows_as_it_arrives_and_stays_redacted(home):
    gate = threading.Event()
    answer = f"Hello there, the key is {CANARY} and that is all."
    with ChatServer([{"content": answer, "gate": gate}]) as server:
        setup_agent(server.base_url)
        master, slave = pty.openpty()
        proc = subprocess.Popen([fw_bin(), "agent", "run", "a1", "--message", "hi"], stdin=subprocess.DEVNULL,
                                stdout=slave, stderr=subprocess.PIPE, env={**os.environ, "FW_HOME": str(home)})
        os.close(slave)
        try:
            deadline = time.monotonic() + 30
            # The server holds the rest back until the first piece has reached the terminal.
            shown = read_until(master, "Hell", b"", deadline)
            gate.set()
            shown = read_to_end(master, shown, deadline)
            stderr = proc.communicate(timeout=30)[1].decode()
        finally:
            gate.set()
            os.close(master)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, stderr
    assert server.requests[0]["json"]["stream"] is True
    text = ANSI.sub("", shown.decode()).replace("\r\n", "\n")
    assert CANARY not in text and CANARY not in stderr
    assert text.count("Hello there, the key is [redacted] and that is all.") == 1, text
    assert "completed, 1 round" in text


def test_json_mode_and_pipes_do_not_ask_to_stream(home):
    with ChatServer([{"content": "whole"}], repeat_last=True) as server:
        setup_agent(server.base_url)
        assert run_json()["answer"] == "whole"
        human = fw("agent", "run", "a1", "--message", "hi")
    assert human.exit_code == 0 and "whole" in human.stdout
    assert [r["json"].get("stream") for r in server.requests] == [None, None]
