"""Help as users of kubectl and gh read it: usage lines with real metavars (`KIND REF`),
no `COMMAND [ARGS]...` for a command without subcommands, required options marked, and a
root help that names both halves and where to start."""

import re

import typer.main
from conftest import APP, fw


def every_command(group=None, path=()):
    group = group or typer.main.get_command(APP)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from every_command(command, (*path, name))
        else:
            yield (*path, name)


def usage(*path) -> str:
    out = fw(*path, "--help").stdout
    return next(line.strip() for line in out.splitlines() if "Usage:" in line)


def test_usage_lines_name_arguments_in_capitals_without_braces():
    assert usage("resource", "write") == "Usage: fw resource write [OPTIONS] KIND REF"
    assert usage("message", "post") == "Usage: fw message post [OPTIONS] SESSION [TEXT]"
    for path in every_command():
        line = usage(*path)
        assert "{" not in line and "<" not in line, (path, line)


def test_no_help_shows_a_bare_type_as_a_metavar():
    for path in every_command():
        out = fw(*path, "--help").stdout
        assert not re.search(r"<(str|int|float|text|integer)>", out), (path, out)


def test_dispatch_has_no_subcommands_and_says_so():
    assert usage("dispatch") == "Usage: fw dispatch [OPTIONS]"
    assert fw("dispatch", "--help").exit_code == 0


def test_a_required_option_is_marked_and_missing_is_a_usage_error(home):
    out = fw("message", "post", "--help").stdout
    assert re.search(r"\*\s+--as\s+PRINCIPAL", out) and "[required]" in out, out
    missing = fw("message", "post", "s1", "hi", "--json")
    assert missing.exit_code == 2 and "--as" in missing.json["error"]["message"]


def test_the_root_help_names_the_runtime_half_and_where_to_start():
    out = " ".join(fw("--help").stdout.replace("│", " ").split())
    for word in ("fw session", "fw dispatch", "fw bot", "fw task", "fw home init"):
        assert word in out, word


def test_every_flag_a_help_text_names_exists():
    """A help text that names `--flag` names one its command takes, or a root option."""
    for path in every_command():
        command = typer.main.get_command(APP)
        for word in path:
            command = command.commands[word]
        known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"--home", "--json", "--help"}
        text = " ".join(p.help or "" for p in command.params) + (command.help or "")
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))
        foreign = {flag for flag in named if flag not in known and not re.search(rf"`fw [^`]*{flag}", text)}
        assert not foreign, (path, foreign)


def test_help_wraps_at_the_terminal_never_mid_sentence():
    """Each command's summary in its group's list is one line of text for the terminal to wrap
    (the source's line breaks are not kept), at 80 columns as at 200."""
    for words in (["agent"], ["run"], ["bot"], ["state"]):
        for columns in ("80", "200"):
            out = fw(*words, "--help", env={"COLUMNS": columns}).stdout
            rows = [line.strip("│ ").rstrip() for line in out.splitlines() if line.startswith("│")]
            for row, after in zip(rows, rows[1:]):
                # a row cut short (well under the width) and continued on the next line is a kept line break
                if row and after and not re.match(r"^[a-z-]+\s", after) and not after.startswith("-"):
                    assert len(row) > int(columns) - 30, f"fw {' '.join(words)} --help breaks a line early:\n{row}\n{after}"
