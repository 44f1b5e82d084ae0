"""`fw home check` reads through the index where a file is unchanged, and still finds every
file that changed behind the index's back, or that is corrupt."""

import json
import os
import time

from conftest import fw, fwj, make_basics


def age(home, seconds=3600):
    """Date every file of the home back, as a home set up an hour ago is (fresh files are
    never cached: the racy-clean rule)."""
    past = time.time() - seconds
    for path in home.rglob("*"):
        if path.is_file() and ".index" not in path.parts:
            os.utime(path, (past, past))


def check():
    result = fw("home", "check", "--json")
    assert result.exit_code in (0, 4), result
    return result.exit_code, json.loads(result.stdout)


def test_a_warm_check_says_what_a_cold_one_says(home):
    make_basics(with_key=False)
    (home / "agents/default/broken.yaml").write_text("model: [unclosed\n")
    (home / "agents/default/lost.yaml").write_text("model: gone\n")
    age(home)
    cold = check()
    assert json.loads((home / ".index/agents.json").read_text().split("\n", 1)[1])["files"]  # the check filled the index
    warm = check()
    assert cold == warm
    code, doc = warm
    assert code == 4 and not doc["ok"]
    assert {(p["code"], p["path"]) for p in doc["problems"]} == {
        ("corrupt", "agents/default/broken.yaml"), ("dangling", "agents/default/lost.yaml")}
    assert doc["counts"]["agent"] == 3


def test_a_file_changed_behind_the_index_in_the_same_second_is_still_read(home):
    make_basics(with_key=False)
    age(home)
    path = home / "agents/default/a1.yaml"
    os.utime(path)  # written just now: what the check reads of it could change within its mtime's tick
    before = os.stat(path)
    assert check()[0] == 0
    text = path.read_text()
    damaged = ("x" * (len(text) - 1)) + "\n"  # the same size, and no longer a mapping of fields
    with open(path, "r+", encoding="utf-8") as handle:  # in place: the same inode
        handle.write(damaged)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same mtime, to the nanosecond
    after = os.stat(path)
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (before.st_mtime_ns, before.st_size, before.st_ino)
    code, doc = check()
    assert code == 4
    assert [p["path"] for p in doc["problems"] if p["code"] == "corrupt"] == ["agents/default/a1.yaml"]


def test_a_cached_file_that_changes_is_read_again(home):
    make_basics(with_key=False)
    age(home)
    assert check()[0] == 0 and check()[0] == 0  # the second check reads the index
    (home / "agents/default/a1.yaml").write_text("model: m1\nunknown_field: 1\n")
    code, doc = check()
    assert code == 4
    assert doc["problems"][0]["path"] == "agents/default/a1.yaml" and doc["problems"][0]["field"] == "unknown_field"
    (home / "agents/default/a1.yaml").write_text("model: m1\n")
    assert check()[0] == 0


def test_a_damaged_index_is_only_a_cold_cache(home):
    make_basics(with_key=False)
    (home / "models/default/m2.yaml").write_text("provider: nowhere\nmodel_id: x\n")
    age(home)
    expected = check()
    for index in (home / ".index").iterdir():
        index.write_text("{not json")
    assert check() == expected
    fwj("resource", "list", "model")
