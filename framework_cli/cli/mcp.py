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
    http: Annotated[bool, typer.Option("--http", help="Serve the gateway of every active run over streamable HTTP at /mcp; "
                                       "a runner sends its run's gateway token (from `fw run start`) as Authorization: Bearer TOKEN.")] = False,
    listen: Annotated[Optional[str], typer.Option("--listen", metavar="HOST:PORT", help="With --http: where to listen (default 127.0.0.1:8766; port 0 picks a free one).")] = None,
    max_body: Annotated[Optional[int], typer.Option("--max-body", metavar="BYTES", help="With --http: the largest request body accepted (default 1 MiB); larger ones get 413, unread.")] = None,
    max_connections: Annotated[Optional[int], typer.Option("--max-connections", metavar="N", help="With --http: connections open at once (default 512); more are closed at once.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the tools over MCP on standard input and output until the client disconnects,
    or (--http) the gateway of every active run until Ctrl-C or SIGTERM (then it exits 0: the
    runs it serves live on). Every call is authorised and audited as with `fw tool call`;
    --json applies to errors before serving starts."""
    from ..errors import FwError  # lazy: start-up speed

    home = home_of(ctx)
    if http:
        if manager or run is not None:
            raise FwError("usage", "--http serves the gateway of every run, chosen by its token: give no --manager or --run",
                          "start a run with `fw run start`, then send its gateway_token as Authorization: Bearer TOKEN")
        from ..serve.gateway import DEFAULT_LISTEN, serve_gateway  # lazy: start-up speed
        from ..serve.http import DoorLimits, check_limits  # lazy: start-up speed
        from .output import json_wanted, print_json  # lazy: start-up speed

        body, connections = check_limits(max_body, max_connections)

        def started(url: str) -> None:  # the first line on stdout: where runners connect
            if json_wanted(as_json):
                print_json({"gateway": url})
            else:
                write_out(f"fw gateway: {url}")

        serve_gateway(home, listen or DEFAULT_LISTEN, on_started=started, limits=DoorLimits(max_body=body, max_connections=connections))
        write_out("fw gateway: stopped.", err=True)
        return
    if listen is not None or max_body is not None or max_connections is not None:
        flag = "--listen" if listen is not None else "--max-body" if max_body is not None else "--max-connections"
        raise FwError("usage", f"{flag} goes with --http", "e.g. fw mcp serve --http --listen 127.0.0.1:8766")
    from ..serve.mcp import serve as serve_mcp  # lazy: start-up speed
    from ..tools.service import caller_for  # lazy: start-up speed

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
