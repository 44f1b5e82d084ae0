"""Issue 21, item 15: `fw resource edit KIND REF` opens the file in $EDITOR, validates on save,
reopens with the error at the top, writes nothing until the text is valid, and cancels on an
unchanged or emptied file. The editor here is a small script that plays the user."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from conftest import CANARY, fw, fwj, make_basics, snapshot

# The "user": each time the editor opens, it logs what it was shown, then applies the next
# of the steps given in FW_TEST_STEPS (a JSON list of [old, new] replacements, or "empty").
EDITOR = textwrap.dedent("""
    import json, os, sys
    path = sys.argv[1]
    state = os.environ["FW_TEST_STATE"]
    seen = json.load(open(state)) if os.path.exists(state) else []
    text = open(path, encoding="utf-8").read()
    seen.append(text)
    json.dump(seen, open(state, "w"))
    step = json.loads(os.environ["FW_TEST_STEPS"])[len(seen) - 1]
    if isinstance(step, dict):  # another writer changes the file while the editor is open
        import subprocess
        subprocess.run([sys.executable, "-m", "framework_cli", *step["meanwhile"]], check=True, capture_output=True)
        step = step["then"]
    if step == "empty":
        text = ""
    elif step != "keep":
        text = text.replace(step[0], step[1])
    open(path, "w", encoding="utf-8").write(text)
""")


@pytest.fixture
def editor(tmp_path, monkeypatch):
    script = tmp_path / "editor.py"
    script.write_text(EDITOR)
    state = tmp_path / "seen.json"
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("FW_TEST_STATE", str(state))

    def run(*steps, args=("agent", "a1")):
        monkeypatch.setenv("FW_TEST_STEPS", json.dumps(list(steps)))
        if state.exists():
            state.unlink()
        result = fw("resource", "edit", *args)
        return result, json.loads(state.read_text()) if state.exists() else []

    return run


def test_an_edit_is_validated_and_saved_with_its_comment(home, editor):
    make_basics()
    result, seen = editor(["model: m1", "model: m1  # the small one\ndescription: tidy"])
    assert result.exit_code == 0 and "Saved agent a1" in result.stdout, result
    assert seen == ["model: m1\n"]
    text = (home / "agents/default/a1.yaml").read_text()
    assert "# the small one" in text and "description: tidy" in text


def test_a_refused_edit_reopens_with_the_error_on_top_and_writes_nothing_until_valid(home, editor, tmp_path):
    make_basics()
    before = (home / "agents/default/a1.yaml").read_bytes()
    result, seen = editor(["model: m1", "model: nope"], ["model: nope", "model: m1\ndescription: fixed"])
    assert result.exit_code == 0, result
    assert len(seen) == 2
    assert seen[1].startswith("# fw: the edit was not saved: ") and "nope" in seen[1].splitlines()[0]
    assert "model: nope" in seen[1]  # what the user typed is kept
    text = (home / "agents/default/a1.yaml").read_text()
    assert "description: fixed" in text and "# fw:" not in text
    assert before != text.encode()


def test_an_edit_repairs_a_file_broken_by_hand_and_a_patch_of_it_is_still_refused(home, editor):
    make_basics()
    path = home / "agents/default/a1.yaml"
    path.write_text("model: [m1\n")
    problem = fwj("home", "check", code=4)["problems"][0]
    assert problem["code"] == "corrupt" and "fw resource edit agent a1" in problem["hint"]
    before = snapshot(home)
    error = fwj("resource", "write", "agent", "a1", "--data", '{"description": "x"}', code=4)["error"]
    assert error["code"] == "corrupt" and "fw resource edit agent a1" in error["hint"]  # a patch needs the fields it patches
    assert snapshot(home) == before
    result, seen = editor(["model: [m1", "model: m1\ndescription: fixed"])
    assert result.exit_code == 0 and "Saved agent a1" in result.stdout, result
    assert seen == ["model: [m1\n"] and path.read_text() == "model: m1\ndescription: fixed\n"
    assert fwj("home", "check")["ok"] is True


def test_a_key_typed_in_the_editor_replaces_the_stored_one_and_a_key_in_a_comment_is_refused(home, editor):
    make_basics()  # provider p1, its key the canary, stored under secrets/
    path = home / "providers/default/p1.yaml"
    fresh = "sk-fresh-0123456789abcdef"
    result, seen = editor(["base_url:", f"api_key: {fresh}\nbase_url:"], args=("provider", "p1"))
    assert result.exit_code == 0 and "Saved provider p1" in result.stdout, result  # the key changed: saved, not unchanged
    assert fresh not in path.read_text() and json.loads((home / "secrets/provider/p1.json").read_text())["api_key"] == fresh
    # a stored key pasted into a comment would be written outside secrets/: refused, then fixed
    result, seen = editor(["base_url:", f"# the old one: {fresh}\nbase_url:"], [f"# the old one: {fresh}\n", ""],
                          args=("provider", "p1"))
    assert result.exit_code == 0 and len(seen) == 2 and "holds a secret value" in seen[1].splitlines()[0], result
    assert fresh not in path.read_text() and fresh not in seen[1].splitlines()[0]
    path.write_text("base_url: [broken\n")  # broken by hand: a repair that brings a new key keeps it
    result, seen = editor(["base_url: [broken", f"base_url: https://llm.example.test/v1\napi_key: {CANARY}"], args=("provider", "p1"))
    assert result.exit_code == 0 and CANARY not in path.read_text(), result
    assert json.loads((home / "secrets/provider/p1.json").read_text())["api_key"] == CANARY


def test_a_refused_edit_saved_again_unchanged_gives_up_and_writes_nothing(home, editor):
    make_basics()
    before = snapshot(home)
    result, seen = editor(["model: m1", "model: [broken"], "keep")
    assert result.exit_code == 4 and "nothing was written" in result.stderr, result
    assert len(seen) == 2 and snapshot(home) == before


@pytest.mark.parametrize("step", ["keep", "empty"])
def test_an_unchanged_or_emptied_file_cancels(home, editor, step):
    make_basics()
    before = snapshot(home)
    result, _ = editor(step)
    assert result.exit_code == 0 and "cancelled" in result.stdout, result
    assert snapshot(home) == before


def test_a_prompt_edits_as_the_files_own_text(home, editor):
    fwj("resource", "write", "prompt", "p1", "--create", "--data", json.dumps({"description": "d", "body": "Be brief.\n"}))
    result, seen = editor(["Be brief.", "Be brief.\nAnd kind."], args=("prompt", "p1"))
    assert result.exit_code == 0, result
    assert seen[0].startswith("---\n") and "Be brief." in seen[0]
    assert fwj("resource", "read", "prompt", "p1")["body"] == "Be brief.\nAnd kind.\n"


def test_an_editor_that_fails_writes_nothing(home, monkeypatch):
    make_basics()
    monkeypatch.setenv("EDITOR", "false")
    monkeypatch.delenv("VISUAL", raising=False)
    before = snapshot(home)
    result = fw("resource", "edit", "agent", "a1", "--json")
    assert result.exit_code == 2 and result.json["error"]["code"] == "usage", result
    assert snapshot(home) == before


def test_editing_a_missing_resource_is_not_found(home, editor):
    make_basics()
    result, seen = editor("keep", args=("agent", "a2"))
    assert result.exit_code == 3 and seen == [], result


def test_an_editor_that_cannot_start_or_fails_is_named_and_nothing_is_written(home, monkeypatch):
    make_basics()
    before = snapshot(home)
    monkeypatch.delenv("VISUAL", raising=False)
    for editor, said in (("no-such-editor-4c2e", "cannot start the editor 'no-such-editor-4c2e' (from EDITOR)"),
                         ("false", "the editor 'false' (from EDITOR) exited with status 1")):
        monkeypatch.setenv("EDITOR", editor)
        r = fw("resource", "edit", "agent", "a1", "--json")
        assert r.exit_code == 2 and said in r.json["error"]["message"], r
    monkeypatch.setenv("VISUAL", "no-such-visual-9d1b")
    r = fw("resource", "edit", "agent", "a1", "--json")
    assert "'no-such-visual-9d1b' (from VISUAL)" in r.json["error"]["message"], r
    assert snapshot(home) == before


def test_a_file_changed_by_another_writer_while_it_is_edited_is_not_overwritten_unasked(home, editor):
    """Another `fw` changes the agent while the editor is open: the save is refused and the
    editor opens again with the edit and a note; emptying it cancels (the other change stays),
    saving it again replaces the file as it is now."""
    make_basics()
    meanwhile = ["agent", "edit", "a1", "--add-builtin-tool", "task_collaboration"]
    result, seen = editor({"meanwhile": meanwhile, "then": ["model: m1", "model: m1\ndescription: mine"]}, "empty")
    assert result.exit_code == 0 and "cancelled" in result.stdout, result
    assert len(seen) == 2 and "changed by another writer" in seen[1].splitlines()[0] and "description: mine" in seen[1]
    assert fwj("resource", "read", "agent", "a1")["data"]["builtin_tools"] == ["task_collaboration"]  # not lost
    result, seen = editor({"meanwhile": ["agent", "edit", "a1", "--description", "theirs"], "then": ["model: m1", "model: m1  # mine"]},
                          "keep")
    assert result.exit_code == 0 and "Saved agent a1" in result.stdout, result
    text = (home / "agents/default/a1.yaml").read_text()
    assert "# mine" in text and "theirs" not in text  # replaced, once the user was told


def test_an_editor_that_keeps_changing_a_refused_text_is_given_up_on(home, editor):
    from framework_cli.cli.editor import MAX_REFUSED

    make_basics()
    before = snapshot(home)
    steps = [["model: m1", "model: [broken0"]] + [[f"[broken{n}", f"[broken{n + 1}"] for n in range(MAX_REFUSED + 5)]
    result, seen = editor(*steps)
    assert result.exit_code == 4 and "nothing was written" in result.stderr, result
    assert len(seen) == MAX_REFUSED and snapshot(home) == before


def test_an_invalid_edit_met_by_a_change_meanwhile_is_checked_when_saved_again_not_dropped(home, editor):
    make_basics()
    meanwhile = ["agent", "edit", "a1", "--description", "theirs"]
    result, seen = editor({"meanwhile": meanwhile, "then": ["model: m1", "model: [broken"]}, "keep",
                          ["model: [broken", "model: m1  # fixed"])
    assert result.exit_code == 0 and "Saved agent a1" in result.stdout, result
    assert len(seen) == 3 and "changed by another writer" in seen[1].splitlines()[0]
    assert "fw resource read agent a1" in seen[1]  # the hint's command exists
    assert "the edit was not saved" in seen[2].splitlines()[0] and "changed by another writer" not in seen[2].splitlines()[0]
    assert "# fixed" in (home / "agents/default/a1.yaml").read_text()
