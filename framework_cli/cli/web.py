"""fw web: serve the web page for the home."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import home_of
from .output import JsonOpt, write_out

app = typer.Typer(help="Serve a local web page to create and edit agents, models and providers.")


@app.callback(invoke_without_command=True)
def web(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option("--listen", metavar="HOST:PORT", help="Where to listen; loopback unless told otherwise (port 0 picks a free one).")] = "127.0.0.1:8765",
    max_body: Annotated[Optional[int], typer.Option("--max-body", metavar="BYTES", help="The largest request body accepted (default 1 MiB); larger ones get 413, unread.")] = None,
    max_connections: Annotated[Optional[int], typer.Option("--max-connections", metavar="N", help="Connections open at once (default 512); more are closed at once.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the page until Ctrl-C or SIGTERM (then it exits 0). The first line printed is the
    address to open, `fw web: http://HOST:PORT/?token=TOKEN`: it signs one browser in, once.
    --json applies to errors before serving starts."""
    from ..serve.http import DoorLimits, check_limits  # lazy: start-up speed
    from ..serve.web.server import serve  # lazy: start-up speed

    body, connections = check_limits(max_body, max_connections)
    serve(home_of(ctx), listen, write_out, DoorLimits(max_body=body, max_connections=connections))
    write_out("fw web: stopped.", err=True)
