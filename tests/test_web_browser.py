"""The web page in a real browser: Debian's chromium driven by Playwright, against a real
`fw web` on 127.0.0.1 started for each test on the test's own home. One browser serves the
whole module; each test signs in a fresh browser context with its server's one-time URL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import CANARY, fw_bin, fwj, make_basics, snapshot
from fakes.chat_server import ChatServer
from playwright.sync_api import Page, expect, sync_playwright
from test_sessions import setup

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
FAKE_MCP = str(Path(__file__).parent / "fakes" / "mcp_server.py")
SIGN_IN_LINE = re.compile(r"fw web: (http://127\.0\.0\.1:\d+)/\?token=([A-Za-z0-9_-]+)\n")


@dataclass
class Web:
    base: str
    signin: str
    proc: subprocess.Popen


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def web(home):
    proc = subprocess.Popen([fw_bin(), "web", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "FW_HOME": str(home)})
    try:
        line = proc.stdout.readline()
        found = SIGN_IN_LINE.fullmatch(line)
        assert found, f"first line {line!r}; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"
        yield Web(found.group(1), line.removeprefix("fw web: ").strip(), proc)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def page(browser, web):
    context = browser.new_context()
    signed_in = context.new_page()
    signed_in.goto(web.signin)
    expect(signed_in.get_by_role("heading", name="The home at a glance")).to_be_visible()
    yield signed_in
    context.close()


def save(page: Page) -> None:
    with page.expect_navigation():
        page.get_by_role("button", name="Save", exact=True).click()


def processes_with(marker: str) -> list[str]:
    listing = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in listing.splitlines() if marker in line and "ps -eo" not in line]


def agent_file(home: Path, name: str = "a1") -> Path:
    return home / "agents" / "default" / f"{name}.yaml"


def test_the_sign_in_url_works_once_and_nothing_else_gets_in(browser, web, home):
    make_basics()
    before = snapshot(home)
    first = browser.new_context()
    landed = first.new_page()
    landed.goto(web.signin)
    assert landed.url == web.base + "/"  # the token leaves the address bar at once
    expect(landed.get_by_role("heading", name="The home at a glance")).to_be_visible()
    second = browser.new_context()
    refused = second.new_page()
    answer = refused.goto(web.signin)
    assert answer.status == 401
    expect(refused.get_by_role("alert")).to_contain_text("already used")
    assert refused.goto(web.base + "/agents/a1/edit").status == 401
    posted = second.request.post(web.base + "/agents/a1/edit", form={"description": "changed", "builtin_tools": "resource_management"})
    assert posted.status == 401
    assert snapshot(home) == before
    first.close()
    second.close()


def test_create_an_agent_with_two_builtin_groups_ticked(page, web, home):
    make_basics()
    page.goto(web.base + "/agents/new")
    page.get_by_label("name", exact=True).fill("a2")
    page.get_by_label("description", exact=True).fill("made in a browser")
    page.get_by_label("model", exact=True).select_option("m1")
    page.get_by_label("resource_management", exact=True).check()
    page.get_by_label("task_collaboration", exact=True).check()
    save(page)
    assert page.url == web.base + "/agents/a2/edit?saved=1"
    expect(page.get_by_role("status")).to_have_text("Saved.")
    data = fwj("agent", "show", "a2")["data"]
    assert data["builtin_tools"] == ["resource_management", "task_collaboration"]
    assert data["model"] == "m1" and data["description"] == "made in a browser"
    assert "builtin_tools:\n  - resource_management\n  - task_collaboration\n" in agent_file(home, "a2").read_text()
    expect(page.get_by_label("task_collaboration", exact=True)).to_be_checked()
    expect(page.get_by_label("local_execution", exact=True)).not_to_be_checked()


def test_untick_a_group_then_cancel_writes_nothing(page, web, home):
    make_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management", "--builtin-tool", "task_collaboration")
    before = snapshot(home)
    page.goto(web.base + "/agents/a1/edit")
    page.get_by_label("task_collaboration", exact=True).uncheck()
    page.get_by_label("description", exact=True).fill("not to be saved")
    with page.expect_navigation():
        page.get_by_role("button", name="Cancel", exact=True).click()
    assert page.url == web.base + "/agents"
    assert snapshot(home) == before


def test_an_invalid_edit_shows_the_error_at_its_field_and_keeps_every_typed_value(page, web, home):
    make_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management", "--builtin-tool", "task_collaboration")
    before = snapshot(home)
    page.goto(web.base + "/agents/a1/edit")
    page.get_by_label("description", exact=True).fill("typed, not saved")
    page.get_by_label("task_collaboration", exact=True).uncheck()
    page.get_by_label("execution enabled", exact=True).check()
    page.get_by_label("platform_send_message", exact=True).check()
    page.get_by_label("events", exact=True).fill("nonsense.event")
    save(page)
    expect(page.get_by_role("alert")).to_contain_text("events")
    expect(page.get_by_role("alert")).to_contain_text("selects no event type")
    events = page.get_by_label("events", exact=True)
    expect(events).to_have_value("nonsense.event")
    expect(events).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#err-events")).to_contain_text("selects no event type")
    expect(page.get_by_label("description", exact=True)).to_have_value("typed, not saved")
    expect(page.get_by_label("model", exact=True)).to_have_value("m1")
    expect(page.get_by_label("resource_management", exact=True)).to_be_checked()
    expect(page.get_by_label("task_collaboration", exact=True)).not_to_be_checked()
    expect(page.get_by_label("execution enabled", exact=True)).to_be_checked()
    expect(page.get_by_label("platform_send_message", exact=True)).to_be_checked()
    assert snapshot(home) == before


def test_the_allowed_tools_are_what_the_sources_give_now_and_saving_writes_the_ticked_list(page, web, home, tmp_path):
    marker = f"fw-web-test-{uuid.uuid4().hex}"
    make_basics()
    fwj("resource", "write", "skill", "s1", "--create", "--data", json.dumps({"description": "the first skill", "body": "one"}))
    fwj("resource", "write", "skill", "s2", "--create", "--data", json.dumps({"description": "the second skill", "body": "two"}))
    fwj("resource", "write", "mcp", "fake", "--create", "--data",
        json.dumps({"transport": "stdio", "command": sys.executable, "args": [FAKE_MCP, marker]}))
    fwj("resource", "write", "mcp", "broken", "--create", "--data",
        json.dumps({"transport": "stdio", "command": str(tmp_path / "no-such-server"), "args": [marker]}))
    fwj("agent", "edit", "a1", "--mcp", "fake", "--mcp", "broken", "--skill", "s1")
    page.goto(web.base + "/agents/a1/edit")
    allowed = page.get_by_role("group", name="allowed_tools")
    boxes = allowed.locator("input[name=allowed_tools]")
    names = boxes.evaluate_all("boxes => boxes.map(b => b.value)")
    assert "mcp__fake__echo" in names and "mcp__fake__add" in names and "skill__s1" in names
    assert not [n for n in names if n.startswith("mcp__broken")]
    for name in names:
        expect(page.get_by_label(name, exact=True)).to_be_checked()  # no allowed_tools yet: every tool
    expect(allowed).to_contain_text("MCP server broken offers nothing (source_unavailable)")
    assert processes_with(marker) == []  # the servers started to list their tools are stopped again

    page.get_by_label("mcp__fake__add", exact=True).uncheck()
    save(page)
    assert fwj("agent", "show", "a1")["data"]["allowed_tools"] == [n for n in names if n != "mcp__fake__add"]
    expect(page.get_by_label("mcp__fake__add", exact=True)).not_to_be_checked()
    expect(page.get_by_label("mcp__fake__echo", exact=True)).to_be_checked()
    assert processes_with(marker) == []


def test_choosing_a_skill_lists_its_tool_at_once_and_keeps_what_was_unticked(page, web, home):
    make_basics()
    for name in ("s1", "s2"):
        fwj("resource", "write", "skill", name, "--create", "--data", json.dumps({"description": f"skill {name}", "body": "text"}))
    fwj("agent", "edit", "a1", "--skill", "s1")
    page.goto(web.base + "/agents/a1/edit")
    page.get_by_label("skill__s1", exact=True).uncheck()
    page.get_by_label("s2", exact=True).check()  # the page's script fetches the allowed_tools part again
    expect(page.get_by_label("skill__s2", exact=True)).to_be_checked()
    expect(page.get_by_label("skill__s1", exact=True)).not_to_be_checked()
    page.get_by_label("events", exact=True).fill("friend.request_received")
    page.get_by_label("events", exact=True).blur()
    expect(page.get_by_label("event_respond_friend_request", exact=True)).to_be_checked()
    expect(page.get_by_label("event_respond_friend_request", exact=True)).to_be_disabled()
    expect(page.get_by_label("event_kick_member", exact=True)).not_to_be_checked()
    save(page)
    data = fwj("agent", "show", "a1")["data"]
    assert data["skills"] == ["s1", "s2"] and data["allowed_tools"] == ["skill__s2"]
    assert data["events"] == ["friend.request_received"]


def test_the_model_form_offers_the_providers_live_model_ids(page, web, home):
    with ChatServer([{"content": "unused"}]) as server:
        fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": server.base_url, "api_key": CANARY}))
        fwj("resource", "write", "provider", "p2", "--create", "--data",
            json.dumps({"base_url": "https://llm.example.test/v1", "api_key_env": "FW_WEB_TEST_UNSET"}))
        page.goto(web.base + "/models/new?provider=p1")
        expect(page.get_by_label("provider", exact=True)).to_have_value("p1")
        options = page.locator("datalist#model-ids option").evaluate_all("options => options.map(o => o.value)")
        assert options == ["m-1"]
        expect(page.locator("#live-models")).to_contain_text("The provider p1 offers: m-1")
        assert page.get_by_label("model_id", exact=True).get_attribute("list") == "model-ids"
        page.get_by_label("provider", exact=True).select_option("p2")
        expect(page.locator("#live-models")).to_contain_text("Could not list the models of p2")
        page.get_by_label("provider", exact=True).select_option("p1")
        expect(page.locator("#live-models")).to_contain_text("offers: m-1")
        page.get_by_label("name", exact=True).fill("m2")
        page.get_by_label("model_id", exact=True).fill("a-typed-id")
        page.get_by_label("tool_call", exact=True).check()
        save(page)
    data = fwj("resource", "read", "model", "m2")["data"]
    assert data == {"provider": "p1", "model_id": "a-typed-id", "capabilities": {"tool_call": True}}


def test_a_provider_key_goes_to_secrets_and_into_no_page(page, web, home):
    page.goto(web.base + "/providers/new")
    page.get_by_label("name", exact=True).fill("p1")
    page.get_by_label("base_url", exact=True).fill("https://llm.example.test/v1")
    page.get_by_label("api_key", exact=True).fill(CANARY)
    save(page)
    assert page.url == web.base + "/providers/p1/edit?saved=1"
    expect(page.get_by_label("api_key", exact=True)).to_have_value("")
    stored = [p for p in home.rglob("*") if p.is_file() and CANARY in p.read_text(errors="replace")]
    assert stored and all(p.relative_to(home).parts[0] == "secrets" for p in stored)
    fwj("resource", "write", "model", "m1", "--create", "--data", json.dumps({"provider": "p1", "model_id": "x"}))
    for path in ("/", "/agents", "/agents/new", "/providers", "/providers/p1/edit", "/models/new?provider=p1",
                 "/models/m1/edit", "/delete/provider/p1?recursive=1"):
        page.goto(web.base + path)
        assert CANARY not in page.content(), path
    page.goto(web.base + "/providers/p1/edit")
    page.get_by_label("description", exact=True).fill("the key stays")
    save(page)
    assert fwj("resource", "read", "provider", "p1")["data"]["api_key_set"] is True
    assert CANARY not in page.content()


def test_delete_a_model_recursively_through_the_plan_page(page, web, home):
    make_basics()
    page.goto(web.base + "/delete/model/m1")
    expect(page.get_by_text("other resources use it")).to_be_visible()  # the page's words, not the command line's
    assert "has_dependents" not in page.content() and "--recursive" not in page.content() and "`" not in page.content()
    expect(page.get_by_role("button", name="Delete", exact=True)).to_be_disabled()
    page.get_by_role("link", name="Plan a recursive delete").click()
    assert page.url.endswith("/delete/model/m1?recursive=1")
    tree = page.get_by_role("list", name="the plan as a tree")
    expect(tree).to_contain_text("model/m1")
    expect(tree.locator("ul li")).to_have_text("agent/a1")  # the agent, under the model it uses
    with page.expect_navigation():
        page.get_by_role("button", name="Delete", exact=True).click()
    expect(page.get_by_role("status")).to_have_text("Deleted 2 items:")
    assert not agent_file(home).exists() and not (home / "models/default/m1.yaml").exists()
    assert (home / "providers/default/p1.yaml").exists()


def test_a_wrong_csrf_token_is_refused_and_changes_nothing(page, web, home):
    make_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management")
    before = snapshot(home)
    page.goto(web.base + "/agents/a1/edit")
    page.get_by_label("resource_management", exact=True).uncheck()
    page.locator("input[name=csrf_token]").evaluate("input => { input.value = 'forged' }")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Save", exact=True).click()
    assert posted.value.status == 403
    assert snapshot(home) == before


# -- the runtime's pages ----------------------------------------------------------------------------
def runtime_basics():
    make_basics()
    fwj("principal", "create", "p1", "--kind", "agent")
    fwj("principal", "create", "alice", "--kind", "user")


def test_principals_page_creates_binds_disables_and_enables_noting_who(page, web, home):
    runtime_basics()
    page.goto(web.base + "/principals")
    new = page.get_by_role("form", name="New principal")
    new.get_by_label("name", exact=True).fill("bad name!")
    with page.expect_navigation():
        new.get_by_role("button", name="Create principal").click()
    expect(page.locator("#err-name")).to_be_visible()  # the error at its field
    assert not (home / "principals/bad name!.yaml").exists()
    new = page.get_by_role("form", name="New principal")
    new.get_by_label("name", exact=True).fill("helper")
    with page.expect_navigation():
        new.get_by_role("button", name="Create principal").click()
    assert fwj("principal", "list")["principals"][-1]["name"] in ("helper", "p1", "alice")
    bind = page.get_by_role("form", name="Bind an agent")
    bind.get_by_label("principal", exact=True).select_option("p1")
    bind.get_by_label("agent", exact=True).select_option("a1")
    with page.expect_navigation():
        bind.get_by_role("button", name="Bind and enable").click()
    binding = fwj("binding", "list")["bindings"][0]
    assert (binding["principal"], binding["agent"], binding["enabled"]) == ("p1", "a1", True)
    assert binding["enabled_by"].endswith("(fw web)")
    with page.expect_navigation():
        page.get_by_role("button", name="Disable p1").click()
    assert fwj("binding", "list")["bindings"][0]["enabled"] is False
    expect(page.get_by_role("row", name=re.compile("p1"))).to_contain_text("disabled")
    with page.expect_navigation():
        page.get_by_role("button", name="Enable p1").click()
    assert fwj("binding", "list")["bindings"][0]["enabled"] is True
    expect(page.get_by_role("row", name=re.compile("p1"))).to_contain_text("(fw web)")
    fwj("session", "create", "s1", "--member", "alice", "--member", "p1")
    with page.expect_navigation():
        page.get_by_role("button", name="Remove the binding of p1").click()
    assert fwj("binding", "list")["bindings"] == []
    page.get_by_role("link", name="Delete p1").click()
    plan = page.get_by_role("form", name="The plan")
    expect(plan).to_contain_text("p1 leaves session s1")
    with page.expect_navigation():
        plan.get_by_role("button", name="Delete, as planned").click()
    expect(page.get_by_role("status")).to_contain_text("Done, as planned")
    expect(page.get_by_role("listitem").filter(has_text="p1 left session s1")).to_be_visible()
    assert sorted(p["name"] for p in fwj("principal", "list")["principals"]) == ["alice", "helper"]


def test_bots_page_adds_a_bot_its_token_only_in_secrets_and_a_refusal_writes_nothing(page, web, home):
    runtime_basics()
    fwj("binding", "set", "p1", "--agent", "a1")
    page.goto(web.base + "/bots")
    before = snapshot(home)
    form = page.get_by_role("form", name="New bot")
    form.get_by_label("name", exact=True).fill("qq")
    form.get_by_label("principal", exact=True).select_option("p1")
    form.get_by_label("access_token", exact=True).fill("short")
    with page.expect_navigation():
        form.get_by_role("button", name="Add bot").click()
    expect(page.get_by_role("alert")).not_to_be_empty()
    assert snapshot(home) == before
    form = page.get_by_role("form", name="New bot")
    form.get_by_label("name", exact=True).fill("qq")
    form.get_by_label("principal", exact=True).select_option("p1")
    form.get_by_label("access_token", exact=True).fill("web-token-8c1f5a2e9d")
    with page.expect_navigation():
        form.get_by_role("button", name="Add bot").click()
    expect(page.get_by_role("row", name=re.compile("qq"))).to_contain_text("offline")
    assert "web-token-8c1f5a2e9d" not in page.content()
    holders = [p for p in home.rglob("*") if p.is_file() and "web-token-8c1f5a2e9d" in p.read_text(errors="replace")]
    assert holders and all(p.relative_to(home).parts[0] == "secrets" for p in holders)
    page.get_by_role("link", name="qq", exact=True).click()
    form = page.get_by_role("form", name="Change the bot")
    form.get_by_label("url", exact=True).fill("http://127.0.0.1:9")
    form.get_by_label("secret", exact=True).fill("web-secret-3b7d9e1c5a")
    with page.expect_navigation():
        form.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_role("status")).to_have_text("Saved.")
    assert fwj("bot", "show", "qq")["url"] == "http://127.0.0.1:9"
    assert "web-secret-3b7d9e1c5a" not in page.content() and "web-token-8c1f5a2e9d" not in page.content()
    stored = json.loads((home / "secrets/bot/qq.json").read_text())
    assert stored == {"access_token": "web-token-8c1f5a2e9d", "secret": "web-secret-3b7d9e1c5a"}  # the empty token field kept the token


def test_a_local_bot_page_says_a_message_and_its_reply_made_by_hand_shows_in_its_log(page, web, home):
    """The bot tour from the page: a mention starts a run (start the run only), its page calls
    event_reply by hand, and the bot's page shows the reply sent to the group."""
    runtime_basics()
    fwj("agent", "edit", "a1", "--event", "message.*")
    fwj("binding", "set", "p1", "--agent", "a1")
    fwj("bot", "add", "lobby", "--adapter", "local", "--principal", "p1")
    page.goto(web.base + "/bots/lobby")
    form = page.get_by_role("form", name="Say something to the bot")
    form.get_by_label("from", exact=True).fill("alice")
    form.get_by_label("group", exact=True).fill("team")
    form.get_by_label("text", exact=True).fill("@lobby is the build green?")
    form.get_by_label(re.compile("start the run only")).check()
    with page.expect_navigation():
        form.get_by_role("button", name="Say it").click()
    assert "/runs/run-" in page.url
    call = page.get_by_role("form", name="Call a tool")
    call.get_by_label("tool", exact=True).select_option("event_reply")
    call.get_by_label("arguments (JSON)").fill('{"text": "Yes, all green."}')
    with page.expect_navigation():
        call.get_by_role("button", name="Call").click()
    expect(page.get_by_role("region", name="the result")).to_be_visible()
    page.goto(web.base + "/bots/lobby")
    expect(page.get_by_role("region", name="What it did")).to_contain_text("Yes, all green.")
    assert CANARY not in page.content()


def test_the_tools_page_calls_a_tool_as_the_manager(page, web, home):
    runtime_basics()
    page.goto(web.base + "/tools")
    expect(page.get_by_role("table", name="tools")).to_contain_text("resource_list")
    call = page.get_by_role("form", name="Call a tool")
    call.get_by_label("tool", exact=True).select_option("resource_list")
    call.get_by_label("arguments (JSON)").fill('{"kind": "agent"}')
    with page.expect_navigation():
        call.get_by_role("button", name="Call").click()
    expect(page.get_by_role("region", name="the result")).to_contain_text('"a1"')
    assert fwj("audit", "list")["entries"][-1]["tool"] == "resource_list"


def test_a_session_page_lists_messages_posts_as_a_user_and_reloads_while_a_turn_waits(page, web, home):
    runtime_basics()
    fwj("binding", "set", "p1", "--agent", "a1")
    page.goto(web.base + "/sessions")
    form = page.get_by_role("form", name="New session")
    form.get_by_label("name", exact=True).fill("s1")
    form.get_by_label("alice").check()
    form.get_by_label("p1").check()
    with page.expect_navigation():
        form.get_by_role("button", name="Start session").click()
    assert fwj("session", "list")["sessions"][0]["members"] == ["alice", "p1"]
    fwj("message", "post", "s1", "--as", "alice", "first words")
    page.goto(web.base + "/sessions")
    page.get_by_role("link", name="s1").click()
    expect(page.get_by_role("list", name="messages")).to_contain_text("first words")
    assert 'name="fw-reload"' not in page.content()
    page.get_by_label("author", exact=True).select_option("alice")
    page.get_by_label("text", exact=True).fill("hello @p1")
    with page.expect_navigation():
        page.get_by_role("button", name="Post", exact=True).click()
    expect(page.get_by_role("list", name="messages")).to_contain_text("hello @p1")
    assert [t["status"] for t in fwj("turn", "list")["turns"]] == ["pending"]
    assert 'name="fw-reload"' in page.content()  # a turn waits: the page reloads itself...
    with page.expect_navigation(timeout=10_000):
        pass  # ...by itself, within its 3 seconds
    page.get_by_label("text", exact=True).fill("half a thought")
    page.wait_for_timeout(4000)
    expect(page.get_by_label("text", exact=True)).to_have_value("half a thought")  # ...but never while a message is being written


def test_runs_page_starts_a_run_calls_its_tools_by_hand_filters_and_ends_it(page, web, home):
    runtime_basics()
    fwj("agent", "edit", "a1", "--builtin-tool", "resource_management")
    fwj("binding", "set", "p1", "--agent", "a1")
    other = fwj("run", "start", "--agent", "a1")["run_id"]
    fwj("run", "end", other)
    page.goto(web.base + "/runs")
    page.get_by_role("link", name="Start a run").click()
    form = page.get_by_role("form", name="Start a run")
    with page.expect_navigation():
        form.get_by_role("button", name="Start").click()  # neither a principal nor an agent
    expect(page.get_by_role("form", name="Start a run").locator("#err-principal")).to_contain_text("one of the two")
    assert [r["status"] for r in fwj("run", "list")["runs"]] == ["ended"]  # nothing started
    page.get_by_label("principal", exact=True).select_option("p1")
    page.get_by_label("lease", exact=True).select_option(label="10 minutes")
    with page.expect_navigation():
        page.get_by_role("button", name="Start").click()
    expect(page.get_by_role("status")).to_contain_text("The run was started")
    run = page.url.split("/runs/")[1].split("?")[0]
    assert fwj("run", "show", run)["identity"] == "p1"
    call = page.get_by_role("form", name="Call a tool")
    call.get_by_label("tool", exact=True).select_option("framework_resource_list")
    call.get_by_label("arguments (JSON)").fill('{"kind": ')
    with page.expect_navigation():
        call.get_by_role("button", name="Call").click()
    expect(page.locator("#err-args")).to_contain_text("not JSON")
    page.get_by_label("arguments (JSON)").fill('{"kind": "agent"}')
    with page.expect_navigation():
        page.get_by_role("button", name="Call").click()
    expect(page.get_by_role("region", name="the result")).to_contain_text('"a1"')
    expect(page.get_by_role("table", name="tool calls").get_by_role("cell", name="framework_resource_list")).to_be_visible()  # audited
    page.goto(web.base + "/runs?status=active")
    expect(page.get_by_role("link", name=run)).to_be_visible()
    expect(page.get_by_role("link", name=other)).to_have_count(0)
    page.get_by_role("link", name=run).click()
    assert 'name="fw-reload"' in page.content()  # active: it reloads itself
    with page.expect_navigation():
        page.get_by_role("button", name="End the run").click()
    expect(page.get_by_role("status")).to_contain_text("ended")
    assert fwj("run", "show", run)["status"] == "ended"
    page.goto(web.base + "/runs")
    with page.expect_navigation():
        page.get_by_role("button", name="Drop the records of ended runs").click()
    expect(page.get_by_role("status")).to_contain_text("2 ended runs dropped")
    assert fwj("run", "list")["runs"] == []
    page.goto(web.base + "/audit?tool=framework_resource_list")
    expect(page.get_by_text(f"{run} (pruned)")).to_be_visible()  # its record was dropped: named, not linked
    expect(page.get_by_role("link", name=run)).to_have_count(0)
    page.goto(web.base + "/audit?tool=nothing_like_it")
    expect(page.get_by_text("No entries match.")).to_be_visible()
    for path in ("/runs", "/audit", "/status", "/tasks", "/principals", "/bots", "/sessions", "/tools"):
        page.goto(web.base + path)
        assert CANARY not in page.content(), path


def test_tasks_and_status_pages_show_the_queue_and_run_it_once(page, web, home):
    with ChatServer([{"content": "There is one agent."}], repeat_last=True) as model:
        setup(model.base_url, "p1")  # agent p1, bound to principal p1
        fwj("task", "create", "p1", "--instructions", "count the agents")
        page.goto(web.base + "/tasks")
        expect(page.get_by_role("row", name=re.compile("count the agents"))).to_contain_text("pending")
        page.goto(web.base + "/status")
        expect(page.get_by_role("table", name="principals").get_by_role("row", name=re.compile("p1"))).to_contain_text("1")
        with page.expect_navigation():
            page.get_by_role("button", name="Run the queue once").click()
        expect(page.get_by_role("status").filter(has_text="run once")).to_contain_text("Tasks: 1 run, 1 done")
    assert [t["status"] for t in fwj("task", "list")["tasks"]] == ["done"]
    page.goto(web.base + "/tasks")
    expect(page.get_by_role("row", name=re.compile("count the agents"))).to_contain_text("done")
    assert CANARY not in page.content()


def test_an_unknown_page_is_the_sites_own_404_and_the_favicon_is_served(page, web):
    response = page.goto(web.base + "/no/such/page")
    assert response.status == 404
    expect(page.get_by_role("navigation", name="main")).to_be_visible()  # the site's own page, styled, with its menu
    expect(page.get_by_role("alert")).to_contain_text("There is no page at /no/such/page")
    icon = page.request.get(web.base + "/static/favicon.svg")
    assert icon.status == 200 and b"<svg" in icon.body()


def test_an_agent_runs_from_the_runs_page_and_its_answer_shows(browser, home):
    """As `fw agent run`: the page starts the run, the scripted model answers, the run ends and
    its page shows the answer; an empty message is refused at its field and starts nothing."""
    with ChatServer([{"content": "Three agents."}], repeat_last=True) as model:
        fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": model.base_url, "api_key": CANARY}))
        fwj("resource", "write", "model", "m1", "--create", "--data", json.dumps({"provider": "p1", "model_id": "m-1"}))
        fwj("agent", "create", "a1", "--model", "m1")
        proc = subprocess.Popen([fw_bin(), "web", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "FW_HOME": str(home)})
        context = browser.new_context()
        try:
            line = proc.stdout.readline()
            found = SIGN_IN_LINE.fullmatch(line)
            assert found, line
            page = context.new_page()
            page.goto(line.removeprefix("fw web: ").strip())
            page.goto(found.group(1) + "/runs")
            form = page.get_by_role("form", name="Run an agent")
            form.get_by_label("agent", exact=True).select_option("a1")
            with page.expect_navigation():
                form.get_by_role("button", name="Run", exact=True).click()
            expect(page.locator("#err-message")).to_be_visible()
            assert fwj("run", "list")["runs"] == []
            form = page.get_by_role("form", name="Run an agent")
            form.get_by_label("agent", exact=True).select_option("a1")
            form.get_by_label("message", exact=True).fill("How many agents are there?")
            with page.expect_navigation():
                form.get_by_role("button", name="Run", exact=True).click()
            expect(page.get_by_role("region", name="the answer")).to_contain_text("Three agents.")
            runs = fwj("run", "list")["runs"]
            assert [r["status"] for r in runs] == ["ended"] and CANARY not in page.content()
            assert model.requests[0]["json"]["messages"][-1]["content"] == "How many agents are there?"
        finally:
            context.close()
            proc.terminate()
            proc.wait(timeout=30)
