"""Issue 21, item 20: a deleted principal lingers nowhere. The delete is refused (`in_use`,
naming each) while the principal is a session member, has memory or has a bot; --recursive
plans taking them too and --confirm carries the plan out; created again, it inherits nothing."""

from __future__ import annotations

import json

from conftest import CANARY, fw, fwj, snapshot


def setup(home):
    """bob (an agent) with memory, a session s2 with alice, and a bot handing bob its events."""
    fwj("resource", "write", "provider", "p1", "--create", "--data", json.dumps({"base_url": "http://127.0.0.1:9/v1", "api_key": CANARY}))
    fwj("resource", "write", "model", "m1", "--create", "--data",
        json.dumps({"provider": "p1", "model_id": "m", "capabilities": {"tool_call": True}}))
    fwj("agent", "create", "a1", "--model", "m1")
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("principal", "create", "bob", "--kind", "agent")
    fwj("binding", "set", "bob", "--agent", "a1")
    run = fwj("run", "start", "--principal", "bob")["run_id"]
    fw("tool", "call", "--run", run, "framework_memory_write", "--args", '{"key": "k", "value": "remembered"}')
    fwj("run", "end", run)
    fwj("session", "create", "s2", "--member", "alice,bob")
    fwj("bot", "add", "desk", "--adapter", "local", "--principal", "bob")
    fwj("binding", "remove", "bob")


def test_a_principal_in_use_is_not_deleted_and_the_error_names_each_use(home):
    setup(home)
    before = snapshot(home)
    error = fwj("principal", "delete", "bob", code=6)["error"]
    assert error["code"] == "in_use" and error["items"] == ["session/s2", "memory/bob", "bot/desk"]
    assert "--recursive" in error["hint"]
    assert snapshot(home) == before
    assert fwj("message", "post", "s2", "--as", "bob", "still here")["message"]["author"] == "bob"


def test_recursive_plans_first_then_deletes_exactly_the_plan(home):
    setup(home)
    before = snapshot(home)
    plan = fwj("principal", "delete", "bob", "--recursive")
    assert plan["status"] == "plan" and plan["plan"] == ["session/s2", "memory/bob", "bot/desk", "principal/bob"]
    assert snapshot(home) == before
    stale = fwj("principal", "delete", "bob", "--recursive", "--confirm", "principal/bob", code=6)["error"]
    assert stale["code"] == "stale_confirmation" and stale["plan"] == plan["plan"] and stale["reason"] == "plan_changed"
    assert stale["changes"]["added"] == plan["plan"][:-1] and plan["confirm"] in stale["hint"]
    typo = fwj("principal", "delete", "bob", "--recursive", "--confirm", plan["confirm"].replace("session/", "sesion/"), code=6)["error"]
    assert typo["reason"] == "not_a_plan" and "did you mean session/s2?" in typo["message"], typo
    assert snapshot(home) == before
    done = fwj("principal", "delete", "bob", "--recursive", "--confirm", plan["confirm"])
    assert done == {"status": "deleted", "deleted": plan["plan"]}
    assert fwj("session", "show", "s2")["session"]["members"] == ["alice"]
    assert fwj("bot", "list")["bots"] == []
    r = fw("message", "post", "s2", "--as", "bob", "ghost", "--json")
    assert r.exit_code in (3, 5) and r.json["error"]["code"] in ("not_found", "denied"), r


def test_a_principal_created_again_inherits_nothing(home):
    setup(home)
    plan = fwj("principal", "delete", "bob", "--recursive")["confirm"]
    fwj("principal", "delete", "bob", "--recursive", "--confirm", plan)
    fwj("principal", "create", "bob", "--kind", "agent")
    assert fwj("memory", "list", "bob")["keys"] == []
    assert fwj("session", "show", "s2")["session"]["members"] == ["alice"]
    assert fwj("message", "post", "s2", "--as", "bob", "hi", code=5)["error"]["code"] == "denied"
    assert fwj("bot", "list")["bots"] == []


def test_a_principal_that_holds_nothing_is_deleted_at_once(home):
    fwj("principal", "create", "carol", "--kind", "user")
    assert fwj("principal", "delete", "carol") == {"principal": "carol", "deleted": True}


def test_a_binding_still_blocks_first(home):
    setup(home)
    fwj("binding", "set", "bob", "--agent", "a1")
    error = fwj("principal", "delete", "bob", "--recursive", code=6)["error"]
    assert error["code"] == "in_use" and error["items"] == ["binding/bob"]


def test_a_delete_says_what_it_did_in_human_mode_too(home):
    fwj("principal", "create", "carol", "--kind", "user")
    done = fw("principal", "delete", "carol")
    assert done.exit_code == 0 and done.stdout.strip() == "Deleted principal carol.", done
    setup(home)
    plan = fwj("principal", "delete", "bob", "--recursive")["confirm"]
    shown = fw("principal", "delete", "bob", "--recursive").stdout
    assert "Plan, in this order: leave session s2; forget its memory; remove bot desk; delete principal bob." in shown
    assert f"fw principal delete bob --recursive --confirm {plan}" in shown
    done = fw("principal", "delete", "bob", "--recursive", "--confirm", plan)
    assert done.exit_code == 0, done
    assert done.stdout.strip() == "Deleted principal bob: left session s2; its memory forgotten; bot desk removed."


def test_the_runs_of_a_deleted_principal_end_with_it_and_a_new_one_inherits_none(home):
    """A run started before its binding was removed acts as its principal until its lease
    ends; deleting the principal ends it, so it never acts as a principal created again
    under the same name."""
    from conftest import make_basics

    make_basics(with_key=False)
    fwj("resource", "write", "agent", "a1", "--data", json.dumps({"builtin_tools": ["resource_management"]}))
    fwj("principal", "create", "ops", "--kind", "agent")
    fwj("binding", "set", "ops", "--agent", "a1")
    run = fwj("run", "start", "--principal", "ops")["run_id"]
    explicit = fwj("run", "start", "--agent", "a1")["run_id"]
    fwj("binding", "remove", "ops")
    assert fwj("tool", "call", "--run", run, "framework_resource_list", "--args", '{"kind": "agent"}')["items"]
    done = fw("principal", "delete", "ops")
    assert done.exit_code == 0 and f"Ended its runs still active: {run}." in done.stdout, done
    assert fwj("run", "show", run)["status"] == "ended" and fwj("run", "show", explicit)["status"] == "active"
    fwj("principal", "create", "ops", "--kind", "agent")
    refused = fwj("tool", "call", "--run", run, "framework_resource_list", "--args", '{"kind": "agent"}', code=5)
    assert refused["error"]["code"] == "run_ended"
    fwj("principal", "create", "ops2", "--kind", "agent")
    assert fwj("principal", "delete", "ops2") == {"principal": "ops2", "deleted": True}  # none to end: the same document


def test_a_binding_removed_while_a_run_starts_leaves_no_active_run(home, monkeypatch):
    """A run's record is written without the home's lock, so the binding is looked at again
    once it is written: removed in between (here, as the record is being written), the run
    is ended and the start refused, and no run acts for a principal that may be deleted."""
    from conftest import make_basics

    import framework_cli.domain.runs as runs

    make_basics(with_key=False)
    fwj("principal", "create", "ops", "--kind", "agent")
    fwj("binding", "set", "ops", "--agent", "a1")
    written = runs.record_text

    def meanwhile(record):
        (home / "bindings" / "ops.yaml").unlink(missing_ok=True)  # `fw binding remove ops` from another process
        return written(record)

    monkeypatch.setattr(runs, "record_text", meanwhile)
    refused = fwj("run", "start", "--principal", "ops", code=3)
    assert refused["error"]["code"] == "not_found", refused
    monkeypatch.setattr(runs, "record_text", written)
    assert [r["status"] for r in fwj("run", "list")["runs"]] == ["ended"]


def test_a_confirmation_that_is_not_the_plan_deletes_nothing_even_when_nothing_is_held(home):
    fwj("principal", "create", "alice", "--kind", "user")
    before = snapshot(home)
    r = fw("principal", "delete", "alice", "--recursive", "--confirm", "session/zzz,principal/alice", "--json")
    assert r.exit_code != 0 and json.loads(r.stdout)["error"]["code"] == "stale_confirmation"
    assert snapshot(home) == before
    assert fwj("principal", "delete", "alice", "--recursive", "--confirm", "principal/alice")  # the plan, exactly
    assert fwj("principal", "list")["principals"] == []
