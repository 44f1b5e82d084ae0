import json
import shlex

import pytest
from conftest import CANARY, fw, fwj, snapshot


def resources(home_snapshot_kinds=("provider", "model", "prompt", "skill", "mcp", "harness", "agent")):
    return {f"{k}/{i['name']}" for k in home_snapshot_kinds for i in fwj("resource", "list", k)["items"]}


@pytest.fixture
def graph(home):
    """p1 <- m1 <- a1, a2 ; p1 <- m2 ; a1 uses skill s1, mcp x1, harness h1, prompt pr1."""
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "https://p.test", "api_key": CANARY}))
    fwj("resource", "write", "provider", "p2", "--create", "--data", '{"base_url": "https://q.test", "api_key_env": "Q"}')
    for m in ("m1", "m2"):
        fwj("resource", "write", "model", m, "--create", "--data", json.dumps({"provider": "p1", "model_id": m}))
    fwj("resource", "write", "skill", "s1", "--create", "--data", '{"description": "d", "body": "b"}')
    fwj("resource", "write", "mcp", "x1", "--create", "--data", '{"transport": "stdio", "command": "c", "env": {"TOKEN": "mcp-secret-123"}}')
    fwj("resource", "write", "harness", "h1", "--create", "--data", '{"type": "local"}')
    fwj("resource", "write", "prompt", "pr1", "--create", "--data", '{"body": "hi"}')
    fwj("agent", "create", "a1", "--model", "m1", "--skill", "s1", "--mcp", "x1", "--harness", "h1", "--prompt", "pr1")
    fwj("agent", "create", "a2", "--model", "m1")
    return home


def test_a_plan_changes_nothing(graph):
    before = snapshot(graph)
    doc = fwj("resource", "delete", "provider", "p1", "--recursive")
    assert doc["status"] == "plan"
    assert doc["plan"] == ["agent/a1", "agent/a2", "model/m1", "model/m2", "provider/p1"]
    assert doc["blocked"] == []
    human = fw("resource", "delete", "provider", "p1", "--recursive")
    assert human.exit_code == 0
    assert "5 resources will be deleted" in human.stdout
    assert "fw resource delete provider p1 --recursive --confirm agent/a1,agent/a2,model/m1,model/m2,provider/p1" in human.stdout
    assert snapshot(graph) == before


def test_the_exact_confirmation_deletes_exactly_the_plan(graph):
    before = resources()
    plan = fwj("resource", "delete", "provider", "p1", "--recursive")["plan"]
    doc = fwj("resource", "delete", "provider", "p1", "--recursive", "--confirm", ",".join(plan))
    assert doc == {"status": "deleted", "deleted": plan}
    assert resources() == before - set(plan)
    assert fwj("home", "check")["ok"] is True


def test_the_command_printed_by_the_plan_works(graph):
    human = fw("resource", "delete", "model", "m1", "--recursive")
    line = next(l.strip() for l in human.stdout.splitlines() if l.strip().startswith("fw resource delete"))
    args = shlex.split(line)[1:]
    doc = fwj(*args)
    assert doc["deleted"] == ["agent/a1", "agent/a2", "model/m1"]


P1_PLAN = ["agent/a1", "agent/a2", "model/m1", "model/m2", "provider/p1"]
NO_CHANGE = {"added": [], "gone": [], "reordered": False, "duplicated": []}


@pytest.mark.parametrize(
    "confirm,changes",
    [
        pytest.param("provider/p1,model/m2,model/m1,agent/a2,agent/a1", {**NO_CHANGE, "reordered": True}, id="reversed"),
        pytest.param("agent/a1,agent/a2,model/m1", {**NO_CHANGE, "added": ["model/m2", "provider/p1"]}, id="subset"),
        pytest.param("agent/a1,agent/a2,model/m1,model/m2,provider/p1,provider/p2", {**NO_CHANGE, "gone": ["provider/p2"]}, id="superset"),
        pytest.param("agent/a1,agent/a1,agent/a2,model/m1,model/m2,provider/p1", {**NO_CHANGE, "duplicated": ["agent/a1"]}, id="duplicated"),
        pytest.param("agent/a1,agent/a2,model/m1,model/m2,provider/p2", {**NO_CHANGE, "added": ["provider/p1"], "gone": ["provider/p2"]}, id="swapped"),
        pytest.param("", {**NO_CHANGE, "added": P1_PLAN}, id="empty"),
    ],
)
def test_anything_but_the_exact_plan_is_stale_and_changes_nothing(graph, confirm, changes):
    before = snapshot(graph)
    result = fw("resource", "delete", "provider", "p1", "--recursive", "--confirm", confirm, "--json")
    assert result.exit_code == 6, result
    error = result.json["error"]
    assert error["code"] == "stale_confirmation"
    assert error["plan"] == P1_PLAN
    assert error["blocked"] == []
    assert error["changes"] == changes
    assert f"--confirm {','.join(P1_PLAN)}" in error["hint"]
    assert snapshot(graph) == before


def test_the_plan_document_names_its_target_dependents_and_confirm_string(graph):
    doc = fwj("resource", "delete", "provider", "p1", "--recursive")
    assert doc == {
        "status": "plan",
        "target": "provider/p1",
        "recursive": True,
        "plan": P1_PLAN,
        "blocked": [],
        "dependents": {"provider/p1": ["model/m1", "model/m2"], "model/m1": ["agent/a1", "agent/a2"]},
        "confirm": "agent/a1,agent/a2,model/m1,model/m2,provider/p1",
    }
    # the human plan draws the same dependents as a tree
    human = fw("resource", "delete", "provider", "p1", "--recursive")
    lines = human.stdout.splitlines()
    start = lines.index("provider/p1")
    assert lines[start:start + 5] == ["provider/p1", "├── model/m1", "│   ├── agent/a1", "│   └── agent/a2", "└── model/m2"]
    # a plain plan lists no dependents of its own: they are not in it, they block it
    doc = fwj("resource", "delete", "model", "m1")
    assert doc["dependents"] == {} and doc["confirm"] == "model/m1" and doc["recursive"] is False
    # the confirm string is what the confirmation takes, as is
    before = resources()
    plan = fwj("resource", "delete", "provider", "p1", "--recursive")
    assert fwj("resource", "delete", "provider", "p1", "--recursive", "--confirm", plan["confirm"]) == {"status": "deleted", "deleted": P1_PLAN}
    assert resources() == before - set(P1_PLAN)


def test_a_dependent_added_after_the_plan_makes_it_stale(graph):
    plan = fwj("resource", "delete", "model", "m2", "--recursive")["plan"]
    assert plan == ["model/m2"]
    fwj("agent", "create", "late", "--model", "m2")
    before = snapshot(graph)
    doc = fwj("resource", "delete", "model", "m2", "--recursive", "--confirm", ",".join(plan), code=6)
    assert doc["error"]["changes"]["added"] == ["agent/late"]
    assert doc["error"]["plan"] == ["agent/late", "model/m2"]
    human = fw("resource", "delete", "model", "m2", "--recursive", "--confirm", ",".join(plan))
    assert human.exit_code == 6 and "agent/late,model/m2" in human.stderr
    assert snapshot(graph) == before


def test_a_plain_delete_of_a_used_model_is_blocked_and_its_confirmation_refused(graph):
    doc = fwj("resource", "delete", "model", "m1")
    assert doc["plan"] == ["model/m1"]
    assert doc["blocked"] == [{"item": "model/m1", "reason": "has_dependents", "detail": ["agent/a1", "agent/a2"]}]
    before = snapshot(graph)
    error = fwj("resource", "delete", "model", "m1", "--confirm", "model/m1", code=6)["error"]
    assert error["code"] == "protected"
    assert snapshot(graph) == before


def test_the_default_prompt_is_protected(graph):
    doc = fwj("resource", "delete", "prompt", "default")
    assert [b["reason"] for b in doc["blocked"]] == ["default_prompt"]
    before = snapshot(graph)
    assert fwj("resource", "delete", "prompt", "default", "--confirm", "prompt/default", code=6)["error"]["code"] == "protected"
    assert snapshot(graph) == before


def test_the_default_prompt_named_by_an_agent_says_it_is_never_deleted_not_to_plan_recursively(graph):
    fwj("agent", "create", "a3", "--model", "m1", "--prompt", "default")
    for recursive in ((), ("--recursive",)):
        doc = fwj("resource", "delete", "prompt", "default", *recursive)
        assert doc["blocked"][0]["reason"] == "default_prompt"
        human = fw("resource", "delete", "prompt", "default", *recursive)
        hint = human.stdout.split("Hint: ", 1)[1]
        assert "never deleted" in hint and "--recursive" not in hint
        assert "cannot be deleted" in human.stdout and "once unblocked" not in human.stdout and "until this is resolved" not in human.stdout
    before = snapshot(graph)
    error = fwj("resource", "delete", "prompt", "default", "--recursive", "--confirm", "agent/a3,prompt/default", code=6)["error"]
    assert error["code"] == "protected" and "never deleted" in error["hint"]
    assert snapshot(graph) == before


def test_a_corrupt_agent_file_blocks_deleting_a_model_it_might_use(graph):
    (graph / "agents/default/broken.yaml").write_text("model: m2\nskills: [oops\n")
    doc = fwj("resource", "delete", "model", "m2")
    assert {"item": "agent/broken", "reason": "corrupt"}.items() <= doc["blocked"][0].items()
    before = snapshot(graph)
    assert fwj("resource", "delete", "model", "m2", "--confirm", "model/m2", code=6)["error"]["code"] == "protected"
    assert snapshot(graph) == before
    # a corrupt agent cannot use a provider directly: a plain provider delete does not care
    doc = fwj("resource", "delete", "provider", "p2")
    assert doc["blocked"] == []
    # but a recursive one might reach it through a model
    assert [b["reason"] for b in fwj("resource", "delete", "provider", "p2", "--recursive")["blocked"]] == ["corrupt"]


def test_a_corrupt_target_is_blocked(graph):
    (graph / "harnesses/default/bad.yaml").write_text("type: [\n")
    doc = fwj("resource", "delete", "harness", "bad")
    assert doc["blocked"][0]["reason"] == "corrupt" and doc["blocked"][0]["item"] == "harness/bad"
    assert fwj("resource", "delete", "harness", "bad", "--confirm", "harness/bad", code=6)["error"]["code"] == "protected"
    assert (graph / "harnesses/default/bad.yaml").exists()


def test_a_managed_agent_is_blocked_until_unbound(graph):
    (graph / "principals/bot.yaml").write_text("kind: agent\n")
    (graph / "bindings/bot.yaml").write_text("agent: a2\nenabled: false\n")
    doc = fwj("resource", "delete", "agent", "a2")
    assert doc["blocked"] == [{"item": "agent/a2", "reason": "managed", "detail": ["binding/bot"]}]
    assert fwj("resource", "delete", "agent", "a2", "--confirm", "agent/a2", code=6)["error"]["code"] == "protected"
    (graph / "bindings/bot.yaml").unlink()
    assert fwj("resource", "delete", "agent", "a2", "--confirm", "agent/a2")["deleted"] == ["agent/a2"]


def test_the_provider_secret_and_mcp_secrets_go_with_them(graph):
    assert (graph / "secrets/provider/p1.json").exists()
    doc = fwj("resource", "delete", "provider", "p1", "--recursive", "--confirm", "agent/a1,agent/a2,model/m1,model/m2,provider/p1")
    assert doc["deleted"] == ["agent/a1", "agent/a2", "model/m1", "model/m2", "provider/p1"]
    assert not (graph / "secrets/provider/p1.json").exists()
    assert (graph / "secrets/mcp/x1.json").exists()
    fwj("resource", "delete", "mcp", "x1", "--confirm", "mcp/x1")
    assert not (graph / "secrets/mcp/x1.json").exists()
    assert not any(CANARY in p.read_text() for p in graph.rglob("*") if p.is_file())


def test_every_kind_can_be_deleted_and_the_home_stays_clean(graph):
    for kind, name in [("agent", "a1"), ("skill", "s1"), ("mcp", "x1"), ("harness", "h1"), ("prompt", "pr1")]:
        doc = fwj("resource", "delete", kind, name)
        assert doc["blocked"] == [], doc
        before = resources()
        assert fwj("resource", "delete", kind, name, "--confirm", f"{kind}/{name}") == {"status": "deleted", "deleted": [f"{kind}/{name}"]}
        assert resources() == before - {f"{kind}/{name}"}
        assert fwj("resource", "read", kind, name, code=3)["error"]["code"] == "not_found"
        assert fwj("home", "check")["ok"] is True
    assert not (graph / "skills/default/s1").exists()


def test_confirming_again_after_success_is_not_found(graph):
    fwj("resource", "delete", "model", "m2", "--confirm", "model/m2")
    doc = fwj("resource", "delete", "model", "m2", "--confirm", "model/m2", code=3)
    assert doc["error"]["code"] == "not_found"


def test_bad_input_to_delete(graph):
    before = snapshot(graph)
    assert fwj("resource", "delete", "model", "../m1", code=4)["error"]["code"] == "invalid"
    assert fwj("resource", "delete", "model", "ghost", code=3)["error"]["code"] == "not_found"
    result = fw("resource", "delete", "gizmo", "m1", "--json")
    assert result.exit_code == 4 and result.json["error"]["code"] == "invalid"
    assert snapshot(graph) == before


def test_a_corrupt_binding_blocks_deleting_agents_once(graph):
    (graph / "bindings/bot.yaml").write_text("agent: [\n")
    doc = fwj("resource", "delete", "model", "m1", "--recursive")
    assert [(b["item"], b["reason"]) for b in doc["blocked"]] == [("binding/bot", "corrupt")]
    assert fwj("resource", "delete", "harness", "h1", "--recursive", "--confirm", "agent/a1,harness/h1", code=6)["error"]["code"] == "protected"
    assert fwj("resource", "delete", "provider", "p2")["blocked"] == []
