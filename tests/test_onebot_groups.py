"""OneBot as a QQ group meets it (CONTRACT section 12; issue 28): a fake OneBot implementation
sends what NapCat sends (segment arrays with `at` and `reply`, CQ strings, heartbeats with
their interval, `message_sent`, anonymous messages, `kick_me`) to a real `fw bot serve`, and a
scripted model answers through `event_reply`."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from conftest import fw, fwj, snapshot
from fakes.chat_server import ChatServer
from fakes.onebot_server import SELF_ID, OneBotServer, heartbeat, ok, signed
from test_doors import bot, report, serve_bots, setup
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

TOKEN = "group-tok-7a1c3e5b9d"
SECRET = "group-sig-4b2d6f8a0c"


class Model(ChatServer):
    """Replies through event_reply to each new message, then says done."""

    def __init__(self, text="answered"):
        super().__init__([])
        self.reply = [{"tool_calls": [{"name": "event_reply", "arguments": {"text": text}}]}, {"content": "done"}]

    def next_step(self, request):
        with self._lock:
            self.requests.append(request)
        messages = (request.get("json") or {}).get("messages") or [{}]
        return self.reply[1] if messages[-1].get("role") == "tool" else self.reply[0]


def handled(served, seconds=30):
    return served.next(lambda r: r.get("type") in ("handled", "failed", "ignored", "duplicate") and r.get("bot"), seconds)


def message(text_or_segments, *, message_id, user=20002, group=30003, self_id=SELF_ID, sub_type="normal", **more):
    doc = {"time": 1700000000, "self_id": self_id, "post_type": "message", "message_type": "group" if group else "private",
           "sub_type": sub_type, "message_id": message_id, "user_id": user, "message": text_or_segments, "font": 0,
           "sender": {"user_id": user, "nickname": "Alice", "card": ""}, **more}
    if group:
        doc["group_id"] = group
    return doc


def at(qq, name=None):
    return {"type": "at", "data": {"qq": str(qq), **({"name": name} if name else {})}}


def text(value):
    return {"type": "text", "data": {"text": value}}


# -- 1, 2, 4, 5, 6: what a report means --------------------------------------------------------------
def test_only_a_message_that_addresses_the_bot_starts_a_run_and_its_answer_quotes_it(home):
    with Model() as model, OneBotServer() as napcat:
        setup(model.base_url)
        bot("qq", "--url", napcat.url, secret=SECRET)
        served, _, url = serve_bots(home, "qq")
        with served:
            cases = [
                (message([text("just chatting")], message_id=1), "not_mentioned"),
                (message([at("all"), text(" everyone")], message_id=2), "not_mentioned"),  # an at of all is no mention
                (message([at(20009, "Bob"), text(" hi bob")], message_id=3), "not_mentioned"),
                (message([at(SELF_ID), text(" hello "), at(20009, "Bob")], message_id=4), "handled"),  # segments
                (message(f"[CQ:at,qq={SELF_ID}] in a CQ string &#91;x&#93;", message_id=5), "handled"),  # a CQ-code string
                (message([text("in private")], message_id=6, group=None, sub_type="friend"), "handled"),  # private: always
            ]
            seen = {}
            for doc, _ in cases:
                assert report(url, doc, secret=SECRET).status_code == 204
                record = handled(served)
                seen[record["event"]["message"]["id"]] = record
            for doc, outcome in cases:
                record = seen[str(doc["message_id"])]
                assert (record.get("reason") or "handled") == outcome, record
        sends = {a["params"]["message"][0]["data"]["id"]: a for a in napcat.sent("send_group_msg")}
        assert set(sends) == {"4", "5"}  # each mention answered once, quoting it
        assert sends["4"]["params"]["message"] == [{"type": "reply", "data": {"id": "4"}}, {"type": "text", "data": {"text": "answered"}}]
        private = napcat.sent("send_private_msg")
        assert [p["params"] for p in private] == [{"user_id": 20002, "message": [{"type": "text", "data": {"text": "answered"}}]}]
        asked = [r["json"]["messages"][-1]["content"] for r in model.requests if r["json"]["messages"][-1]["role"] == "user"]
        assert sorted(asked) == ["hello @Bob", "in a CQ string [x]", "in private"]  # the bot's own at left the text


def test_a_reply_to_the_bots_own_message_addresses_it(home):
    with Model() as model, OneBotServer() as napcat:
        setup(model.base_url)
        bot("qq", "--url", napcat.url, secret=SECRET)
        served, _, url = serve_bots(home, "qq")
        with served:
            assert report(url, message([at(SELF_ID), text(" first")], message_id=10), secret=SECRET).status_code == 204
            handled(served)
            (sent,) = napcat.sent("send_group_msg")  # the fake answers message_id 5001, as the bot's message
            replying = message([{"type": "reply", "data": {"id": "5001"}}, text("thanks!")], message_id=11)
            assert report(url, replying, secret=SECRET).status_code == 204
            record = handled(served)
            assert record["type"] == "handled" and record["handled"] is True, record
            other = message([{"type": "reply", "data": {"id": "777777"}}, text("to someone else")], message_id=12)
            assert report(url, other, secret=SECRET).status_code == 204
            assert handled(served)["reason"] == "not_mentioned"
    assert sent["params"]["message"][0]["data"]["id"] == "10"


def test_own_messages_system_notices_and_repeats_start_nothing(home):
    with Model() as model, OneBotServer() as napcat:
        setup(model.base_url)
        fwj("binding", "set", "p1", "--agent", "a1", "--policy", "all")
        bot("qq", "--url", napcat.url, secret=SECRET)
        served, _, url = serve_bots(home, "qq")
        with served:
            reports = [
                message([text("mine")], message_id=20, user=str(SELF_ID), self_id=SELF_ID),  # ids of two types: still the bot
                {**message([text("sent by me")], message_id=21), "post_type": "message_sent", "user_id": SELF_ID},
                message([text("you were muted")], message_id=22, user=80000000),
            ]
            for doc in reports:
                assert report(url, doc, secret=SECRET).status_code == 204
            whys = [served.next(lambda r: r.get("type") == "ignored")["why"] for _ in reports]
            assert any("bot itself" in w for w in whys) and any("message_sent" in w for w in whys) and any("80000000" in w for w in whys)
            once = message([text("say it once")], message_id=23)
            for _ in range(3):  # replayed: answered 204, run once
                assert report(url, once, secret=SECRET).status_code == 204
            friend = {"post_type": "request", "request_type": "friend", "self_id": SELF_ID, "user_id": 20003, "flag": "fr-9"}
            notice = {"post_type": "notice", "notice_type": "group_increase", "sub_type": "approve", "self_id": SELF_ID,
                      "user_id": 20005, "group_id": 30003, "operator_id": 1, "time": 1700000001}
            for doc in (friend, friend, notice, notice):
                assert report(url, doc, secret=SECRET).status_code == 204
            time.sleep(2)
            code, err = served.stop()
    records = served.seen
    assert sum(r.get("type") == "handled" and r["event"]["message"]["id"] == "23" for r in records if "event" in r and "message" in r["event"]) == 1
    assert sum(r.get("type") == "duplicate" for r in records) == 4  # two repeats of the message, one of the request, one of the notice
    assert len(napcat.sent("send_group_msg")) == 1 and code == 0


def test_kick_me_the_bot_leaving_and_joining_and_media_and_anonymous_senders_become_their_events(home):
    with Model() as model, OneBotServer() as napcat:
        setup(model.base_url)
        fwj("agent", "edit", "a1", "--event", "message.*", "--event", "bot.*", "--event", "group.*")
        fwj("binding", "set", "p1", "--agent", "a1", "--policy", "all")
        bot("qq", "--url", napcat.url, secret=SECRET)
        served, _, url = serve_bots(home, "qq")
        with served:
            docs = [
                {"post_type": "notice", "notice_type": "group_decrease", "sub_type": "kick_me", "self_id": SELF_ID, "user_id": SELF_ID,
                 "group_id": 30001, "operator_id": 20009, "time": 1},
                {"post_type": "notice", "notice_type": "group_decrease", "sub_type": "leave", "self_id": SELF_ID, "user_id": SELF_ID,
                 "group_id": 30002, "operator_id": 0, "time": 2},
                {"post_type": "notice", "notice_type": "group_increase", "sub_type": "invite", "self_id": SELF_ID, "user_id": SELF_ID,
                 "group_id": 30004, "operator_id": 20008, "time": 3},
                message([{"type": "image", "data": {"file": "abc.jpg", "url": "https://multimedia.nt.qq.com.cn/abc"}}], message_id=30),
                message([text("guess who")], message_id=31, sub_type="anonymous", user=80000000,  # as go-cqhttp sends it
                        anonymous={"id": 4242, "name": "Masked", "flag": "anon-flag"}),
            ]
            events = []
            for doc in docs:
                assert report(url, doc, secret=SECRET).status_code == 204
                events.append(handled(served, 60))
    kinds = [(e["event"]["type"], e["event"].get("group", {}).get("id")) for e in events]
    assert kinds == [("bot.removed_from_group", "30001"), ("bot.removed_from_group", "30002"), ("bot.joined_group", "30004"),
                     ("message.received", "30003"), ("message.received", "30003")]
    assert events[0]["event"]["actor"] == {"id": "20009"}  # who removed it
    image = events[3]
    assert image["type"] == "handled" and image["status"] == "completed"  # the run went on: no "a message needs some text"
    assert image["event"]["message"]["text"] == "[image]"
    assert image["event"]["message"]["attachments"] == [{"type": "image", "url": "https://multimedia.nt.qq.com.cn/abc", "name": "abc.jpg"}]
    anonymous = events[4]
    assert anonymous["event"]["actor"] == {"id": "anonymous:4242", "name": "Masked", "anonymous": True}
    run = fwj("run", "show", anonymous["run_id"])
    reasons = {u["name"]: u["reason"] for u in run["unavailable_tools"]}
    assert reasons["event_get_actor"] == reasons["event_kick_member"] == "event_target_unavailable"
    assert "event_reply" in run["tools"]  # the group can still be answered


def test_a_temporary_chat_reply_stays_private_and_names_its_group(home):
    with Model() as model, OneBotServer() as napcat:
        setup(model.base_url)
        bot("qq", "--url", napcat.url, secret=SECRET)
        served, _, url = serve_bots(home, "qq")
        with served:
            temp = message([text("hi from the group")], message_id=40, group=None, sub_type="group", group_id=30003, temp_source=0)
            temp["sender"]["group_id"] = 30003
            assert report(url, temp, secret=SECRET).status_code == 204
            record = handled(served)
    assert record["event"]["message"]["temp_group_id"] == "30003" and "group" not in record["event"]
    (sent,) = napcat.sent("send_private_msg")
    assert sent["params"] == {"user_id": 20002, "group_id": 30003, "message": [{"type": "text", "data": {"text": "answered"}}]}


# -- 1: the local adapter, hand-written events, run start ----------------------------------------------
def test_on_the_local_adapter_and_by_hand_policy_mentioned_needs_the_bots_name(home):
    setup()
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")
    quiet = fwj("bot", "local", "say", "desk", "--from", "alice", "--group", "g1", "--no-run", "hello all")
    assert quiet["handled"] is False and quiet["reason"] == "not_mentioned"
    asked = fwj("bot", "local", "say", "desk", "--from", "alice", "--group", "g1", "--no-run", "@desk are you there?")
    assert asked["handled"] is True
    private = fwj("bot", "local", "say", "desk", "--from", "alice", "--no-run", "no @ needed")
    assert private["handled"] is True
    event = {"type": "message.received", "actor": {"id": "u1"}, "group": {"id": "g1"}, "message": {"id": "9", "text": "hi"}}
    assert fwj("event", "handle", "desk", "--event", json.dumps(event), "--no-run") == {"handled": False, "reason": "not_mentioned"}
    given = {**event, "message": {**event["message"], "mentions_bot": True}}
    assert fwj("event", "handle", "desk", "--event", json.dumps(given), "--no-run")["handled"] is True
    before = snapshot(home)
    denied = fw("run", "start", "--principal", "p1", "--bot", "desk", "--event", json.dumps(event), "--json")
    assert denied.exit_code == 5 and (denied.json["error"]["code"], denied.json["error"]["reason"]) == ("denied", "not_mentioned"), denied
    assert "--policy all" in denied.json["error"]["hint"]
    assert snapshot(home) == before


# -- 3: go-cqhttp's handshake, and what is refused ------------------------------------------------------
def test_go_cqhttps_handshake_forms_are_accepted_and_a_one_way_or_anonymous_socket_refused(home):
    with Model() as model:
        setup(model.base_url)
        bot("qq", token=TOKEN)
        served, _, url = serve_bots(home, "qq")
        ws_url = url.replace("http", "ws") + "onebot/v11/ws"
        with served:
            for headers, query in [({"Authorization": f"Token {TOKEN}"}, ""), ({}, f"?access_token={TOKEN}")]:
                # go-cqhttp: `Token`, X-Self-ID as a number, X-Client-Role Universal
                with connect(ws_url + query, additional_headers={**headers, "X-Self-ID": str(SELF_ID), "X-Client-Role": "Universal",
                                                                  "User-Agent": "CQHttp/4.15.0"}, open_timeout=10) as ws:
                    served.next(lambda r: r.get("type") == "connected")
                    ws.send(json.dumps(message(f"[CQ:at,qq={SELF_ID}] via go-cqhttp", message_id=50 + len(query))))
                    frame = json.loads(ws.recv(timeout=30))
                    assert frame["action"] == "send_group_msg"
                    ws.send(json.dumps(ok({"message_id": 1}, frame["echo"])))
                    assert handled(served)["type"] == "handled"
            for headers in [{"Authorization": f"Bearer {TOKEN}"},  # no X-Self-ID
                            {"Authorization": f"Bearer {TOKEN}", "X-Self-ID": "not-a-number"},
                            {"Authorization": f"Bearer {TOKEN}", "X-Self-ID": str(SELF_ID), "X-Client-Role": "API"},
                            {"Authorization": f"Bearer {TOKEN}", "X-Self-ID": str(SELF_ID), "X-Client-Role": "Event"},
                            {"Authorization": "Bearer wrong-token-000", "X-Self-ID": str(SELF_ID)}]:
                with pytest.raises(InvalidStatus) as refused:
                    connect(ws_url, additional_headers=headers, open_timeout=10).close()
                assert refused.value.response.status_code == 403
                time.sleep(1.1)  # refusals are logged once a second at most
            code, err = served.stop()
    whys = [r["why"] for r in served.seen if r.get("type") == "refused"]
    assert any("X-Self-ID" in w for w in whys) and any("Universal" in w for w in whys), whys
    assert code == 0 and "Traceback" not in err


# -- 7: a bot that went silent ------------------------------------------------------------------------
def test_a_bot_whose_heartbeats_stop_is_offline_and_its_actions_fail_at_once(home):
    with Model() as model, OneBotServer() as napcat:
        setup(model.base_url)
        bot("qq", "--url", napcat.url, secret=SECRET)
        served, _, url = serve_bots(home, "qq")
        with served:
            beat = {**heartbeat(), "interval": 1000}  # a heartbeat a second
            for _ in range(3):
                assert report(url, beat, secret=SECRET).status_code == 204
                time.sleep(0.5)
            assert report(url, message([at(SELF_ID), text(" hi")], message_id=60), secret=SECRET).status_code == 204
            run_of_event = handled(served)["run_id"]
            listed = {b["name"]: b for b in fwj("bot", "list")["bots"]}["qq"]
            assert listed["online"] is True and listed["self_id"] == str(SELF_ID)
            assert listed["last_heartbeat_at"] and listed["last_event_at"]
            napcat.online = True  # get_status would still say online: the silence alone decides
            offline = served.next(lambda r: r.get("type") == "offline", 15)
            assert "no heartbeat" in offline["why"]
            assert fwj("bot", "show", "qq")["online"] is False
            event = {"type": "message.received", "actor": {"id": "20002"}, "group": {"id": "30003"},
                     "message": {"id": "61", "text": "x", "mentions_bot": True}}
            run = fwj("event", "handle", "qq", "--event", json.dumps(event), "--no-run")["run"]
            started = time.monotonic()
            r = fw("tool", "call", "--run", run["run_id"], "event_reply", "--args", '{"text": "hi"}')
            assert r.exit_code == 7 and r.json["error"]["reason"] == "adapter_offline", r
            assert time.monotonic() - started < 5
            assert report(url, beat, secret=SECRET).status_code == 204
            served.next(lambda r: r.get("type") == "online", 15)
    assert run_of_event


# -- 8: setting a bot up ----------------------------------------------------------------------------
def test_a_refused_bot_add_writes_nothing_and_the_stdin_flags_go_one_at_a_time(home):
    setup()
    before = snapshot(home)
    short = fw("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--access-token-stdin", "--json", input="T0KEN")
    assert short.exit_code == 4 and short.json["error"]["field"] == "access_token", short
    bad_url = fw("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--url", "not a url", "--json")
    assert bad_url.exit_code == 4
    both = fw("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--access-token-stdin", "--secret-stdin", "--json",
              input="long-enough-token")
    assert both.exit_code == 2 and both.json["error"]["code"] == "usage"
    assert snapshot(home) == before and not (home / "bots" / "qq.yaml").exists()
    added = fwj("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--url", "http://127.0.0.1:9", "--secret-stdin",
                input="long-enough-secret")
    assert added["secret_set"] is True and added["access_token_set"] is False
    assert fwj("bot", "set", "qq", "--access-token-stdin", input="long-enough-token")["access_token_set"] is True
    moved = fwj("bot", "set", "qq", "--url", "")
    assert "url" not in moved and moved["connection"] in ("not connected", "socket")
    assert fwj("bot", "set", "qq", "--url", "http://127.0.0.1:10")["url"] == "http://127.0.0.1:10"
    before = snapshot(home)
    assert fw("bot", "set", "qq", "--secret-stdin", "--json", input="short").exit_code == 4
    assert fw("bot", "set", "qq", "--access-token-stdin", "--secret-stdin", "--json", input="x" * 20).exit_code == 2
    assert snapshot(home) == before


# -- 9: one listener, several bots -------------------------------------------------------------------
def test_one_listener_serves_several_bots_told_apart_by_self_id_signature_and_token(home):
    with Model() as model, OneBotServer() as first, OneBotServer() as second:
        setup(model.base_url)
        bot("one", "--url", first.url, secret=SECRET)
        bot("two", "--url", second.url, secret=SECRET + "-2")
        bot("three", token=TOKEN)
        served, listening, url = serve_bots(home, "--all")
        with served:
            assert sorted(b["bot"] for b in listening["bots"]) == ["one", "three", "two"]
            body = message([at(22222), text(" for two")], message_id=70, self_id=22222)
            assert report(url, body, secret=SECRET + "-2", self_id=22222).status_code == 204  # told by its signature
            assert handled(served)["bot"] == "two"
            body = message([at(11111), text(" for one")], message_id=71, self_id=11111)
            assert report(url, body, secret=SECRET, self_id=11111).status_code == 204
            assert handled(served)["bot"] == "one"
            with connect(url.replace("http", "ws") + "onebot/v11/ws", open_timeout=10,
                         additional_headers={"Authorization": f"Bearer {TOKEN}", "X-Self-ID": "33333"}) as ws:
                assert served.next(lambda r: r.get("type") == "connected")["bot"] == "three"
                ws.send(json.dumps(message([at(33333), text(" for three")], message_id=72, self_id=33333)))
                frame = json.loads(ws.recv(timeout=30))
                ws.send(json.dumps(ok({"message_id": 1}, frame["echo"])))
                assert handled(served)["bot"] == "three"
            wrong = httpx.post(url, content=json.dumps(message([text("x")], message_id=73)).encode(), timeout=10,
                               headers={"Content-Type": "application/json", "X-Self-ID": "11111", "X-Signature": signed("nope-nope", b"x")})
            assert wrong.status_code == 401
    assert len(first.sent("send_group_msg")) == len(second.sent("send_group_msg")) == 1
    ids = {b["name"]: b["self_id"] for b in fwj("bot", "list")["bots"]}
    assert ids == {"one": "11111", "two": "22222", "three": "33333"}
