"""Issue 21, item 24: the reference in the repository (docs/reference.md) names every command
and option of the app, every error code and its exit code, and the README cites it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from framework_cli.errors import EXIT_CODES

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "docs" / "reference.md"
sys.path.insert(0, str(REPO / "scripts"))
import reference  # noqa: E402  (scripts/reference.py: the app's commands, as the reference lists them)


def sections() -> dict[str, str]:
    """Each command heading of the reference with the text under it, keyed by its path."""
    text = REFERENCE.read_text(encoding="utf-8")
    found = {}
    for block in re.split(r"^#### ", text, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        words = [w for w in heading.strip("`").split() if re.fullmatch(r"[a-z][a-z-]*", w)]
        found[" ".join(words)] = body.split("\n### ")[0]
    return found


def test_every_command_and_option_is_in_the_reference():
    documented = sections()
    missing = []
    for path, command in reference.commands():
        name = " ".join(path)
        if name not in documented:
            missing.append(name)
            continue
        for option in command.params:
            if option.param_type_name == "option" and option.name not in ("help", "as_json") and not getattr(option, "hidden", False):
                missing += [f"{name} {o}" for o in option.opts + option.secondary_opts if f"`{o}`" not in documented[name]]
    assert not missing, f"not in docs/reference.md (run `python scripts/reference.py`): {missing}"


def test_no_command_is_documented_that_the_app_lacks():
    commands = {" ".join(path) for path, _ in reference.commands()}
    assert set(sections()) - commands == set()


def test_every_error_code_and_exit_code_is_in_the_reference():
    text = REFERENCE.read_text(encoding="utf-8")
    exit_rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.*) \|$", text, flags=re.M)}
    for code, exit_code in EXIT_CODES.items():
        assert f"`{code}`" in exit_rows.get(exit_code, ""), f"{code} is not listed under exit {exit_code}"
        assert re.search(rf"^\| `{code}` \| \S", text, flags=re.M), f"error code {code} has no meaning in the reference"
    assert 130 in exit_rows and 0 in exit_rows


def test_the_readme_cites_the_reference_not_a_file_outside_the_repository():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "docs/reference.md" in readme
    assert "CONTRACT.md" not in readme
    for link in re.findall(r"\]\(([^)#]+)\)", readme):
        if not link.startswith("http"):
            assert (REPO / link).exists(), link
