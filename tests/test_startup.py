"""Start-up stays lean: the listing path imports no MCP, HTTP, JSON Schema or YAML editor,
and the README's command works with the installed fw."""

import json
import subprocess
import sys

from conftest import fw_proc

PROBE = """
import sys
from framework_cli.cli.main import main
sys.argv = ["fw", "--home", sys.argv[1], "resource", "list", "agent", "--json"]
try:
    main()
except SystemExit:
    pass
heavy = ("mcp", "httpx", "jsonschema", "ruamel.yaml", "rich", "pydantic", "yaml")
print("LOADED", sorted(m for m in heavy if m in sys.modules), file=sys.stderr)
"""


def test_a_warm_listing_imports_nothing_heavy(sample):
    fw_proc("resource", "list", "agent", home=sample)  # builds the index
    proc = subprocess.run([sys.executable, "-c", PROBE, str(sample)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kind"] == "agent"
    loaded = proc.stderr.strip().splitlines()[-1]
    assert loaded == "LOADED []", loaded


def test_the_readme_command_works_with_the_installed_fw(sample):
    result = fw_proc("--home", str(sample), "agent", "list")
    assert result.exit_code == 0, result
    for name in ("ops", "helper", "researcher", "resource_management"):
        assert name in result.stdout
