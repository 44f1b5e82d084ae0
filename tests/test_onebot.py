"""The onebot adapter and `fw bot serve`, played from the other side: a fake OneBot v11 HTTP
API that records the actions it gets, and a WebSocket client that connects as NapCat does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import CANARY, fw, fw_bin, fw_proc, fwj, snapshot, state_execute, state_rows, wait_until_gone
from fakes.chat_server import ChatServer
from fakes.onebot_server import SELF_ID, OneBotServer, failed, group_message, heartbeat, lifecycle, ok, signed
from serving import Served
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

TOKEN = "ob-tok-4d9e2a7c1f"
SECRET = "ob-sig-8b3f6e0d2a"
FAKE_MCP = str(Path(__file__).parent / "fakes" / "mcp_server.py")
REPLY = [{"tool_calls": [{"name": "event_reply", "arguments": {"text": "hello group"}}]}, {"content": "done"}]
EVENT = {"type": "message.received", "actor": {"id": "20002"}, "group": {"id": "30003"}, "message": {"id": "777", "text": "hi", "mentions_bot": True}}


def setup(base_url, **agent_fields):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": base_url, "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "m-1", "capabilities": {"tool_call": True}}))
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps({"model": "m1", "events": ["message.*"], **agent_fields}))
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1")


def add_bot(*flags, token=TOKEN, secret=None):
    doc = fwj("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", *flags,
              *(["--access-token-stdin"] if token else []), input=token)
    if secret:
        fwj("bot", "set", "qq", "--secret-stdin", input=secret)
    return doc


def no_token_outside_secrets(home):
    for path in home.rglob("*"):
        if path.is_file() and "secrets" not in path.relative_to(home).parts:
            data = path.read_bytes()
            assert TOKEN.encode() not in data and SECRET.encode() not in data, path


class Serve(Served):
    """`fw bot serve qq` as a real process, on a free port, its lines read as JSON."""

    def __init__(self, home, *args):
        super().__init__(home, "bot", "serve", "qq", "--listen", "127.0.0.1:0", *args)
        self.listening = self.next("listening")

    def next(self, kind, timeout=30):
        return super().next(lambda record: record.get("type") == kind, timeout)


def post(url, report, *, secret=SECRET, signature=None):
    body = report if isinstance(report, bytes) else json.dumps(report).encode()
    headers = {"Content-Type": "application/json", "X-Self-ID": str(SELF_ID)}
    if signature is not None or secret:
        headers["X-Signature"] = signature if signature is not None else signed(secret, body)
    return httpx.post(url, content=body, headers=headers, timeout=10)


def napcat(ws_url, token=TOKEN):
    headers = {"X-Self-ID": str(SELF_ID), "X-Client-Role": "Universal"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return connect(ws_url, additional_headers=headers, open_timeout=10)


def leftovers(marker):
    out = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


# -- adding and showing -------------------------------------------------------------------------
def test_a_onebot_bot_keeps_its_token_in_secrets_and_shows_how_it_is_connected(home):
    setup("http://127.0.0.1:9/v1")
    with OneBotServer(token=TOKEN) as ob:
        doc = add_bot("--url", ob.url, secret=SECRET)
        assert (doc["connection"], doc["online"], doc["access_token_set"]) == ("http", True, True)
        assert ob.sent("get_status")[-1]["authorization"] == f"Bearer {TOKEN}"
        assert len(doc["supported_apis"]) == 16
        shown = fwj("bot", "show", "qq")
        assert shown["secret_set"] is True and "http" in fw("bot", "show", "qq").stdout
        ob.online = False
        assert fwj("bot", "show", "qq")["online"] is False
    no_token_outside_secrets(home)
    assert json.loads((home / "secrets/bot/qq.json").read_text()) == {"access_token": TOKEN, "secret": SECRET}
    assert fwj("bot", "remove", "qq")["removed"] is True and not (home / "secrets/bot/qq.json").exists()


def test_a_socket_bot_is_not_connected_until_a_socket_comes(home):
    setup("http://127.0.0.1:9/v1")
    doc = add_bot()
    assert (doc["connection"], doc["online"]) == ("not connected", False) and "fw bot serve qq" in doc["note"]
    assert "not connected" in fw("bot", "show", "qq").stdout


def test_bad_onebot_bots_are_refused_and_change_nothing(home):
    setup("http://127.0.0.1:9/v1")
    before = snapshot(home)
    for args, stdin, words in [
        (["--adapter", "onebot"], None, "needs a --url"),
        (["--adapter", "onebot", "--access-token-stdin"], "  ", "empty"),
        (["--adapter", "onebot", "--url", "ftp://x"], None, "url"),
    ]:
        r = fw("bot", "add", "qq", "--principal", "p1", *args, "--json", input=stdin)
        assert r.exit_code == 4 and words in json.dumps(r.json["error"]), (args, r)
    assert snapshot(home) == before


def test_home_check_reports_a_onebot_bot_with_neither_a_url_nor_a_token(home):
    setup("http://127.0.0.1:9/v1")
    (home / "bots").mkdir(exist_ok=True)
    (home / "bots/lost.yaml").write_text("adapter: onebot\nprincipal: p1\n")
    add_bot()
    doc = fwj("home", "check", code=4)
    assert [(p["code"], p["path"]) for p in doc["problems"]] == [("unreachable", "bots/lost.yaml")]


# -- over HTTP ----------------------------------------------------------------------------------
def test_the_platform_reporting_offline_makes_the_next_call_adapter_offline_with_no_action_sent(home):
    setup("http://127.0.0.1:9/v1")
    with OneBotServer(token=TOKEN) as ob:
        add_bot("--url", ob.url)
        run = fwj("event", "handle", "qq", "--event", json.dumps(EVENT), "--no-run")["run"]
        ob.online = False
        r = fw("tool", "call", "--run", run["run_id"], "event_reply", "--args", '{"text": "hi"}')
        assert r.exit_code == 7 and r.json["error"]["reason"] == "adapter_offline", r
        assert ob.sent("send_group_msg") == [] and ob.sent("get_status")


def test_a_onebot_error_answer_is_a_clear_unavailable_with_no_token_anywhere(home):
    setup("http://127.0.0.1:9/v1")
    with OneBotServer(token=TOKEN) as ob:
        add_bot("--url", ob.url)
        run = fwj("event", "handle", "qq", "--event", json.dumps(EVENT), "--no-run")["run"]
        ob.answers["send_group_msg"] = failed(1200, f"send failed: token {TOKEN} is muted in this group")
        r = fw("tool", "call", "--run", run["run_id"], "event_reply", "--args", '{"text": "hi"}')
        error = r.json["error"]
        assert r.exit_code == 7 and (error["code"], error["reason"], error["action"]) == ("unavailable", "bot", "send_group_msg")
        assert "retcode 1200" in error["message"] and "send failed" in error["message"]
        assert TOKEN not in r.output
        ob.token = "changed-elsewhere"  # now the token is wrong: HTTP 403 as NapCat answers
        ob.answers.clear()
        ob.online = True
        assert fwj("bot", "show", "qq")["online"] is False
    no_token_outside_secrets(home)
    audit = (home / "audit.jsonl").read_text()
    assert "event_reply" in audit and TOKEN not in audit


def test_platform_tools_go_out_as_their_onebot_actions_with_ids_as_numbers(home):
    setup("http://127.0.0.1:9/v1", allowed_platform_tools=["platform_mute_member", "platform_get_group_member_list",
                                                            "platform_send_message"])
    with OneBotServer() as ob:
        add_bot("--url", ob.url, token=None)
        run = fwj("event", "handle", "qq", "--event", json.dumps(EVENT), "--no-run")["run"]["run_id"]
        ob.answers["get_group_member_list"] = ok([{"user_id": 20002, "nickname": "Alice", "card": "", "role": "member"}])
        members = fwj("tool", "call", "--run", run, "platform_get_group_member_list", "--args", '{"group_id": "30003"}')
        assert members["members"] == [{"user_id": "20002", "name": "Alice", "role": "member"}]
        fwj("tool", "call", "--run", run, "platform_mute_member", "--args", '{"group_id": "30003", "user_id": "20002"}')
        sent = fwj("tool", "call", "--run", run, "platform_send_message", "--args",
                   '{"target_type": "person", "target_id": "20002", "text": "[CQ:at,qq=all] hi"}')
        assert sent["target_id"] == "20002" and sent["message_id"].isdigit()
    ban = ob.sent("set_group_ban")[0]
    assert ban["params"] == {"group_id": 30003, "user_id": 20002, "duration": 600} and ban["authorization"] is None
    private = ob.sent("send_private_msg")[0]["params"]
    assert private == {"user_id": 20002, "message": [{"type": "text", "data": {"text": "[CQ:at,qq=all] hi"}}]}


# -- fw bot serve ---------------------------------------------------------------------------------
def test_a_signed_http_report_is_answered_through_event_reply_as_one_send_group_msg(home):
    with ChatServer(REPLY) as chat, OneBotServer(token=TOKEN) as ob:
        setup(chat.base_url)
        add_bot("--url", ob.url, secret=SECRET)
        with Serve(home) as serve:
            url = serve.listening["http"]
            assert serve.listening["websocket"].endswith("/onebot/v11/ws")
            for signature in ("sha1=0000", ""):  # a bad signature, a missing one: refused, nothing runs
                bad = post(url, group_message("hi"), secret=None, signature=signature or None)
                assert bad.status_code == 401
            assert serve.next("refused")["what"] == "report"
            assert fwj("run", "list")["runs"] == [] and chat.requests == []
            for junk in (b"not json", {"post_type": "message", "message_type": "group"}, {"post_type": "??"}, [1, 2]):
                assert post(url, junk).status_code == 204  # read or not, a report is answered
            assert post(url, heartbeat()).status_code == 204
            rebound = httpx.post(url, content=b"{}", headers={"Host": "evil.example:80"}, timeout=10)
            assert rebound.status_code == 400  # on loopback, only a loopback Host header
            assert post(url, group_message("hi")).status_code == 204
            handled = serve.next("handled")
            code, err = serve.stop()
    assert handled["tool_calls"] == [{"name": "event_reply", "outcome": "ok"}] and handled["status"] == "completed"
    assert code == 0 and "Traceback" not in err  # stopped with no run in flight
    sends = ob.sent("send_group_msg")
    assert len(sends) == 1 and sends[0]["authorization"] == f"Bearer {TOKEN}"
    assert sends[0]["params"] == {"group_id": 30003, "message": [{"type": "reply", "data": {"id": "777"}},
                                                                 {"type": "text", "data": {"text": "hello group"}}]}
    # its id asked once at the start; online by the heartbeat it sent (no get_status); the reply on the same kept-alive connection
    asked, replied = ob.actions[-2:]
    assert [a["action"] for a in ob.actions] == ["get_status", "get_status", "get_login_info", "send_group_msg"]  # `bot add`, `bot set`
    assert asked["connection"] == replied["connection"]
    assert chat.requests[0]["json"]["messages"][-1]["content"] == "hi"  # the plain text of the segments
    assert [r["why"] for r in serve.seen if r.get("type") == "ignored"][:1] == ["a report that is not JSON"]
    no_token_outside_secrets(home)


def test_over_the_reverse_websocket_a_group_message_is_answered_on_the_same_socket(home):
    with ChatServer(REPLY) as chat:
        setup(chat.base_url)
        add_bot()
        with Serve(home) as serve:
            ws_url = serve.listening["websocket"]
            for token in ("wrong-token", None):  # refused at the handshake
                with pytest.raises(InvalidStatus) as refused:
                    napcat(ws_url, token).close()
                assert refused.value.response.status_code == 403
            with napcat(ws_url) as ws:
                assert serve.next("connected")["self_id"] == str(SELF_ID)
                ws.send(json.dumps(lifecycle()))
                ws.send("{not json")
                ws.send(json.dumps({"post_type": "notice", "notice_type": "group_increase"}))  # no ids: survived
                shown = fwj("bot", "show", "qq")  # another process reads the socket's state
                assert (shown["connection"], shown["online"]) == ("socket", True)
                ws.send(json.dumps(group_message("hi", as_segments=False)))
                frame = json.loads(ws.recv(timeout=30))
                assert frame["action"] == "send_group_msg"
                assert frame["params"] == {"group_id": 30003, "message": [{"type": "reply", "data": {"id": "777"}},
                                                                          {"type": "text", "data": {"text": "hello group"}}]}
                ws.send(json.dumps(ok({"message_id": 4242}, frame["echo"])))
                handled = serve.next("handled")
                assert handled["tool_calls"] == [{"name": "event_reply", "outcome": "ok"}]
                with pytest.raises(TimeoutError):
                    ws.recv(timeout=0.5)  # one action, no more
                ws.send(json.dumps(heartbeat(online=False)))
                deadline = time.monotonic() + 20  # the server keeps it in the background: on a loaded machine, not at once
                while fwj("bot", "show", "qq")["online"] is not False and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert fwj("bot", "show", "qq")["online"] is False
            serve.next("disconnected")
            shown = fwj("bot", "show", "qq")
            assert (shown["connection"], shown["online"]) == ("not connected", False)
            code, err = serve.stop()
    assert code == 0 and "Traceback" not in err
    assert sum(r.get("type") == "refused" for r in serve.seen) >= 1


def test_a_socket_that_drops_mid_call_is_unavailable_for_that_call(home):
    script = [{"tool_calls": [{"name": "event_reply", "arguments": {"text": "hello"}}]}, {"content": "done"}]
    with ChatServer(script) as chat:
        setup(chat.base_url)
        add_bot()
        with Serve(home) as serve:
            with napcat(serve.listening["websocket"]) as ws:
                ws.send(json.dumps(group_message("hi")))
                assert json.loads(ws.recv(timeout=30))["action"] == "send_group_msg"
            handled = serve.next("handled")  # the socket closed, and never answered
    assert handled["tool_calls"] == [{"name": "event_reply", "outcome": "error"}]
    second = chat.requests[1]["json"]["messages"][-1]["content"]
    assert "unavailable" in second and "socket closed" in second


def test_ctrl_c_ends_the_runs_in_progress_and_leaves_nothing_running(home, tmp_path):
    marker_mcp, marker_exec = f"mcp-{uuid.uuid4().hex}", f"exec-{uuid.uuid4().hex}"
    script = [{"tool_calls": [{"name": "framework_exec", "arguments": {
        "argv": ["python3", "-c", "import time; time.sleep(300)", marker_exec], "timeout_seconds": 600}}]},
        {"content": "never"}]
    with ChatServer(script) as chat:
        fwj("resource", "write", "mcp", "files", "--create", "--data",
            json.dumps({"transport": "stdio", "command": sys.executable, "args": [FAKE_MCP, marker_mcp]}))
        setup(chat.base_url, builtin_tools=["local_execution"], execution={"enabled": True}, mcps=["files"])
        add_bot()
        with Serve(home, "--workers", "1") as serve:
            with napcat(serve.listening["websocket"]) as ws:
                for n in range(3):  # one runs, two wait
                    ws.send(json.dumps(group_message(f"hi {n}", message_id=900 + n)))
                deadline = time.time() + 120
                while not (leftovers(marker_exec) and leftovers(marker_mcp)) and time.time() < deadline:
                    time.sleep(0.2)
                assert leftovers(marker_exec) and leftovers(marker_mcp), (chat.requests, serve.seen)
                code, err = serve.stop()
    assert code == 130 and "Traceback" not in err, err
    assert [r for r in serve.seen if r.get("type") == "not-json"] == []
    assert serve.seen[-1].get("error", {}).get("code") == "interrupted"  # the last line: why it stopped
    assert wait_until_gone(marker_exec, 5) == [] and wait_until_gone(marker_mcp, 5) == []  # killed before it exited: gone as the kernel reaps them
    runs = fwj("run", "list")["runs"]
    assert [r["status"] for r in runs] == ["ended"]
    # one group is one conversation: one ran, two waited, and still wait for the next server
    assert [{k: r[k] for k in ("ended_runs", "waiting")} for r in serve.seen if r.get("type") == "stopped"] == [{"ended_runs": 1, "waiting": 2}]
    assert [e["status"] for e in state_rows(home, "SELECT status FROM bot_events ORDER BY id")] == ["cancelled", "pending", "pending"]


def test_serve_refuses_a_local_bot_a_bad_listen_and_a_port_in_use(home):
    setup("http://127.0.0.1:9/v1")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")
    add_bot()
    for args, code, words in [
        (["desk"], 4, "for onebot bots"),
        (["qq", "--listen", "nowhere"], 4, "HOST:PORT"),
        (["qq", "--workers", "0"], 4, "concurrency"),
    ]:
        r = fw("bot", "serve", *args, "--json")
        assert r.exit_code == code and words in r.json["error"]["message"], (args, r)
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = fw("bot", "serve", "qq", "--listen", f"127.0.0.1:{taken.getsockname()[1]}", "--json")
        assert r.exit_code == 6 and r.json["error"]["code"] == "in_use", r


def test_reports_become_the_contracts_events_with_a_line_for_each(home):
    reports = [
        {"post_type": "message", "message_type": "private", "sub_type": "friend", "self_id": SELF_ID, "user_id": 20002,
         "message_id": 41, "message": "&#91;not a code&#93; [CQ:face,id=1]hello", "sender": {"nickname": "Alice"}},
        {"post_type": "request", "request_type": "friend", "self_id": SELF_ID, "user_id": 20003, "flag": "fr-1", "comment": "hi"},
        {"post_type": "request", "request_type": "group", "sub_type": "invite", "self_id": SELF_ID, "user_id": 20004,
         "group_id": 30004, "flag": "inv-1"},
        {"post_type": "notice", "notice_type": "group_increase", "sub_type": "approve", "self_id": SELF_ID, "user_id": 20005,
         "group_id": 30003, "operator_id": 1},
        {"post_type": "notice", "notice_type": "group_decrease", "sub_type": "leave", "self_id": SELF_ID, "user_id": 20006,
         "group_id": 30003, "operator_id": 0},
        {"post_type": "message", "message_type": "group", "self_id": SELF_ID, "user_id": SELF_ID, "group_id": 30003,
         "message_id": 42, "message": "my own"},
    ]
    with ChatServer([{"content": "ok"}], repeat_last=True) as chat:
        setup(chat.base_url)
        fwj("binding", "set", "p1", "--agent", "a1", "--policy", "all")
        add_bot("--url", "http://127.0.0.1:9")  # its HTTP API is never reached: the agent only answers
        proc = subprocess.Popen([fw_bin(), "bot", "serve", "qq", "--listen", "127.0.0.1:0"], env={**os.environ, "FW_HOME": str(home)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = proc.stdout.readline()
            assert "ws://127.0.0.1:" in first and "/onebot/v11/ws" in first and "HTTP client" in first, first
            url = first.split("listening on ", 1)[1].split(" ", 1)[0].rstrip(".")
            for report in reports:
                assert post(url, report, secret=None).status_code == 204
            lines = []
            while len(lines) < len(reports):
                line = proc.stdout.readline().strip()
                if line and "its own id is" not in line:
                    lines.append(line)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    assert chat.requests[0]["json"]["messages"][-1]["content"] == "[not a code] hello"
    text = "\n".join(lines)
    assert "ignored: a message the bot itself sent" in text
    for words in ("message.received from 20002: run run-", "friend.request_received from 20003: not handled (event_not_selected)",
                  "bot.invited_to_group from 20004 in group 30004: not handled", "group.member_joined from 20005 in group 30003",
                  "group.member_left from 20006 in group 30003"):
        assert words in text, (words, text)


def test_another_process_acts_on_a_socket_bot_through_the_server_that_holds_its_socket_in_order(home):
    """A socket-only bot's actions from a run in another process (`fw tool call`) go through
    the outbox of the `fw bot serve` that holds the socket, are sent on it in the order they
    were asked, and come back with the implementation's answers."""
    import threading

    setup("http://127.0.0.1:9/v1", allowed_platform_tools=["platform_send_message"])
    add_bot()
    with Serve(home) as serve:
        with napcat(serve.listening["websocket"]) as ws:
            serve.next("connected")
            run = fwj("event", "handle", "qq", "--event", json.dumps(EVENT), "--no-run")["run"]["run_id"]
            frames = []

            def answer_all(count):
                for n in range(count):
                    frame = json.loads(ws.recv(timeout=30))
                    frames.append(frame)
                    ws.send(json.dumps(ok({"message_id": 5000 + len(frames)}, frame["echo"])))

            def send(text):
                return fw_proc("tool", "call", "--run", run, "platform_send_message", "--args",
                               json.dumps({"target_type": "group", "target_id": "30003", "text": text}), "--json", home=home)

            answering = threading.Thread(target=answer_all, args=(4,))
            answering.start()
            first = send("one")
            assert first.exit_code == 0, first
            assert first.json["message_id"] == "5001"
            calls = [threading.Thread(target=send, args=(f"at once {n}",)) for n in range(3)]
            for call in calls:
                call.start()
            for call in calls:
                call.join(60)
            answering.join(30)
            asked = state_rows(home, "SELECT id, params, status FROM onebot_outbox ORDER BY id")
            assert [row["status"] for row in asked] == ["answered"] * 4
            sent_texts = [f["params"]["message"][0]["data"]["text"] for f in frames]
            assert sent_texts == [json.loads(row["params"])["message"][0]["data"]["text"] for row in asked]  # in the order asked
            assert all(f["action"] == "send_group_msg" for f in frames)
        serve.next("disconnected")
        refused = send("nobody holds the socket now")
        assert refused.exit_code == 7 and refused.json["error"]["reason"] == "adapter_offline", refused
        code, err = serve.stop()
    assert code == 0 and "Traceback" not in err
    assert sum(r.get("type") == "relayed" and r["outcome"] == "ok" for r in serve.seen) == 4
    assert not state_rows(home, "SELECT * FROM onebot_owner")


def test_an_action_whose_asker_is_gone_is_never_sent_by_a_later_owner(home):
    """An action left `pending` by an asker that was killed (older than an asker waits) expires
    when an owner next looks: the implementation never receives it, late."""
    setup("http://127.0.0.1:9/v1", allowed_platform_tools=["platform_send_message"])
    add_bot()
    fwj("bot", "list")  # state.db made
    state_execute(home, "INSERT INTO onebot_outbox (bot, action, params, status, asked_by, asked_at) VALUES (?, ?, ?, ?, ?, ?)",
                  ("qq", "send_group_msg", json.dumps({"group_id": 1, "message": "stale"}), "pending", "gone:1", "2026-01-01T00:00:00.000Z"))
    with Serve(home) as serve:
        with napcat(serve.listening["websocket"]) as ws:
            serve.next("connected")
            run = fwj("event", "handle", "qq", "--event", json.dumps(EVENT), "--no-run")["run"]["run_id"]
            sent = subprocess.Popen([fw_bin(), "tool", "call", "--run", run, "platform_send_message", "--args",
                                     json.dumps({"target_type": "group", "target_id": "30003", "text": "fresh"}), "--json"],
                                    env={**os.environ, "FW_HOME": str(home)}, stdout=subprocess.PIPE, text=True)
            frame = json.loads(ws.recv(timeout=30))
            ws.send(json.dumps(ok({"message_id": 77}, frame["echo"])))
            assert json.loads(sent.communicate(timeout=60)[0])["message_id"] == "77"
        code, _ = serve.stop()
    assert frame["params"]["message"][0]["data"]["text"] == "fresh"  # the stale one never went out
    statuses = [r["status"] for r in state_rows(home, "SELECT status FROM onebot_outbox ORDER BY id")]
    assert statuses == ["expired", "answered"] and code == 0


def test_a_list_asks_every_silent_http_bot_at_once_not_one_after_another(home):
    """Bots reached over HTTP without heartbeats are asked `get_status` by `fw bot list` (and the
    web page's list): a platform that holds the request is waited for once, not once a bot."""
    import socket

    setup("http://127.0.0.1:9/v1")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))  # not listening yet: adding the bots is refused at once
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    for name in ("qa", "qb", "qc"):
        fwj("bot", "add", name, "--adapter", "onebot", "--principal", "p1", "--url", url)
    listener.listen(8)
    arrived: list[float] = []
    held: list[socket.socket] = []

    def hold() -> None:  # reads each request and never answers it
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            arrived.append(time.monotonic())
            held.append(conn)

    threading.Thread(target=hold, daemon=True).start()
    try:
        started = time.monotonic()
        bots = fwj("bot", "list")["bots"]
        took = time.monotonic() - started
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert [(b["name"], b["online"]) for b in bots] == [("qa", False), ("qb", False), ("qc", False)]
    assert len(arrived) == 3
    # every ask was in flight before the first one was given up: all three were waiting at once
    assert max(arrived) - min(arrived) < took / 2
