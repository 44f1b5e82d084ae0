"""The floor plan holds: an import inside a function is for start-up speed only, and says so.
(`lint-imports`, run by CI, checks that every import points down and that nothing circles.)"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "framework_cli"
MARK = "# lazy: start-up speed"


def _function_level_project_imports(path: Path):
    tree = ast.parse(path.read_text())
    lines = path.read_text().splitlines()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("framework_cli")):
                yield node, lines[node.end_lineno - 1]


def test_every_function_level_import_of_the_project_is_marked_as_keeping_start_up_fast():
    unmarked = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node, line in _function_level_project_imports(path)
        if MARK not in line
    ]
    assert unmarked == [], "move these imports to the top of their module, or mark them: " + ", ".join(unmarked)


def test_every_package_names_its_floor():
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert doc.startswith("Floor: "), f"{init} does not say which floor it is on"
