"""Rewrite the command section of docs/reference.md from the app itself: every command, its
arguments, its options and their help. Run it after changing a command; tests/test_reference.py
fails while the two differ.

    python scripts/reference.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference.md"
START, END = "<!-- commands: written by scripts/reference.py -->", "<!-- /commands -->"


def commands() -> list[tuple[list[str], object]]:
    import typer.main

    from framework_cli.cli.main import build_app

    found: list[tuple[list[str], object]] = []

    def walk(command: object, path: list[str]) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                walk(sub, path + [name])
        else:
            found.append((path, command))

    walk(typer.main.get_command(build_app()), ["fw"])
    return found


def _one_line(text: str | None) -> str:
    first = (text or "").split("\n\n")[0]
    return re.sub(r"\s+", " ", first.replace("\\[", "[")).strip()


def usage(path: list[str], command: object) -> str:
    words = [a.human_readable_name.upper() for a in command.params if a.param_type_name == "argument"]  # type: ignore[attr-defined]
    return " ".join(path + [w.strip("[]") if not w.startswith("[") else w for w in words])


def section() -> str:
    lines, group = [START, ""], None
    for path, command in commands():
        if path[1] != group:
            group = path[1]
            lines += [f"### fw {group}", ""]
        lines += [f"#### `{usage(path, command)}`", "", _one_line(command.help), ""]  # type: ignore[attr-defined]
        for option in command.params:  # type: ignore[attr-defined]
            if option.param_type_name != "option" or option.name in ("help", "as_json") or getattr(option, "hidden", False):
                continue
            names = ", ".join(f"`{o}`" for o in option.opts + option.secondary_opts)
            metavar = f" {option.metavar}" if option.metavar else ""
            lines.append(f"- {names}{metavar}: {_one_line(option.help)}")
        lines.append("")
    return "\n".join(lines + [END])


def rewritten(text: str) -> str:
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    return before + section() + after


if __name__ == "__main__":
    text = REFERENCE.read_text(encoding="utf-8")
    new = rewritten(text)
    if "--check" in sys.argv[1:]:
        sys.exit(0 if new == text else 1)
    REFERENCE.write_text(new, encoding="utf-8")
