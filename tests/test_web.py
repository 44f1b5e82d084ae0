"""fw web's refusal rules and saves, through Starlette's TestClient (fast, in-process):
sign-in with a one-time token, the Host check, CSRF on every form, a write-only key, and
saves that go through the same functions as the CLI. The browser tests are in
test_web_browser.py."""

from __future__ import annotations

import json
import re

import pytest
from conftest import CANARY, fw, fwj, make_basics, snapshot, state_rows
from fakes.chat_server import ChatServer
from starlette.testclient import TestClient
from test_sessions import setup

from framework_cli.home.store import Home
from framework_cli.serve.http import parse_listen
from framework_cli.serve.web import create_app
from framework_cli.serve.web.server import allowed_hosts
from framework_cli.serve.web.signin import SignIn

TOKEN = "one-time-token-for-tests"


def client(home, *, signed_in=True) -> TestClient:
    app = create_app(Home(home), signin=SignIn(TOKEN), allowed_hosts=["testserver"])
    c = TestClient(app)
    if signed_in:
        assert c.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
    return c


def csrf(c: TestClient, path: str) -> str:
    page = c.get(path)
    assert page.status_code == 200, page.text
    return re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)


def page_form(c: TestClient, path: str, **changes) -> dict[str, list[str]]:
    """What a browser would post from the page's form as it is shown (every field, ticked
    boxes, hidden markers), with `changes` (a field's value or values) typed over it."""
    from html.parser import HTMLParser

    page = c.get(path)
    assert page.status_code == 200, page.text
    fields: dict[str, list[str]] = {}

    class Form(HTMLParser):
        select: str | None = None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            name = a.get("name")
            if tag == "input" and name and not a.get("disabled") is not None:
                if a.get("type") == "checkbox":
                    if "checked" in a:
                        fields.setdefault(name, []).append(a.get("value", "on"))
                else:
                    fields.setdefault(name, []).append(a.get("value") or "")
            elif tag == "select" and name:
                self.select = name
                fields.setdefault(name, [])
            elif tag == "option" and self.select and "selected" in a:
                fields[self.select] = [a.get("value") or ""]
            elif tag == "textarea" and name:
                fields.setdefault(name, []).append("")

        def handle_endtag(self, tag):
            if tag == "select":
                self.select = None

    Form().feed(page.text.split("<form", 1)[1].split("</form>", 1)[0] if "<form" in page.text else page.text)
    for name, value in changes.items():
        name = name.replace("__", ".")
        fields[name] = value if isinstance(value, list) else [value]
    return fields


def test_without_the_cookie_every_request_is_refused_and_changes_nothing(home):
    make_basics()
    before = snapshot(home)
    c = client(home, signed_in=False)
    for path in ("/", "/agents", "/agents/a1/edit", "/providers", "/delete/agent/a1", "/static/style.css"):
        answer = c.get(path)
        assert answer.status_code == 401 and "Sign in" in answer.text, path
    posted = c.post("/agents/new", data={"name": "a2", "builtin_tools": "resource_management"})
    assert posted.status_code == 401
    assert c.post("/delete/agent/a1", data={"confirm": "agent/a1"}).status_code == 401
    assert snapshot(home) == before


def test_the_token_signs_in_once_then_the_cookie_is_what_counts(home):
    app = create_app(Home(home), signin=SignIn(TOKEN), allowed_hosts=["testserver"])
    first, second = TestClient(app), TestClient(app)
    assert first.get("/?token=wrong", follow_redirects=False).status_code == 401
    signed = first.get(f"/?token={TOKEN}", follow_redirects=False)
    assert signed.status_code == 303 and signed.headers["location"] == "/"
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert first.get("/agents").status_code == 200
    again = second.get(f"/?token={TOKEN}", follow_redirects=False)
    assert again.status_code == 401 and "already used" in again.text


def test_a_foreign_host_header_is_refused(home):
    c = client(home)
    assert c.get("/agents", headers={"host": "evil.example"}).status_code == 400
    assert c.get("/agents").status_code == 200


def test_a_post_without_the_right_csrf_token_gets_403_and_changes_nothing(home):
    make_basics()
    c = client(home)
    token = csrf(c, "/agents/a1/edit")
    before = snapshot(home)
    form = {k: v for k, v in page_form(c, "/agents/a1/edit", description="changed", builtin_tools="task_collaboration").items()
            if k != "csrf_token"}
    assert c.post("/agents/a1/edit", data=form).status_code == 403
    assert c.post("/agents/a1/edit", data={**form, "csrf_token": token + "x"}).status_code == 403
    assert c.post("/agents/new", data={**form, "name": "a2", "csrf_token": "nope"}).status_code == 403
    assert c.post("/delete/agent/a1", data={"confirm": "agent/a1", "recursive": "0"}).status_code == 403
    assert snapshot(home) == before
    saved = c.post("/agents/a1/edit", data={**form, "csrf_token": token}, follow_redirects=False)
    assert saved.status_code == 303
    assert fwj("agent", "show", "a1")["data"]["builtin_tools"] == ["task_collaboration"]


def test_a_saved_agent_gets_its_allowed_tools_as_the_explicit_list_ticked(home):
    make_basics()
    fwj("resource", "write", "skill", "s1", "--create", "--data", json.dumps({"description": "a skill", "body": "text"}))
    fwj("resource", "write", "skill", "s2", "--create", "--data", json.dumps({"description": "another", "body": "text"}))
    fwj("agent", "edit", "a1", "--skill", "s1", "--skill", "s2")
    c = client(home)
    page = c.get("/agents/a1/edit").text
    assert re.search(r'name="allowed_tools" value="skill__s1" checked', page)  # no allowed_tools: all ticked
    form = page_form(c, "/agents/a1/edit", allowed_tools="skill__s2")
    assert c.post("/agents/a1/edit", data=form, follow_redirects=False).status_code == 303
    assert fwj("agent", "show", "a1")["data"]["allowed_tools"] == ["skill__s2"]
    assert "allowed_tools:\n  - skill__s2" in (home / "agents/default/a1.yaml").read_text()


def test_a_source_added_without_its_tools_listed_has_them_allowed(home):
    """Without the page's script, ticking a new skill cannot list its tool first: it is
    allowed, as a new source is for an agent that allows every tool."""
    make_basics()
    fwj("resource", "write", "skill", "s1", "--create", "--data", json.dumps({"description": "a skill", "body": "text"}))
    c = client(home)
    form = page_form(c, "/agents/a1/edit", skills="s1")
    assert c.post("/agents/a1/edit", data=form, follow_redirects=False).status_code == 303
    assert fwj("agent", "show", "a1")["data"]["allowed_tools"] == ["skill__s1"]


def test_the_tools_part_lists_the_sources_chosen_now(home):
    fwj("resource", "write", "skill", "s1", "--create", "--data", json.dumps({"description": "a skill", "body": "text"}))
    c = client(home)
    part = c.get("/agents/tools", params={"skills": "s1", "shown": "skill__other"}).text
    assert 'value="skill__s1" checked' in part  # new on the page: ticked
    part = c.get("/agents/tools", params={"skills": "s1", "shown": "skill__s1"}).text
    assert 'value="skill__s1" checked' not in part and 'value="skill__s1"' in part  # shown and unticked: stays so
    events = c.get("/agents/event-tools", params={"events": "friend.request_received"}).text
    assert re.search(r'value="event_respond_friend_request" checked disabled', events)
    assert not re.search(r'value="event_kick_member" checked', events)


def test_a_failed_create_keeps_what_was_typed_and_names_the_field(home):
    make_basics()
    before = snapshot(home)
    c = client(home)
    form = page_form(c, "/agents/new", name="Bad Name", description="typed text", model="m1",
                     builtin_tools=["resource_management", "task_collaboration"], events="message.*")
    page = c.post("/agents/new", data=form)
    assert page.status_code == 400
    assert 'id="err-name"' in page.text and 'aria-invalid="true"' in page.text
    alert = re.search(r'<div role="alert"[^>]*>(.*?)</div>', page.text, re.S).group(1)
    assert "<strong>name</strong>" in alert
    assert 'value="typed text"' in page.text and 'value="message.*"' in page.text
    assert re.search(r'name="builtin_tools" value="task_collaboration" checked', page.text)
    assert snapshot(home) == before


def test_an_existing_name_is_refused_at_the_name_field(home):
    make_basics()
    before = snapshot(home)
    c = client(home)
    page = c.post("/agents/new", data=page_form(c, "/agents/new", name="a1"))
    assert page.status_code == 409 and 'id="err-name"' in page.text
    assert snapshot(home) == before


def test_the_provider_key_is_write_only_and_an_empty_field_keeps_it(home):
    c = client(home)
    form = page_form(c, "/providers/new", name="p1", base_url="https://llm.example.test/v1", api_key=CANARY)
    assert c.post("/providers/new", data=form, follow_redirects=False).status_code == 303
    assert CANARY in "".join(p.read_text() for p in (home / "secrets").rglob("*") if p.is_file())
    edit = c.get("/providers/p1/edit").text
    assert CANARY not in edit and "A key is stored" in edit
    form = page_form(c, "/providers/p1/edit", base_url="https://llm.example.test/v2", api_key="")
    assert c.post("/providers/p1/edit", data=form, follow_redirects=False).status_code == 303
    shown = fwj("resource", "read", "provider", "p1")["data"]
    assert shown["base_url"] == "https://llm.example.test/v2" and shown["api_key_set"] is True
    failed = c.post("/providers/p1/edit", data={**form, "base_url": "not a url", "api_key": CANARY})
    assert failed.status_code == 400 and CANARY not in failed.text and 'id="err-base_url"' in failed.text


def test_a_new_provider_without_a_key_is_refused_at_the_key_field(home):
    before = snapshot(home)
    c = client(home)
    page = c.post("/providers/new", data=page_form(c, "/providers/new", name="p1", base_url="https://x.test/v1"))
    assert page.status_code == 400 and 'id="err-api_key"' in page.text
    assert "type it in the api_key field" in page.text and "--api-key-stdin" not in page.text  # said as the page, not the CLI
    assert snapshot(home) == before


def test_the_model_form_lists_the_providers_models_and_says_why_not(home):
    with ChatServer([{"content": "unused"}]) as server:
        fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": server.base_url, "api_key": CANARY}))
        c = client(home)
        page = c.get("/models/new?provider=p1").text
        assert '<option value="m-1">' in page and 'list="model-ids"' in page
    fwj("resource", "write", "provider", "p2", "--create", "--data", json.dumps({"base_url": "https://x.test/v1", "api_key_env": "FW_WEB_UNSET"}))
    page = c.get("/models/new?provider=p2").text
    assert "Could not list the models of p2" in page and "You can still type an id" in page


def test_a_stale_delete_confirmation_deletes_nothing_and_shows_the_plan_now(home):
    make_basics()
    c = client(home)
    token = csrf(c, "/delete/model/m1?recursive=1")
    before = snapshot(home)
    page = c.post("/delete/model/m1", data={"csrf_token": token, "confirm": "model/m1", "recursive": "1"})
    assert page.status_code == 409 and "does not match the plan" in page.text
    assert 'value="agent/a1,model/m1"' in page.text
    assert snapshot(home) == before
    done = c.post("/delete/model/m1", data={"csrf_token": token, "confirm": "agent/a1,model/m1", "recursive": "1"})
    assert done.status_code == 200 and "Deleted 2 items" in done.text
    assert fw("agent", "show", "a1").exit_code == 3


def test_the_default_prompts_delete_page_offers_no_recursive_plan(home):
    make_basics()
    fwj("agent", "create", "a3", "--model", "m1", "--prompt", "default")
    page = client(home).get("/delete/prompt/default")
    assert page.status_code == 200 and "never deleted" in page.text
    assert "Plan a recursive delete" not in page.text and "?recursive=1" not in page.text
    assert "Plan a recursive delete" in client(home).get("/delete/model/m1").text  # where one can help, it is offered


def test_pages_answer_not_found_and_invalid_without_a_traceback(home):
    c = client(home)
    missing = c.get("/agents/nope/edit")
    assert missing.status_code == 404 and "no agent named" in missing.text and "Traceback" not in missing.text
    assert missing.text.count("no agent named") == 1 and missing.text.count('role="alert"') == 1  # said once
    nowhere = c.get("/no/such/page")
    assert nowhere.status_code == 404 and nowhere.text.count("There is no page at /no/such/page") == 1
    assert c.get("/delete/nokind/x").status_code == 400


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1:99999", "127.0.0.1:"])
def test_a_bad_listen_address_is_invalid(home, listen):
    result = fw("web", "--listen", listen, "--json")
    assert result.exit_code == 4 and result.json["error"]["code"] == "invalid"


def test_listen_addresses_and_the_hosts_they_answer():
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:8765") == ("::1", 8765)
    assert "localhost" in allowed_hosts("127.0.0.1") and "*" not in allowed_hosts("127.0.0.1")
    assert allowed_hosts("0.0.0.0") == ["*"]


# -- issue 27 items 11 and 12: a thin POST wipes nothing; the provider form takes the key only ----
@pytest.mark.parametrize("path", ["/agents/a1/edit", "/models/m1/edit", "/providers/p1/edit", "/agents/new", "/models/new", "/providers/new"])
def test_a_post_that_lacks_a_field_its_form_shows_is_refused_and_writes_nothing(home, path):
    make_basics()
    fwj("agent", "edit", "a1", "--description", "keep me", "--event", "message.*")
    c = client(home)
    before = snapshot(home)
    thin = c.post(path, data={"csrf_token": csrf(c, path)})
    assert thin.status_code == 400 and "nothing was saved" in thin.text, thin.text
    assert snapshot(home) == before
    whole = page_form(c, path, name="fresh") if path.endswith("/new") else page_form(c, path)
    page = c.get(path).text
    texts = [k for k in whole if re.search(rf'<(input|select)[^>]*name="{re.escape(k)}"[^>]*>', page)
             and not re.search(rf'type="(checkbox|hidden)"[^>]*name="{re.escape(k)}"|name="{re.escape(k)}"[^>]*type="(checkbox|hidden)"', page)]
    if not path.endswith("/new"):
        texts.remove("name")  # an edit form shows the name read-only: its path names the resource
    assert texts, page
    for missing in texts:
        answer = c.post(path, data={k: v for k, v in whole.items() if k != missing})
        assert answer.status_code == 400 and missing in answer.text, (missing, answer.text)
        assert snapshot(home) == before, missing
    for group in whole.get("sent", []):  # each checkbox group's marker
        answer = c.post(path, data={**whole, "sent": [g for g in whole["sent"] if g != group]})
        assert answer.status_code == 400 and group in answer.text, group
        assert snapshot(home) == before, group
    shown = fwj("agent", "show", "a1")["data"]
    assert (shown["model"], shown["description"], shown["events"]) == ("m1", "keep me", ["message.*"])


def test_the_whole_form_posted_back_changes_nothing(home):
    make_basics()
    fwj("agent", "edit", "a1", "--description", "kept", "--event", "message.*")
    (home / "agents/default/a1.yaml").write_text((home / "agents/default/a1.yaml").read_text() + "allowed_tools: []\n")
    c = client(home)
    for path in ("/agents/a1/edit", "/models/m1/edit", "/providers/p1/edit"):
        before = snapshot(home)
        assert c.post(path, data=page_form(c, path), follow_redirects=False).status_code == 303, path
        assert snapshot(home) == before, path


def test_the_provider_form_offers_the_key_only_and_says_when_it_comes_from_the_environment(home):
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "https://x.test/v1", "api_key_env": "LLM_KEY"}))
    c = client(home)
    for path in ("/providers/new", "/providers/p1/edit"):
        assert 'name="api_key_env"' not in c.get(path).text, path
    page = c.get("/providers/p1/edit").text
    assert "comes from the environment variable $LLM_KEY" in page and "A key typed here replaces it" in page
    same = c.post("/providers/p1/edit", data=page_form(c, "/providers/p1/edit", description="edited"), follow_redirects=False)
    assert same.status_code == 303
    assert fwj("resource", "read", "provider", "p1")["data"]["api_key_env"] == "LLM_KEY"  # kept: no key was typed
    forged = c.post("/providers/p1/edit", data=page_form(c, "/providers/p1/edit", api_key_env="OTHER"), follow_redirects=False)
    assert forged.status_code == 303 and fwj("resource", "read", "provider", "p1")["data"]["api_key_env"] == "LLM_KEY"
    typed = c.post("/providers/p1/edit", data=page_form(c, "/providers/p1/edit", api_key=CANARY), follow_redirects=False)
    assert typed.status_code == 303
    data = fwj("resource", "read", "provider", "p1")["data"]
    assert data["api_key_set"] is True and "api_key_env" not in data
    assert CANARY not in (home / "providers/default/p1.yaml").read_text()


# -- the runtime's pages: a run started and its tools called by hand, the queue run once, the audit paged
def test_a_run_started_from_the_page_calls_its_tools_by_hand_and_a_bad_call_changes_nothing(home):
    make_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management")
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1")
    c = client(home)
    token = csrf(c, "/runs/start")
    before = snapshot(home)
    for fields in ({}, {"principal": "p1", "agent": "a1"}, {"principal": "p1", "lease": "99"}, {"principal": "nobody"}):
        refused = c.post("/runs/start", data={"csrf_token": token, "principal": "", "agent": "", "lease": "", **fields})
        assert refused.status_code in (400, 404) and 'class="field-error"' in refused.text, fields
    assert snapshot(home) == before  # a refused start starts nothing
    started = c.post("/runs/start", data={"csrf_token": token, "principal": "p1", "agent": "", "lease": "600"}, follow_redirects=False)
    assert started.status_code == 303
    run_id = started.headers["location"].split("/runs/")[1].split("?")[0]
    shown = fwj("run", "show", run_id)
    assert (shown["identity"], shown["agent"], shown["status"], shown["mode"]) == ("p1", "a1", "active", "managed")
    page = c.get(f"/runs/{run_id}?started=1")
    assert "The run was started" in page.text and 'aria-label="Call a tool"' in page.text

    def call(tool, args):  # on the page the listing links to, by the short id
        return c.post(f"/runs/{run_id[-8:]}", data={"csrf_token": token, "action": "call", "tool": tool, "args": args})

    done = call("framework_resource_list", '{"kind": "agent"}')
    assert done.status_code == 200 and 'aria-label="the result"' in done.text
    again = c.get(str(done.url))  # the browser's reload of the page shown: the call is not made again
    assert again.status_code == 200 and 'aria-label="the result"' not in again.text
    assert 'aria-label="its tools"' in again.text and "<code>kind</code>" in again.text  # what each tool takes
    assert "&#34;a1&#34;" in done.text or "&quot;a1&quot;" in done.text  # the listing, as JSON
    audited = fwj("audit", "list", "--run", run_id)["entries"]
    assert [(e["tool"], e["outcome"]) for e in audited] == [("framework_resource_list", "ok")]
    files = snapshot(home)
    bad = call("framework_resource_list", '{"kind": ')
    assert bad.status_code == 400 and 'id="err-args"' in bad.text and "not JSON" in bad.text
    deep = call("framework_resource_list", "[" * 100_000)
    assert deep.status_code == 400 and 'id="err-args"' in deep.text and "nested too deeply" in deep.text
    assert snapshot(home) == files  # not even audited: nothing was called
    forged = call("framework_exec", '{"argv": ["true"]}')  # not in the run's snapshot
    assert forged.status_code == 403 and 'id="err-tool"' in forged.text
    assert fwj("resource", "read", "agent", "a1")["name"] == "a1"
    assert [e["outcome"] for e in fwj("audit", "list", "--run", run_id)["entries"]] == ["ok", "refused"]
    assert "<td>denied</td>" in c.get(f"/audit?run={run_id}").text  # why it was refused
    ended = c.post(f"/runs/{run_id}", data={"csrf_token": token, "action": "end"}, follow_redirects=False)
    assert ended.status_code == 303 and fwj("run", "show", run_id)["status"] == "ended"
    assert 'aria-label="Call a tool"' not in c.get(f"/runs/{run_id}").text  # an ended run calls nothing
    assert CANARY not in done.text + bad.text + forged.text


def test_the_status_page_runs_the_queue_once_and_says_what_came_of_it(home):
    with ChatServer([{"content": "hello alice"}], repeat_last=True) as model:
        setup(model.base_url, "p1")  # agent p1, bound to principal p1; alice, a user
        fwj("session", "create", "s1", "--member", "alice", "--member", "p1")
        fwj("message", "post", "s1", "--as", "alice", "hi @p1")
        c = client(home)
        assert "Nothing is serving the queue now" in c.get("/sessions/s1").text  # the turn waits: the page says how to run it
        token = csrf(c, "/status")
        page = c.post("/status", data={"csrf_token": token, "action": "dispatch_once"})
        assert page.status_code == 200
        assert "Turns: 1 run, 1 answered, 0 failed" in page.text and 'http-equiv="refresh"' not in page.text
        assert "run once" not in c.get(str(page.url)).text  # a reload shows the queue, and runs nothing
        answered = c.post("/runs/new", data={"csrf_token": token, "agent": "", "principal": "p1", "message": "and now?"})
        assert answered.status_code == 200 and "hello alice" in answered.text  # as the principal: the agent its binding names
        assert 'aria-label="the answer"' not in c.get(str(answered.url)).text  # shown once; a reload runs nothing
        assert "<td>completed</td>" in c.get("/runs").text and "· completed ·" in c.get(str(answered.url)).text  # its outcome
    assert [(m["author"], m["text"]) for m in fwj("message", "list", "s1")["messages"]] == [("alice", "hi @p1"), ("p1", "hello alice")]
    assert CANARY not in page.text


def test_the_audit_page_is_read_from_its_newest_end_a_page_at_a_time(home):
    lines = [json.dumps({"time": f"2026-01-01T{n // 60:02d}:{n % 60:02d}:00Z", "caller": "manager",
                         "tool": "framework_resource_list" if n % 2 else "x_é_tool", "outcome": "ok"}, ensure_ascii=False) for n in range(120)]
    lines.insert(60, "{not json")  # a damaged line is shown as one, never a failure
    (home / "audit.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    c = client(home)

    def shown(path):
        text = c.get(path).text
        return [int(h) * 60 + int(m) for h, m in re.findall(r"2026-01-01T(\d\d):(\d\d):00Z", text)], text

    first, text = shown("/audit")
    assert 'rel="next"' in text and 'rel="prev"' not in text
    last, text = shown("/audit?page=3")
    assert 'rel="next"' not in text and 'rel="prev"' in text
    assert len(first) == 50 and first[0] == 119 and last[-1] == 0
    assert len(first) + len(shown("/audit?page=2")[0]) + len(last) == 120  # and the damaged line, shown as such
    only, text = shown("/audit?tool=x_%C3%A9_tool")
    assert only == list(range(118, 18, -2)) and "tool=x_%C3%A9_tool" in text  # the filter kept in the pager's links
    from framework_cli.tools.audit import _newest_first

    assert list(_newest_first(Home(home), block=7)) == list(reversed(lines))  # lines cut by any block edge come whole


def bound_p1(*agent_edits: str) -> None:
    """The basics, with agent principal p1 bound to a1 (edited first by `agent_edits`)."""
    make_basics()
    if agent_edits:
        fwj("agent", "edit", "a1", *agent_edits)
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("binding", "set", "p1", "--agent", "a1")


def test_a_principal_is_deleted_from_the_page_only_as_planned_after_its_binding_is_removed(home):
    bound_p1()
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("session", "create", "s1", "--member", "alice", "--member", "p1")
    c = client(home)
    token = csrf(c, "/principals")
    bound = c.get("/principals/p1/delete")
    assert bound.status_code == 409 and "remove its binding first" in bound.text and 'aria-label="Remove the binding"' in bound.text
    before = snapshot(home)
    assert c.post("/principals/p1/delete", data={"csrf_token": token, "confirm": "principal/p1"}).status_code == 409
    assert snapshot(home) == before  # a bound principal is not deleted, whatever is confirmed
    assert c.post("/principals", data={"csrf_token": token, "action": "unbind", "principal": "p1"}, follow_redirects=False).status_code == 303
    assert fwj("binding", "list")["bindings"] == []
    plan = c.get("/principals/p1/delete")
    assert plan.status_code == 200 and 'value="session/s1,principal/p1"' in plan.text
    fwj("session", "create", "s2", "--member", "alice", "--member", "p1")  # the plan grows meanwhile
    before = snapshot(home)
    stale = c.post("/principals/p1/delete", data={"csrf_token": token, "confirm": "session/s1,principal/p1"})
    assert stale.status_code == 409 and "The plan changed" in stale.text and 'value="session/s1,session/s2,principal/p1"' in stale.text
    assert snapshot(home) == before
    done = c.post("/principals/p1/delete", data={"csrf_token": token, "confirm": "session/s1,session/s2,principal/p1"})
    assert done.status_code == 200 and "Done, as planned" in done.text
    assert "p1 left session s1" in done.text and "p1 left session s2" in done.text and "principal p1 was deleted" in done.text
    assert [p["name"] for p in fwj("principal", "list")["principals"]] == ["alice"]


def test_ended_runs_are_dropped_from_the_runs_page_and_active_ones_kept(home):
    make_basics()
    ended = fwj("run", "start", "--agent", "a1")["run_id"]
    fwj("run", "end", ended)
    active = fwj("run", "start", "--agent", "a1")["run_id"]
    c = client(home)
    page = c.post("/runs/prune", data={"csrf_token": csrf(c, "/runs")})
    assert page.status_code == 200 and "1 ended run dropped" in page.text
    assert [r["run_id"] for r in fwj("run", "list")["runs"]] == [active]



def test_the_audit_page_links_the_runs_still_recorded_and_names_the_pruned_ones(home):
    make_basics()
    kept = fwj("run", "start", "--agent", "a1")["run_id"]
    pruned = fwj("run", "start", "--agent", "a1")["run_id"]
    for run_id in (kept, pruned):
        assert fw("tool", "call", "--run", run_id, "framework_memory_list", "--args", "{}").exit_code == 5  # refused, and audited
    fwj("run", "end", pruned)
    fwj("run", "prune")
    text = client(home).get("/audit").text
    assert f'<a href="/runs/{kept}">' in text and f'href="/runs/{pruned}"' not in text
    assert f"{pruned}</span> <span class=\"muted\">(pruned)</span>" in text

def test_a_local_bot_is_spoken_to_from_its_page_and_its_reply_shows_in_its_log(home):
    bound_p1("--event", "message.*")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "p1")
    c = client(home)
    token = csrf(c, "/bots/desk")
    say = {"csrf_token": token, "action": "say", "from": "alice", "group": "team", "no_run": ""}
    nobody = c.post("/bots", data={"csrf_token": token, "name": "other", "adapter": "local", "principal": "", "url": ""})
    assert nobody.status_code == 400 and "choose the principal" in nobody.text and 'id="err-principal"' in nobody.text
    refused = c.post("/bots/desk", data={**say, "text": "  "})
    assert refused.status_code == 400 and 'id="err-text"' in refused.text
    quiet = c.post("/bots/desk", data={**say, "text": "no mention here"}, follow_redirects=True)
    assert "no run was started: the message does not mention the bot" in quiet.text
    started = c.post("/bots/desk", data={**say, "text": "@desk is the build green?", "no_run": "1"}, follow_redirects=False)
    assert started.status_code == 303 and started.headers["location"].startswith("/runs/run-")
    run_id = started.headers["location"].split("/runs/")[1]
    run_page = c.get(f"/runs/{run_id}").text
    assert "event_reply" in run_page and "gateway_token" not in run_page
    assert "said “@desk is the build green?”" in run_page and "in group team" in run_page
    replied = c.post(f"/runs/{run_id}", data={"csrf_token": token, "action": "call", "tool": "event_reply", "args": '{"text": "Yes, all green."}'})
    assert replied.status_code == 200, replied.text
    log = c.get("/bots/desk").text
    assert "Yes, all green." in log and "team" in log
    assert CANARY not in log + run_page



def test_a_bot_is_removed_from_its_page_as_by_the_cli_its_token_and_waiting_events_with_it(home):
    from framework_cli.runtime.bot_events import enqueue
    from framework_cli.state.store import StateStore

    bound_p1("--event", "message.*")
    fw("bot", "add", "qq", "--adapter", "onebot", "--principal", "p1", "--access-token-stdin", input="bot-token-7f3a")
    with StateStore.open(Home(home)) as store, store.transaction():
        enqueue(store, "qq", "p1", {"type": "message.group", "group": {"id": "42"}, "actor": {"id": "7"}})
    c = client(home)
    page = c.get("/bots/qq")
    assert page.status_code == 200 and 'aria-label="Remove the bot"' in page.text and "fw bot remove qq" in page.text
    before = snapshot(home)
    forged = c.post("/bots/qq", data={"action": "remove"})  # no form token: refused, nothing changed
    assert forged.status_code == 403 and snapshot(home) == before
    done = c.post("/bots/qq", data={"csrf_token": csrf(c, "/bots/qq"), "action": "remove"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith("/bots?shown=")
    assert "Bot qq was removed." in c.get(done.headers["location"]).text
    assert "was removed" not in c.get(done.headers["location"]).text  # said once; a reload (or a crafted link) says nothing
    assert fwj("bot", "list")["bots"] == [] and not (home / "secrets" / "bot" / "qq.json").exists()
    assert [e["status"] for e in state_rows(home, "SELECT status FROM bot_events")] == ["cancelled"]
    assert [p["name"] for p in fwj("principal", "list")["principals"] if p["name"] == "p1"] == ["p1"]  # its principal stays
    assert c.get("/bots/qq").status_code == 404

def test_the_managers_tools_page_lists_every_tool_and_calls_one_as_the_manager(home):
    make_basics()
    c = client(home)
    page = c.get("/tools")
    assert page.status_code == 200 and "resource_list" in page.text and "resource_delete" in page.text
    token = csrf(c, "/tools")
    done = c.post("/tools", data={"csrf_token": token, "action": "call", "tool": "resource_list", "args": '{"kind": "agent"}'})
    assert done.status_code == 200 and 'aria-label="the result"' in done.text and "a1" in done.text
    assert [(e["caller"], e["tool"], e["outcome"]) for e in fwj("audit", "list")["entries"]][-1] == ("manager", "resource_list", "ok")
    before = snapshot(home)
    refused = c.post("/tools", data={"csrf_token": token, "action": "call", "tool": "resource_delete", "args": '{"kind": "agent", "name": "a1"}'})
    assert refused.status_code in (400, 409) and 'class="field-error"' in refused.text  # a delete without its confirmation is a plan
    assert fwj("resource", "read", "agent", "a1")["name"] == "a1"
    assert {k: v for k, v in snapshot(home).items() if "audit" not in k} == {k: v for k, v in before.items() if "audit" not in k}


def test_the_agent_forms_help_names_every_event_type_fw_produces(home):
    """The events field's help names the catalogue's event types (as `fw tool catalogue` does), not a copy of them."""
    from framework_cli.domain.catalogue import EVENT_TYPES

    make_basics()
    page = client(home).get("/agents/new").text
    help_text = re.search(r'<p class="help" id="help-events">(.*?)</p>', page, re.S).group(1)
    assert all(t in help_text for t in EVENT_TYPES) and len(EVENT_TYPES) == 7


def agent_whose_key_is_missing(monkeypatch):
    """Agent a1, on model m1 of provider nokey, whose key variable is not set."""
    monkeypatch.delenv("FW_TEST_UNSET_KEY", raising=False)
    fwj("resource", "write", "provider", "nokey", "--create", "--data",
        '{"base_url": "http://127.0.0.1:9/v1", "api_key_env": "FW_TEST_UNSET_KEY"}')
    fwj("resource", "write", "model", "m1", "--create", "--data", '{"provider": "nokey", "model_id": "x"}')
    fwj("agent", "create", "a1", "--model", "m1")


def test_a_run_whose_provider_has_no_key_is_refused_at_its_field_with_the_pages_words(home, monkeypatch):
    agent_whose_key_is_missing(monkeypatch)
    fwj("agent", "create", "silent")
    fwj("principal", "create", "quiet", "--kind", "agent")
    fwj("binding", "set", "quiet", "--agent", "silent")
    c = client(home)
    token = csrf(c, "/runs")
    before = snapshot(home)
    page = c.post("/runs/new", data={"csrf_token": token, "agent": "a1", "principal": "", "message": "hi"})
    assert page.status_code == 400 and 'id="err-agent"' in page.text and 'id="err-message"' not in page.text
    assert "/providers/nokey/edit" in page.text and "--api-key-stdin" not in page.text
    page = c.post("/runs/new", data={"csrf_token": token, "agent": "", "principal": "quiet", "message": "hi"})
    assert page.status_code == 400 and 'id="err-principal"' in page.text and "no model" in page.text
    page = c.post("/runs/new", data={"csrf_token": token, "agent": "a1", "principal": "", "message": " "})
    assert page.status_code == 400 and 'id="err-message"' in page.text
    assert snapshot(home) == before and fwj("run", "list")["runs"] == []


def test_a_serving_process_is_shown_by_its_machines_name_and_pid_on_every_screen(home):
    import os
    import signal
    import socket
    import subprocess
    import time

    from conftest import fw_bin

    serving = subprocess.Popen([fw_bin(), "dispatch"], env={**os.environ, "FW_HOME": str(home)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not fwj("status")["serving"] and time.monotonic() < deadline:
            time.sleep(0.1)
        row = fwj("status")["serving"][0]
        assert row["host"].startswith(socket.gethostname() + "/") and row["process"].startswith(f"{serving.pid}:")
        page = client(home).get("/status").text
        assert f"fw dispatch on {socket.gethostname()}, pid {serving.pid}," in page and row["host"] not in page
        checked = fw("state", "check").stdout
        assert socket.gethostname() in checked and row["host"] not in checked
    finally:
        serving.send_signal(signal.SIGINT)
        serving.communicate(timeout=60)
    assert serving.returncode == 0


def test_an_unbound_agents_page_names_its_next_steps_in_the_pages_words(home):
    make_basics()
    fwj("agent", "create", "x")  # no model, no principal, no binding
    page = client(home).get("/agents/x/edit").text
    assert "next, choose its model below, then on the" in page
    assert "create an agent principal <code>x</code> for it" in page and "bind <code>x</code> to this agent" in page
    steps = fwj("agent", "show", "x")["activation"]["next_steps"]
    assert all({"tool", "args", "command", "why"} <= set(step) for step in steps)  # the documented shape, each


def test_the_tasks_page_says_why_a_task_failed(home, monkeypatch):
    agent_whose_key_is_missing(monkeypatch)
    fwj("principal", "create", "bob", "--kind", "agent")
    fwj("binding", "set", "bob", "--agent", "a1")
    fwj("task", "create", "bob", "--instructions", "tidy up")
    assert fwj("dispatch", "--once")["tasks"]["failed"] == 1
    page = client(home).get("/tasks").text
    assert "tidy up" in page and "$FW_TEST_UNSET_KEY" in page and "why it failed" in page
