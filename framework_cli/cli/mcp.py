"""fw mcp: serve the built-in tools over MCP."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import home_of
from .output import JsonOpt

app = typer.Typer(help="Serve the built-in tools to MCP clients.")


@app.command("serve")
def serve(
    ctx: typer.Context,
    manager: Annotated[bool, typer.Option("--manager", help="Serve every tool, as the Manager (bare names).")] = False,
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="Serve one run's granted framework_ tools.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the tools over MCP on standard input and output until the client disconnects.
    Every call is authorised and audited as with `fw tool call`; --json applies to
    errors before serving starts."""
    from ..tools.mcp_server import serve as serve_mcp
    from ..tools.service import caller_for

    home = home_of(ctx)
    serve_mcp(home, caller_for(home, manager, run))
