
import pytest
from conftest import SAMPLE_HOME, fw, fwj, snapshot


def test_init_creates_every_kind_and_the_default_prompt(home):
    for folder in ("providers", "models", "prompts", "skills", "mcps", "harnesses", "agents"):
        assert (home / folder / "default").is_dir()
    assert (home / "prompts/default/default.md").read_text().startswith("---\n")
    assert oct((home / "secrets").stat().st_mode & 0o777) == "0o700"
    assert fwj("home", "check")["ok"] is True


def test_init_again_overwrites_nothing(home):
    prompt = home / "prompts/default/default.md"
    prompt.write_text("---\ndescription: mine\n---\nmy own text\n")
    doc = fwj("home", "init", str(home))
    assert doc["initialized"] is False and doc["created"] == []
    assert prompt.read_text() == "---\ndescription: mine\n---\nmy own text\n"


def test_init_refuses_a_folder_with_other_files(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("x")
    doc = fwj("home", "init", str(tmp_path / "docs"), code=6)
    assert doc["error"]["code"] == "exists"
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["notes.txt"]


def test_missing_home_names_home_init(tmp_path):
    result = fw("--home", str(tmp_path / "nowhere"), "resource", "list", "agent")
    assert result.exit_code == 3
    assert result.stdout == "" and result.stderr.startswith("Error: the framework home")
    assert "fw home init" in result.stderr
    assert not (tmp_path / "nowhere").exists()
    doc = fwj("--home", str(tmp_path / "nowhere"), "agent", "list", code=3)
    assert doc["error"]["code"] == "not_found" and "fw home init" in doc["error"]["hint"]


def test_fw_home_env_and_option(tmp_path, monkeypatch):
    other = tmp_path / "other"
    fwj("home", "init", str(other))
    fwj("--home", str(other), "resource", "write", "harness", "h1", "--create", "--data", '{"type": "local"}')
    monkeypatch.setenv("FW_HOME", str(other))
    assert [i["name"] for i in fwj("resource", "list", "harness")["items"]] == ["h1"]


def test_check_names_a_corrupt_file_with_its_line_and_a_dangling_reference(home):
    fwj("resource", "write", "provider", "p1", "--create", "--data", '{"base_url": "https://x.test", "api_key_env": "K"}')
    fwj("resource", "write", "model", "m1", "--create", "--data", '{"provider": "p1", "model_id": "m"}')
    (home / "agents/default/broken.yaml").write_text("model: m1\nskills: [unclosed\n")
    (home / "agents/default/orphan.yaml").write_text("model: ghost\n")
    (home / "models/default/m2.yaml").write_text("provider: p1\nmodel_id: m\ncolour: red\n")
    result = fw("home", "check", "--json")
    assert result.exit_code == 4
    doc = result.json
    assert doc["ok"] is False
    by_path = {p.get("path"): p for p in doc["problems"]}
    broken = by_path["agents/default/broken.yaml"]
    assert broken["code"] == "corrupt" and broken["line"] == 2 and "not closed" in broken["message"]  # where the [ is, not the end
    assert by_path["models/default/m2.yaml"]["field"] == "colour"
    dangling = by_path["agents/default/orphan.yaml"]
    assert dangling["code"] == "dangling" and dangling["reference"] == "model/ghost"
    human = fw("home", "check")
    assert human.exit_code == 4
    assert "agents/default/broken.yaml" in human.stdout and "ghost" in human.stdout


def test_check_reports_corrupt_principal_and_binding_files(home):
    (home / "principals/bob.yaml").write_text("kind: robot\n")
    (home / "bindings/bob.yaml").write_text("agent: nobody\n")
    doc = fwj("home", "check", code=4)
    codes = sorted((p["code"], p.get("path")) for p in doc["problems"])
    assert ("corrupt", "principals/bob.yaml") in codes
    assert ("dangling", "bindings/bob.yaml") in codes


def test_sample_home_is_clean_and_explorable(sample):
    assert fwj("home", "check")["ok"] is True
    agents = {i["name"]: i for i in fwj("agent", "list")["items"]}
    assert set(agents) == {"ops", "helper", "researcher"}
    assert agents["ops"]["builtin_tools"] == ["resource_management"]
    assert agents["researcher"]["category"] == "research"
    assert fwj("resource", "read", "agent", "helper")["data"]["builtin_tools"] == []
    provider = fwj("resource", "read", "provider", "openai")["data"]
    assert provider["api_key_env"] == "OPENAI_API_KEY" and provider["api_key_set"] is False
    assert "#" in (SAMPLE_HOME / "agents/default/ops.yaml").read_text()


def test_check_does_not_modify_the_home(sample):
    before = snapshot(sample)
    fwj("home", "check")
    assert snapshot(sample) == before


def test_files_that_are_not_text_are_corrupt_never_a_crash(home):
    (home / "agents/default/bin.yaml").write_bytes(b"\xff\xfe\x00model: x\n")
    (home / "principals/bin.yaml").write_bytes(b"\xff\xfe")
    before = snapshot(home)
    # the check reports both files as corrupt, and so exits 4
    doc = fwj("home", "check", code=4)
    assert sorted((p["code"], p["path"]) for p in doc["problems"]) == [("corrupt", "agents/default/bin.yaml"), ("corrupt", "principals/bin.yaml")]
    # a listing succeeds and marks the file corrupt
    items = fwj("agent", "list")["items"]
    assert [(i["name"], i["error"]["code"], i["error"]["path"]) for i in items] == [("bin", "corrupt", "agents/default/bin.yaml")]
    principals = fwj("principal", "list")["principals"]
    assert [(p["name"], p["error"]["code"], p["error"]["path"]) for p in principals] == [("bin", "corrupt", "principals/bin.yaml")]
    # reading or editing it is refused as corrupt, naming the file
    for args in (["resource", "read", "agent", "bin"], ["agent", "edit", "bin", "--description", "x"]):
        error = fwj(*args, code=4)["error"]
        assert error["code"] == "corrupt" and error["path"] == "agents/default/bin.yaml", error
    assert snapshot(home) == before


def test_check_finds_a_name_used_in_two_categories(home):
    fwj("category", "create", "harness", "extra")
    fwj("resource", "write", "harness", "h1", "--create", "--data", '{"type": "local"}')
    (home / "harnesses/extra/h1.yaml").write_text("type: local\n")
    doc = fwj("home", "check", code=4)
    assert doc["ok"] is False
    assert [(p["code"], p["path"]) for p in doc["problems"]] == [("duplicate", "harnesses/extra/h1.yaml")]
    assert "harnesses/default/h1.yaml" in doc["problems"][0]["message"]
    human = fw("home", "check")
    assert human.exit_code == 4 and "duplicate" in human.stdout and "harnesses/default/h1.yaml" in human.stdout
    # reading the name is a conflict until one copy is gone
    assert fwj("resource", "read", "harness", "h1", code=6)["error"]["code"] == "conflict"
    (home / "harnesses/extra/h1.yaml").unlink()
    assert fwj("home", "check")["ok"] is True


def test_check_finds_the_default_prompt_missing(home):
    (home / "prompts/default/default.md").unlink()
    doc = fwj("home", "check", code=4)
    assert doc["ok"] is False
    assert [(p["code"], p["path"]) for p in doc["problems"]] == [("missing", "prompts/default/default.md")]
    assert "fw home init" in doc["problems"][0]["hint"]
    human = fw("home", "check")
    assert human.exit_code == 4 and "default prompt is missing" in human.stdout
    # home init restores it, and the home is clean again
    assert fwj("home", "init", str(home))["created"] == ["prompts/default/default.md"]
    assert fwj("home", "check")["ok"] is True


def test_a_record_lock_of_a_home_that_is_gone_fails_and_makes_nothing(tmp_path):
    """A run that ends after its home was removed is told so; the home is not made again."""
    from framework_cli.errors import FwError
    from framework_cli.home.store import Home

    gone = tmp_path / "gone"
    with pytest.raises(FwError) as caught:
        with Home(gone).record_locked("runs/run-20261203T000000-00000000.json"):
            pass
    assert caught.value.code == "corrupt" and ".locks/" in caught.value.message
    assert not gone.exists()


@pytest.mark.parametrize("folder", ["principals", "bindings"])
def test_a_file_in_place_of_the_principals_or_bindings_folder_is_a_problem_not_a_crash(home, folder):
    import shutil

    shutil.rmtree(home / folder)
    (home / folder).write_text("oops\n")
    doc = fwj("home", "check", code=4)
    assert [(p["code"], p["path"]) for p in doc["problems"]] == [("corrupt", folder)] and "fw home init" in doc["problems"][0]["hint"]
    assert fwj("home")["problems"] == 1 and "Traceback" not in fw("home").output
    (home / folder).unlink()
    fwj("home", "init", str(home))  # makes the folder again, as the hint says
    assert fwj("home", "check")["ok"] is True
