"""fw mcp: serve the built-in tools over MCP."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from .common import complete_run, home_of
from .output import JsonOpt, write_out

app = typer.Typer(help="Serve the built-in tools to MCP clients.")


@app.command("serve")
def serve(
    ctx: typer.Context,
    manager: Annotated[bool, typer.Option("--manager", help="Serve every tool, as the Manager (bare names).")] = False,
    run: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="Serve one run's granted framework_ tools.", autocompletion=complete_run)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the tools over MCP on standard input and output until the client disconnects.
    Every call is authorised and audited as with `fw tool call`; --json applies to
    errors before serving starts."""
    from ..serve.mcp import serve as serve_mcp  # lazy: start-up speed
    from ..tools.service import caller_for  # lazy: start-up speed

    home = home_of(ctx)
    caller = caller_for(home, manager, run)
    if sys.stdin.isatty():
        say_waiting(" ".join(["fw", "mcp", "serve", "--manager" if manager else f"--run {run}"]))
    serve_mcp(home, caller)


def say_waiting(command: str) -> None:
    """On a terminal nothing seems to happen: say what the server waits for."""
    write_out(
        f"{command}: waiting for an MCP client on standard input (JSON-RPC, one message a line).\n"
        f"This is meant to be started by an MCP client, e.g. with the command `{command}`.\n"
        "Stop it with Ctrl-D (end of input) or Ctrl-C.",
        err=True,
    )
