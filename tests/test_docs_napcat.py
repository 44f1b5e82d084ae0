"""docs/qq-napcat.md runs as printed: its shell blocks, in order, on a fresh home, with the
model, NapCat's HTTP server and fw's listener moved to free local ports (a scripted model, the
fake OneBot implementation). `fw bot serve` runs in the background while the test plays NapCat:
its reverse WebSocket with the doc's token, and its HTTP client with the doc's secret. Each
group message that @s the bot gets one answer, quoting it."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time

import httpx
from conftest import CANARY, REPO
from fakes.chat_server import ChatServer
from fakes.onebot_server import SELF_ID, OneBotServer, group_message, ok, signed
from websockets.sync.client import connect

DOC = REPO / "docs" / "qq-napcat.md"
REPLY = [{"tool_calls": [{"name": "event_reply", "arguments": {"text": "answered"}}]}, {"content": "done"}]


class Model(ChatServer):
    """Replies through event_reply to a new message, then says done, whatever the order."""

    def next_step(self, request):
        with self._lock:
            self.requests.append(request)
        messages = (request.get("json") or {}).get("messages") or [{}]
        return REPLY[1] if messages[-1].get("role") == "tool" else REPLY[0]


def shell_blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", DOC.read_text(), re.S | re.M)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_napcat_guide_runs_as_printed_and_a_mention_gets_one_quoted_answer(tmp_path):
    blocks = shell_blocks()
    assert len(blocks) == 4, blocks
    doc = DOC.read_text()
    token = re.search(r'"token": "(choose-a-long-token-here)"', doc).group(1)
    secret = re.search(r'"token": "(choose-a-long-secret-here)"', doc).group(1)
    home = tmp_path / "napcat-home"
    subprocess.run(["fw", "home", "init", str(home)], check=True, capture_output=True, env={**os.environ, "PATH": _path()})
    with Model([]) as model, OneBotServer(token=token) as napcat_http:
        port = free_port()
        env = {**os.environ, "FW_HOME": str(home), "OPENAI_API_KEY": CANARY, "PATH": _path()}

        def local(text: str) -> str:
            return (text.replace("https://api.openai.com/v1", model.base_url)
                        .replace("http://127.0.0.1:3000", napcat_http.url).replace("127.0.0.1:8080", f"127.0.0.1:{port}"))

        def run_block(block: str) -> None:
            for line in block.strip().splitlines():
                done = subprocess.run(["bash", "-c", local(line)], env=env, capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, (line, done.stdout, done.stderr)
                assert CANARY not in done.stdout + done.stderr

        setup, websocket, http, check = blocks
        run_block(setup)
        # -- 2a: the reverse WebSocket -----------------------------------------------------
        *adds, serve = websocket.strip().splitlines()
        run_block("\n".join(adds))
        with Served(local(serve), env) as served:
            url = f"ws://127.0.0.1:{port}/onebot/v11/ws"
            with connect(url, additional_headers={"Authorization": f"Bearer {token}", "X-Self-ID": str(SELF_ID),
                                                  "X-Client-Role": "Universal"}, open_timeout=10) as ws:
                ws.send(json.dumps(group_message("not for the bot", message_id=500, at_bot=False)))
                ws.send(json.dumps(group_message("what is new?", message_id=501)))
                ws.send(json.dumps(group_message("what is new?", message_id=501)))  # sent twice: answered once
                frame = json.loads(ws.recv(timeout=30))
                assert frame["action"] == "send_group_msg"
                assert frame["params"]["message"][0] == {"type": "reply", "data": {"id": "501"}}
                ws.send(json.dumps(ok({"message_id": 9001}, frame["echo"])))
                served.wait_for("message.received from 20002 in group 30003: run run-")
                time.sleep(1)
                try:
                    extra = ws.recv(timeout=1)
                except TimeoutError:
                    extra = None
                assert extra is None, extra  # nothing for the message that did not @ the bot, nothing twice
            lines = served.stop()
        assert "not handled (not_mentioned)" in lines and "a repeat of a report already handled" in lines, lines
        # -- 2b: HTTP ---------------------------------------------------------------------------
        *adds, serve = http.strip().splitlines()
        run_block("\n".join(adds))
        with Served(local(serve), env) as served:
            body = json.dumps(group_message("and over http?", message_id=601)).encode()
            sent = httpx.post(f"http://127.0.0.1:{port}/", content=body, timeout=10,
                              headers={"Content-Type": "application/json", "X-Self-ID": str(SELF_ID), "X-Signature": signed(secret, body)})
            assert sent.status_code == 204
            served.wait_for("message.received from 20002 in group 30003: run run-")
            served.stop()
        replies = napcat_http.sent("send_group_msg")
        assert len(replies) == 1 and replies[0]["params"]["message"][0] == {"type": "reply", "data": {"id": "601"}}
        assert replies[0]["authorization"] == f"Bearer {token}"
        run_block(check)


class Served:
    """`fw bot serve` as printed in the guide, in the background; its lines kept."""

    def __init__(self, command: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(["bash", "-c", f"exec {command}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.wait_for("listening on")

    def wait_for(self, words: str, seconds: float = 30) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise AssertionError(f"fw bot serve ended: {''.join(self.lines)}")
            self.lines.append(line)
            if words in line:
                return line
        raise AssertionError(f"no line with {words!r}: {''.join(self.lines)}")

    def stop(self) -> str:
        self.proc.send_signal(2)
        out, _ = self.proc.communicate(timeout=30)
        self.lines.append(out)
        assert self.proc.returncode == 0 and "Traceback" not in out, out
        return "".join(self.lines)

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc_info) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def _path() -> str:
    from conftest import fw_bin

    return os.path.dirname(fw_bin()) + os.pathsep + os.environ.get("PATH", "")
