"""`fw home check` reads through the index where a file is unchanged, and still finds every
file that changed behind the index's back, or that is corrupt."""

import json
import os
import sys
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


# -- a read saves what it refreshed (issue 31, item 7) ---------------------------------------------
def indexed(home, name):
    raw = (home / ".index" / f"{name}.json").read_text()
    return json.loads(raw.partition("\n")[2])["files"]


def hand_written_agents(home, count):
    folder = home / "agents" / "default"
    for n in range(count):
        (folder / f"hand{n}.yaml").write_text("model: m1\n")


def test_a_read_after_files_were_written_by_hand_saves_the_refreshed_index(home):
    make_basics(with_key=False)
    hand_written_agents(home, 50)
    age(home)
    names = sorted(i["name"] for i in fwj("agent", "list")["items"])
    assert len(names) == 51
    # the read saved what it read: the next one finds every hand-written file in the index
    assert {f"agents/default/hand{n}.yaml" for n in range(50)} <= set(indexed(home, "agents"))
    assert sorted(i["name"] for i in fwj("agent", "list")["items"]) == names


def test_a_read_never_waits_for_nor_fails_on_the_index(home, tmp_path):
    import stat
    import subprocess

    from conftest import fw_proc

    make_basics(with_key=False)
    age(home)
    fwj("agent", "list")
    before = (home / ".index" / "agents.json").read_bytes()
    hand_written_agents(home, 5)
    age(home)
    # a writer holds the home's lock: the read answers at once and leaves the index to it
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)", str(home / ".lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = fw_proc("agent", "list", "--json", home=home, timeout=30)
        assert result.exit_code == 0 and len(json.loads(result.stdout)["items"]) == 6
        assert (home / ".index" / "agents.json").read_bytes() == before
    finally:
        holder.kill()
        holder.wait()
    # a home fw may not write: the read still answers, and leaves no temp file
    mode = home.stat().st_mode
    index_mode = (home / ".index").stat().st_mode
    try:
        os.chmod(home / ".index", stat.S_IRUSR | stat.S_IXUSR)
        result = fw_proc("agent", "list", "--json", home=home, timeout=30)
        assert result.exit_code == 0 and len(json.loads(result.stdout)["items"]) == 6
    finally:
        os.chmod(home / ".index", index_mode)
        os.chmod(home, mode)
    assert [p.name for p in (home / ".index").iterdir() if p.name.endswith(".tmp")] == []


def test_runs_of_one_process_that_each_refresh_a_file_share_it_and_save_the_index_seldom(home, monkeypatch):
    """A dispatcher opens a Home a run: after every principal's file was written by hand, each
    run refreshes its own principal. The process's later Homes read the refreshed files without
    parsing them again, the index is saved at most once every RESAVE_SECONDS (not once a run),
    and the next save loses none of what the others refreshed."""
    from framework_cli.domain.identities import get_principal
    from framework_cli.home import index, records, store

    names = [f"p{n:02d}" for n in range(40)]
    for name in names:
        (home / "principals" / f"{name}.yaml").write_text("kind: agent\n")
    age(home)
    store.Home(home).keep_refreshed_index()
    assert [get_principal(store.Home(home), name)["kind"] for name in names] == ["agent"] * 40  # a warm index
    age(home, 7200)  # every file written by hand again (another time): each entry is stale
    saves, parses = [], []
    write_index, record_entry = store.Home._write_index, records._record_entry
    monkeypatch.setattr(store.Home, "_write_index", lambda self, name, text: saves.append(name) or write_index(self, name, text))
    monkeypatch.setattr(records, "_record_entry", lambda *a: parses.append(a[2]) or record_entry(*a))
    monkeypatch.setattr(index, "_SAVED_AT", {})  # a process started after the files were written (a dispatcher)
    monkeypatch.setattr(index, "RESAVE_SECONDS", 3600.0)  # however slow the machine, the runs come within it
    for name in names:  # one run each, each with its own Home
        assert get_principal(store.Home(home), name)["kind"] == "agent"
    assert sorted(parses) == [f"principals/{name}.yaml" for name in names]  # each file read once
    assert saves == ["other"]  # the first run's read saved it; the others' waited for the next save, not 40 saves
    parses.clear()
    later = store.Home(home)
    assert [get_principal(later, name)["kind"] for name in names] == ["agent"] * 40
    assert parses == []  # what the others refreshed was shared
    monkeypatch.setattr(index, "RESAVE_SECONDS", 0.0)
    touched = home / "principals" / "p00.yaml"
    os.utime(touched, (time.time() - 600, time.time() - 600))
    get_principal(store.Home(home), "p00")  # a refresh, and a save now
    on_disk = indexed(home, "other")
    for name in names:  # the saved index holds every file as it is now
        st = os.stat(home / "principals" / f"{name}.yaml")
        assert on_disk[f"principals/{name}.yaml"][0] == [st.st_mtime_ns, st.st_size, st.st_ino], name
