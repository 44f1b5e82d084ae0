"""The whole catalogue of an agent (issue 30, seed B): `fw agent tools NAME [--json]` and the
agent page list every tool a run of it may be offered, by source, each with whether it is
allowed and available and why not; the page saves `mcps` in their order."""

import json
import re
import sys

from conftest import fw, fwj, snapshot
from test_agent_run import FAKE_MCP
from test_tasks_exec import provider_and_model
from test_web import client, csrf, page_form

SOURCES = ("builtin", "managed_runtime", "event", "platform", "sandbox", "mcp", "plugin", "skill")
KEYS = {"name", "source", "allowed", "available", "reason", "detail", "group", "server", "plugin", "skill"}


def mcp(name, *args, command=sys.executable):
    data = {"transport": "stdio", "command": command, "args": [FAKE_MCP, *args] if command == sys.executable else list(args)}
    fwj("resource", "write", "mcp", name, "--create", "--data", json.dumps(data))


def rich_agent(**more):
    """An agent that draws on every source: groups (one unmounted, exec without execution),
    events and a platform tool, the sandbox, two MCP servers (one that cannot start), a skill
    and the example plugin; allowed_tools names some of each governed source."""
    provider_and_model("x", "http://127.0.0.1:9/v1")
    mcp("files")
    mcp("dead", command="/nonexistent/mcp-server")
    fwj("resource", "write", "skill", "s1", "--create", "--data", json.dumps({"description": "a skill", "body": "text"}))
    fwj("plugin", "enable", "example")
    data = {"model": "m-x", "builtin_tools": ["resource_management", "local_execution"], "events": ["message.*"],
            "allowed_platform_tools": ["platform_send_message"], "sandbox": {}, "mcps": ["files", "dead"], "skills": ["s1"],
            "allowed_tools": ["sandbox__read_file", "mcp__files__echo", "plugin__example__greet", "skill__s1"], **more}
    fwj("resource", "write", "agent", "a1", "--create", "--data", json.dumps(data))


def test_fw_agent_tools_lists_the_whole_catalogue_with_reasons(home, example_plugin):
    rich_agent()
    doc = fwj("agent", "tools", "a1")
    assert doc["agent"] == "a1"
    tools = {t["name"]: t for t in doc["tools"]}
    assert [s for s in SOURCES if any(t["source"] == s for t in doc["tools"])] == list(SOURCES)
    order = [t["source"] for t in doc["tools"]]
    assert order == sorted(order, key=SOURCES.index)  # grouped by source, in the catalogue's order
    for tool in doc["tools"]:
        assert set(tool) <= KEYS and isinstance(tool["allowed"], bool) and isinstance(tool["available"], bool)
        assert ("reason" in tool) == (not (tool["allowed"] and tool["available"])), tool

    def state(name):
        tool = tools[name]
        return tool["allowed"], tool["available"], tool.get("reason")

    assert state("framework_resource_write") == (True, True, None) and tools["framework_resource_write"]["group"] == "resource_management"
    assert state("framework_task_delegate") == (False, True, "not_mounted")
    assert state("framework_exec") == (False, True, "execution_disabled")
    assert state("framework_memory_write") == (True, True, None) and tools["framework_memory_write"]["source"] == "managed_runtime"
    assert state("event_reply") == (True, True, None)
    assert state("event_respond_friend_request") == (False, True, "event_not_selected")
    assert state("platform_send_message") == (True, True, None) and state("platform_kick_member") == (False, True, "not_allowed")
    assert state("sandbox__read_file") == (True, True, None) and state("sandbox__exec") == (False, True, "not_allowed")
    assert state("mcp__files__echo") == (True, True, None) and state("mcp__files__add") == (False, True, "not_allowed")
    assert tools["mcp__files__echo"]["server"] == "files"
    assert state("mcp__dead__*") == (False, False, "source_unavailable") and tools["mcp__dead__*"]["server"] == "dead"
    assert state("plugin__example__greet") == (True, True, None) and state("plugin__example__sign") == (False, True, "not_allowed")
    assert tools["plugin__example__greet"]["plugin"] == "example"
    assert state("skill__s1") == (True, True, None)

    # a run of the agent is offered exactly what the catalogue allows and has available
    run = fwj("run", "start", "--agent", "a1")
    offered = {t["name"] for t in doc["tools"] if t["allowed"] and t["available"]
               and t["source"] not in ("event", "platform", "managed_runtime")}  # an explicit run, with no event
    assert set(run["tools"]) == offered
    human = fw("agent", "tools", "a1")
    assert human.exit_code == 0 and "plugin__example__greet" in human.stdout and "execution_disabled" in human.stdout
    assert f"without --principal a run gets {len(offered)})" in " ".join(human.stdout.split()), human.stdout  # as run start got


def test_every_tool_of_a_model_without_tool_calling_is_unavailable(home):
    provider_and_model("x", "http://127.0.0.1:9/v1")
    fwj("resource", "write", "model", "m-plain", "--create", "--data", json.dumps({"provider": "p-x", "model_id": "plain"}))
    fwj("agent", "create", "a1", "--model", "m-plain", "--builtin-tool", "resource_management")
    tools = fwj("agent", "tools", "a1")["tools"]
    assert {t.get("reason") for t in tools if t["allowed"]} == {"runner_call_permission_missing"}


def test_fw_agent_tools_of_a_missing_agent_is_not_found(home):
    r = fw("agent", "tools", "nope", "--json")
    assert r.exit_code == 3 and r.json["error"]["code"] == "not_found"


# -- the page -------------------------------------------------------------------------------
def test_the_agent_page_shows_the_catalogue_by_source(home, example_plugin):
    rich_agent()
    page = client(home).get("/agents/a1/edit").text
    for source in SOURCES:
        assert f'<table class="catalogue" data-source="{source}">' in page
    assert re.search(r'<tr data-tool="framework_exec" data-reason="execution_disabled">', page)
    assert re.search(r'<tr data-tool="mcp__dead__\*" data-reason="source_unavailable">', page)
    assert '<tr data-tool="plugin__example__greet">' in page
    assert re.search(r'<tr data-tool="plugin__example__sign" data-reason="not_allowed">', page)
    # the governed tools under allowed_tools, the sandbox's and the plugin's among them
    assert re.search(r'name="allowed_tools" value="plugin__example__greet" checked', page)
    assert re.search(r'name="allowed_tools" value="plugin__example__sign"(?! checked)', page)
    assert re.search(r'name="allowed_tools" value="sandbox__read_file" checked', page)
    assert re.search(r'id="c-sandbox-on"[^>]*checked', page) and 'name="execution.sandbox"' in page
    assert 'class="warning bad"' not in page


def test_the_page_says_in_red_when_exec_runs_unconfined_and_saves_the_sandbox_fields(home):
    provider_and_model("x", "http://127.0.0.1:9/v1")
    fwj("agent", "create", "a1", "--model", "m-x", "--builtin-tool", "local_execution", "--execution")
    c = client(home)
    form = page_form(c, "/agents/a1/edit", execution__sandbox="none", sandbox="on", sandbox__network="on")
    assert c.post("/agents/a1/edit", data=form, follow_redirects=False).status_code == 303
    data = fwj("agent", "show", "a1")["data"]
    assert data["execution"] == {"enabled": True, "sandbox": "none", "network": False}
    assert data["sandbox"] == {"backend": "bubblewrap", "network": True}
    page = c.get("/agents/a1/edit").text
    assert 'class="warning bad" data-code="exec_unconfined"' in page and "runs commands on this machine" in page
    assert 'id="warn-execution-sandbox"' in page
    form = {k: v for k, v in page_form(c, "/agents/a1/edit", execution__sandbox="bubblewrap").items() if k not in ("sandbox", "sandbox.network")}
    assert c.post("/agents/a1/edit", data=form, follow_redirects=False).status_code == 303
    data = fwj("agent", "show", "a1")["data"]
    assert data["execution"]["sandbox"] == "bubblewrap" and "sandbox" not in data  # unticked, and back to the safe side


def test_saving_the_page_keeps_the_order_of_mcps(home):
    provider_and_model("x", "http://127.0.0.1:9/v1")
    for name in ("alpha", "beta", "gamma"):
        mcp(name, command="/nonexistent/mcp-server")
    fwj("agent", "create", "a1", "--model", "m-x", "--mcp", "gamma", "--mcp", "alpha")
    c = client(home)
    page = c.get("/agents/a1/edit").text
    assert page.index('value="gamma"') < page.index('value="alpha"') < page.index('value="beta"')  # shown in their order
    form = page_form(c, "/agents/a1/edit", mcps=["alpha", "beta", "gamma"], listed_sources=["mcp:alpha", "mcp:beta", "mcp:gamma"])
    assert c.post("/agents/a1/edit", data=form, follow_redirects=False).status_code == 303
    assert fwj("agent", "show", "a1")["data"]["mcps"] == ["gamma", "alpha", "beta"]
    before = snapshot(home)
    form["csrf_token"] = csrf(c, "/agents/a1/edit")
    assert c.post("/agents/a1/edit", data=form, follow_redirects=False).status_code == 303
    assert snapshot(home) == before  # the same order, ticked again: nothing is rewritten


def test_a_plugin_enabled_after_the_page_was_shown_has_its_tools_allowed_on_save(home, example_plugin):
    provider_and_model("x", "http://127.0.0.1:9/v1")
    fwj("agent", "create", "a1", "--model", "m-x")
    c = client(home)
    shown = page_form(c, "/agents/a1/edit")
    fwj("plugin", "enable", "example")
    assert c.post("/agents/a1/edit", data=shown, follow_redirects=False).status_code == 303
    allowed = fwj("agent", "show", "a1")["data"]["allowed_tools"]
    assert {"plugin__example__greet", "plugin__example__sign", "plugin__example__word_count"} <= set(allowed)
    form = page_form(c, "/agents/a1/edit", allowed_tools="plugin__example__greet")
    assert c.post("/agents/a1/edit", data=form, follow_redirects=False).status_code == 303
    assert fwj("agent", "show", "a1")["data"]["allowed_tools"] == ["plugin__example__greet"]


def test_the_home_page_warns_about_a_plugin_that_is_not_installed(home):
    (home / "plugins").mkdir()
    (home / "plugins/ghost.yaml").write_text("settings: {}\n")
    page = client(home).get("/").text
    assert "ghost" in page and "not installed" in page
