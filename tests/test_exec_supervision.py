"""exec leaves nothing behind and keeps its limits (CONTRACT section 8): a child that called
`setsid` or detached itself is stopped with the call, no output read waits past the timeout,
the output cap counts bytes, and a missing working folder is named as such."""

import json
import uuid

import pytest
from conftest import fw, fw_proc, fwj, processes_with, snapshot
from test_tasks_exec import bound_agent, call, provider_and_model


def marker() -> str:
    return f"fw-test-marker-{uuid.uuid4().hex[:12]}"


def sleeper(mark: str, seconds: int = 300) -> str:
    """A shell word list for a process that sleeps, with `mark` in its command line (python3 of
    the system: the sandbox sees the system, not this test's virtual environment)."""
    return f"python3 -c 'import time; time.sleep({seconds})' {mark}"


@pytest.fixture(params=["bubblewrap", "none"])
def exec_run(request, home, tmp_path):
    """A run with exec, in the sandbox and (the old behaviour, chosen explicitly) outside it:
    the supervisor's promises hold either way."""
    work = tmp_path / "work"
    work.mkdir()
    provider_and_model("x", "http://127.0.0.1:9/v1")
    bound_agent("worker", "m-x", "local_execution", directory=work, execution=True)
    fwj("resource", "write", "agent", "worker", "--data", json.dumps({"execution": {"sandbox": request.param}}))
    return fwj("run", "start", "--principal", "worker")["run_id"], work


def test_a_setsid_child_holding_the_output_neither_holds_the_call_nor_survives_it(exec_run, home):
    run_id, _ = exec_run
    mark = marker()
    script = f"setsid {sleeper(mark)} & sleep 0.5; echo started"
    # in a subprocess, so that a call that waits for the child fails here instead of hanging
    r = fw_proc("tool", "call", "--run", run_id, "framework_exec", "--args",
                json.dumps({"argv": ["sh", "-c", script], "timeout_seconds": 2}), home=home, timeout=60)
    assert r.exit_code == 0, r
    assert r.json["stdout"] == "started\n" and r.json["timed_out"] is False
    assert processes_with(mark) == []


def test_a_fully_detached_child_does_not_survive_the_call(exec_run):
    run_id, _ = exec_run
    mark = marker()
    script = f"setsid sh -c \"exec >/dev/null 2>&1 </dev/null; {sleeper(mark)}; true\" & echo detached"
    doc = call(run_id, "framework_exec", {"argv": ["sh", "-c", script]}, code=0)
    assert doc["stdout"] == "detached\n"
    assert processes_with(mark) == []


def test_at_the_timeout_every_process_of_the_call_is_stopped_setsid_or_not(exec_run):
    run_id, _ = exec_run
    mark = marker()
    script = f"setsid {sleeper(mark)} & {sleeper(mark)} & {sleeper(mark)}"
    doc = call(run_id, "framework_exec", {"argv": ["sh", "-c", script], "timeout_seconds": 1}, code=0)
    assert doc["timed_out"] is True and doc["exit_code"] == -9
    assert processes_with(mark) == []


def test_the_64_kib_cap_counts_bytes_and_cuts_at_a_character_boundary(exec_run):
    run_id, _ = exec_run
    emoji = "\U0001F600"  # four bytes in UTF-8
    program = f"import sys; sys.stdout.write('a' + {emoji!r} * 70000); sys.stderr.write({emoji!r} * 10)"
    doc = call(run_id, "framework_exec", {"argv": ["python3", "-c", program]}, code=0)
    kept = doc["stdout"].encode("utf-8")
    assert len(kept) <= 65536 and doc["truncated"] is True
    assert doc["stdout"] == "a" + emoji * 16383  # 65,533 bytes: the next emoji would cross the cap
    assert doc["stderr"] == emoji * 10


def test_output_of_exactly_the_cap_is_not_truncated(exec_run):
    run_id, _ = exec_run
    doc = call(run_id, "framework_exec", {"argv": ["python3", "-c", "print('\u00e9' * 32767)"]}, code=0)
    assert len(doc["stdout"].encode()) == 65535 and doc["truncated"] is False


def test_exec_in_a_binding_whose_folder_is_missing_says_the_folder_is_missing(exec_run):
    run_id, work = exec_run
    work.rmdir()
    r = fw("tool", "call", "--run", run_id, "framework_exec", "--args", json.dumps({"argv": ["echo", "hi"]}))
    assert r.exit_code == 3 and r.json["error"]["code"] == "not_found", r
    assert "working folder" in r.json["error"]["message"] and "program" not in r.json["error"]["message"]
    assert r.json["error"]["field"] == "directory"


def test_binding_set_with_a_folder_that_does_not_exist_is_invalid_and_changes_nothing(home, tmp_path):
    provider_and_model("x", "http://127.0.0.1:9/v1")
    bound_agent("worker", "m-x")
    before = snapshot(home)
    r = fw("binding", "set", "worker", "--agent", "worker", "--directory", str(tmp_path / "nowhere"), "--json")
    assert r.exit_code == 4 and r.json["error"]["code"] == "invalid" and r.json["error"]["field"] == "directory", r
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    called = fw("tool", "call", "--manager", "agent_bind", "--args",
                json.dumps({"principal": "worker", "agent": "worker", "directory": str(a_file)}))
    assert called.exit_code == 4 and called.json["error"]["field"] == "directory", called
    after = snapshot(home)
    after.pop("audit.jsonl"), before.pop("audit.jsonl", None)
    assert after == before
