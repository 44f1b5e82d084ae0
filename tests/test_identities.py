
from conftest import fw, fwj, make_basics, snapshot


def test_principals_are_created_listed_and_unique(home):
    assert fwj("principal", "list") == {"principals": []}
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("principal", "create", "bot", "--kind", "agent")
    assert fwj("principal", "list")["principals"] == [{"name": "alice", "kind": "user"}, {"name": "bot", "kind": "agent"}]
    assert (home / "principals/bot.yaml").read_text() == "kind: agent\n"
    assert fwj("principal", "create", "bot", "--kind", "agent", code=6)["error"]["code"] == "exists"
    assert fwj("principal", "create", "eve", "--kind", "robot", code=4)["error"]["code"] == "invalid"
    assert fwj("principal", "create", "../x", "--kind", "agent", code=4)["error"]["code"] == "invalid"


def test_binding_defaults(home):
    make_basics(with_key=False)
    fwj("principal", "create", "bot", "--kind", "agent")
    doc = fwj("binding", "set", "bot", "--agent", "a1")
    assert doc["enabled"] is True
    noted = {k: doc["binding"].pop(k) for k in ("enabled_by", "enabled_at")}
    assert doc["binding"] == {"principal": "bot", "agent": "a1", "enabled": True, "directory": str(home), "max_rounds": None, "policy": "mentioned", "max_queue": 100}
    assert noted["enabled_by"].endswith(" (fw)") and noted["enabled_at"]
    doc["binding"].update(noted)
    assert doc["next_step"]["command"] == "fw run start --principal bot"
    assert fwj("binding", "list")["bindings"] == [doc["binding"]]


def test_an_update_of_a_disabled_binding_keeps_it_disabled(home):
    make_basics(with_key=False)
    fwj("agent", "create", "a2", "--model", "m1")
    fwj("principal", "create", "bot", "--kind", "agent")
    fwj("binding", "set", "bot", "--agent", "a1", "--max-rounds", "5", "--policy", "all")
    assert fwj("binding", "disable", "bot")["enabled"] is False
    doc = fwj("binding", "set", "bot", "--agent", "a2")
    assert doc["enabled"] is False and doc["binding"]["agent"] == "a2"
    assert doc["binding"]["max_rounds"] == 5 and doc["binding"]["policy"] == "all"
    assert doc["next_step"]["tool"] == "agent_set_enabled"
    assert fwj("binding", "enable", "bot")["enabled"] is True


def test_binding_refusals_change_nothing(home):
    make_basics(with_key=False)
    fwj("principal", "create", "alice", "--kind", "user")
    fwj("principal", "create", "bot", "--kind", "agent")
    before = snapshot(home)
    assert fwj("binding", "set", "ghost", "--agent", "a1", code=3)["error"]["code"] == "not_found"
    assert fwj("binding", "set", "bot", "--agent", "ghost", code=4)["error"]["code"] == "invalid"
    assert fwj("binding", "set", "alice", "--agent", "a1", code=4)["error"]["code"] == "invalid"
    assert fwj("binding", "set", "bot", "--agent", "a1", "--policy", "sometimes", code=4)["error"]["code"] == "invalid"
    result = fw("binding", "set", "bot", "--agent", "a1", "--max-rounds", "0", "--json")
    assert result.exit_code == 4 and result.json["error"]["code"] == "invalid" and "max_rounds" in result.json["error"]["message"]
    assert fwj("binding", "enable", "bot", code=3)["error"]["code"] == "not_found"
    assert fwj("binding", "remove", "bot", code=3)["error"]["code"] == "not_found"
    assert snapshot(home) == before


def test_a_bound_agent_cannot_be_deleted_until_unbound(home):
    make_basics(with_key=False)
    fwj("principal", "create", "bot", "--kind", "agent")
    fwj("binding", "set", "bot", "--agent", "a1")
    plan = fwj("resource", "delete", "agent", "a1")
    assert plan["blocked"] == [{"item": "agent/a1", "reason": "managed", "detail": ["binding/bot"]}]
    assert fwj("resource", "delete", "agent", "a1", "--confirm", "agent/a1", code=6)["error"]["code"] == "protected"
    assert fwj("binding", "remove", "bot") == {"principal": "bot", "unbound": True}
    assert fwj("resource", "delete", "agent", "a1", "--confirm", "agent/a1")["deleted"] == ["agent/a1"]
    assert fwj("home", "check")["ok"] is True


def test_activation_reports_real_bindings(home):
    make_basics(with_key=False)
    assert fwj("agent", "show", "a1")["activation"]["enabled"] is False
    fwj("principal", "create", "bot", "--kind", "agent")
    fwj("binding", "set", "bot", "--agent", "a1")
    activation = fwj("resource", "write", "agent", "a1", "--data", '{"description": "x"}')["activation"]
    assert activation["enabled"] is True and activation["next_steps"] == []
    assert [b["principal"] for b in activation["bindings"]] == ["bot"]
    fwj("binding", "disable", "bot")
    activation = fwj("agent", "show", "a1")["activation"]
    assert activation["enabled"] is False and activation["next_steps"][0]["tool"] == "agent_set_enabled"


def test_an_unbound_agents_next_steps_are_commands_that_work(home):
    make_basics(with_key=False)

    def steps():
        return [s["command"] for s in fwj("agent", "show", "a1")["activation"]["next_steps"]]

    assert steps() == ["fw principal create a1 --kind agent", "fw binding set a1 --agent a1"]
    fwj("principal", "create", "a1", "--kind", "agent")  # its principal exists, unbound: only the binding is left
    assert steps() == ["fw binding set a1 --agent a1"]
    fwj("binding", "set", "a1", "--agent", "a1")
    fwj("binding", "remove", "a1")
    assert steps() == ["fw binding set a1 --agent a1"]
    fwj("principal", "delete", "a1", "--confirm", "principal/a1")
    fwj("principal", "create", "a1", "--kind", "user")  # a user of that name: a free name beside it
    assert steps() == ["fw principal create a1-agent --kind agent", "fw binding set a1-agent --agent a1"]
    for command in steps():  # each runs as shown
        assert fw(*command.split()[1:]).exit_code == 0
    assert fwj("agent", "show", "a1")["activation"]["enabled"] is True
    long = "l" * 63  # the longest name: the one beside it is cut to fit
    fwj("agent", "create", long, "--model", "m1")
    fwj("principal", "create", long, "--kind", "user")
    (home / "bindings" / f"{long[:54]}-agent.yaml").write_text("agent: a1\n")  # a binding left without its principal
    commands = [s["command"] for s in fwj("agent", "show", long)["activation"]["next_steps"]]
    assert commands == [f"fw principal create {long[:54]}-agent-2 --kind agent", f"fw binding set {long[:54]}-agent-2 --agent {long}"]
    for command in commands:
        assert fw(*command.split()[1:]).exit_code == 0


def test_an_agent_with_no_model_is_told_to_get_one_and_its_tools_say_why_none_is_offered(home):
    make_basics(with_key=False)  # one model, m1
    fwj("agent", "create", "x")
    steps = [s["command"] for s in fwj("agent", "show", "x")["activation"]["next_steps"]]
    assert steps == ["fw agent edit x --model m1", "fw principal create x --kind agent", "fw binding set x --agent x"]
    details = {t["detail"] for t in fwj("agent", "tools", "x")["tools"] if not t["allowed"] or not t["available"]}
    assert details and all("no model" in d for d in details)
    assert fw("agent", "edit", "x", "--model", "m1").exit_code == 0
    assert [s["command"] for s in fwj("agent", "show", "x")["activation"]["next_steps"]][0].startswith("fw principal create")


def test_binding_edits_keep_a_hand_written_file(sample):
    path = sample / "bindings/ops.yaml"
    original = path.read_text()
    fwj("binding", "disable", "ops")
    text = path.read_text()
    assert text.startswith(original.replace("enabled: true", "enabled: false"))  # the file as it was, and who turned it off
    assert "\nenabled_by: " in text[len(original):] and "\nenabled_at: " in text[len(original):]
    fwj("binding", "set", "ops", "--agent", "ops", "--max-rounds", "3")
    assert path.read_text().startswith("# Makes principal")
    mtime = path.stat().st_mtime_ns
    fwj("binding", "set", "ops", "--agent", "ops")
    assert path.stat().st_mtime_ns == mtime  # nothing changed, nothing written
    assert fwj("binding", "list")["bindings"][0]["max_rounds"] == 3


def test_a_corrupt_binding_is_never_overwritten(home):
    make_basics(with_key=False)
    fwj("principal", "create", "bot", "--kind", "agent")
    (home / "bindings/bot.yaml").write_text("agent: a1\nenabled: maybe-not\n")
    before = snapshot(home)
    for args in (["binding", "set", "bot", "--agent", "a1"], ["binding", "enable", "bot"], ["run", "start", "--principal", "bot"]):
        assert fwj(*args, code=4)["error"]["code"] == "corrupt"
    assert snapshot(home) == before


def test_a_binding_notes_who_turned_it_on_or_off_and_when(home):
    import getpass

    make_basics()
    fwj("principal", "create", "p1", "--kind", "agent")
    me = f"{getpass.getuser()} (fw)"
    made = fwj("binding", "set", "p1", "--agent", "a1")["binding"]
    assert made["enabled_by"] == me and made["enabled_at"].endswith("Z")
    again = fwj("binding", "set", "p1", "--agent", "a1", "--max-rounds", "3")["binding"]
    assert (again["enabled_by"], again["enabled_at"]) == (me, made["enabled_at"])  # an update leaves them
    off = fwj("binding", "disable", "p1")["binding"]
    assert off["enabled"] is False and off["enabled_by"] == me and off["enabled_at"] >= made["enabled_at"]
    fwj("tool", "call", "--manager", "agent_set_enabled", "--args", '{"principal": "p1", "enabled": true}')
    listed = fwj("binding", "list")["bindings"][0]
    assert (listed["enabled"], listed["enabled_by"]) == (True, "manager (tool)")
    unchanged = fwj("tool", "call", "--manager", "agent_set_enabled", "--args", '{"principal": "p1", "enabled": true}')
    assert unchanged["binding"]["enabled_at"] == listed["enabled_at"]  # already on: nothing noted
    assert "enabled_by: manager (tool)" in (home / "bindings/p1.yaml").read_text()


def test_a_principal_or_binding_file_that_is_a_looping_link_counts_as_absent(home):
    """As `exists` has always taken it: a link to itself is not a principal, and its name can
    be bound to nothing; nothing is written."""
    (home / "principals" / "loop.yaml").symlink_to("loop.yaml")
    (home / "bindings" / "loop.yaml").symlink_to("loop.yaml")
    before = sorted(str(p.relative_to(home)) for p in home.rglob("*") if ".index" not in p.parts)
    r = fw("binding", "enable", "loop", "--json")
    assert r.exit_code == 3 and r.json["error"]["code"] == "not_found", r
    r = fw("binding", "set", "loop", "--agent", "a1", "--json")
    assert r.exit_code == 3 and r.json["error"]["code"] == "not_found" and "Traceback" not in r.output, r
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*") if ".index" not in p.parts) == before
    assert (home / "bindings" / "loop.yaml").is_symlink()


def test_writes_under_secrets_make_every_new_folder_only_its_owner_may_open(home):
    from framework_cli.home.store import Home

    h = Home(home)
    with h.locked():
        h.write_text("secrets/plugin/deep/one.json", "{}", secret=True)
    for folder in ("secrets", "secrets/plugin", "secrets/plugin/deep"):
        assert (home / folder).stat().st_mode & 0o777 == 0o700, folder
    assert (home / "secrets/plugin/deep/one.json").stat().st_mode & 0o777 == 0o600
