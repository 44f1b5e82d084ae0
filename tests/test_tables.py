"""Tables never wrap or cut an id or a name: piped, full-width plain columns (as kubectl
prints them, whatever COLUMNS says); on a terminal, less important columns are cut, then
dropped, to fit."""

import os
import pty
import subprocess

from conftest import fw_bin, fw_proc, fwj, make_basics


def on_terminal(home, columns, *args) -> str:
    """fw's output on a terminal `columns` wide."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(fw_bin(), [fw_bin(), *args], {**os.environ, "FW_HOME": str(home), "COLUMNS": str(columns), "TERM": "xterm"})
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    return out.decode().replace("\r\n", "\n")


def runs(home, n=2):
    make_basics()
    fwj("agent", "edit", "a1", "--description", "an agent with a long description " * 3)
    return [fwj("run", "start", "--agent", "a1")["run_id"] for _ in range(n)]


def test_piped_run_list_keeps_every_id_whole_whatever_the_columns(home):
    ids = runs(home)
    proc = subprocess.run(f"{fw_bin()} run list | awk 'NR > 1 {{print $1}}'", shell=True, capture_output=True, text=True,
                          env={**os.environ, "FW_HOME": str(home), "COLUMNS": "40"})
    assert proc.stdout.split() == sorted(ids), proc


def test_piped_empty_cells_keep_the_field_count(home):
    make_basics()
    lines = fw_proc("resource", "list", "agent", home=home).stdout.splitlines()
    assert len(lines[1].split()) == len(lines[0].split()), lines


def test_on_a_narrow_terminal_ids_stay_whole_and_minor_columns_go_first(home):
    ids = runs(home)
    out = on_terminal(home, 60, "run", "list")
    lines = out.splitlines()
    for run_id in ids:
        assert any(line.startswith(run_id + " ") for line in lines), out
    assert all(len(line) <= 60 for line in lines), out
    assert "not shown" in out and "lease_expires_at" in out.split("not shown", 1)[1], out


def test_on_a_terminal_a_long_description_is_shortened_not_wrapped(home):
    runs(home, 0)
    out = on_terminal(home, 70, "resource", "list", "agent")
    [row] = [line for line in out.splitlines() if line.startswith("a1 ")]
    assert len(row) <= 70 and row.endswith("…"), out


def test_the_catalogue_on_a_terminal_wraps_no_name(home):
    out = on_terminal(home, 80, "tool", "catalogue")
    names = [line.split()[0] for line in out.splitlines() if line.startswith(("event_", "platform_"))]
    assert "event_reply" in names and "platform_send_message" in names, out
    assert all(len(line) <= 80 for line in out.splitlines()), out


def test_audit_list_on_a_terminal_fits_and_keeps_tool_names_whole(home):
    make_basics()
    fwj("agent", "edit", "a1", "--add-builtin-tool", "resource_management")
    run_id = fwj("run", "start", "--agent", "a1")["run_id"]
    fw_proc("tool", "call", "--run", run_id, "framework_resource_category_delete", "--args", '{"kind": "agent", "category": "nope"}', home=home)
    out = on_terminal(home, 80, "audit", "list")
    assert "framework_resource_category_delete" in out and all(len(line) <= 80 for line in out.splitlines()), out
