"""fw web: serve the web page for the home."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import home_of
from .output import JsonOpt, write_out

app = typer.Typer(help="Serve a local web page to create and edit agents, models and providers.")


@app.callback(invoke_without_command=True)
def web(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option("--listen", metavar="HOST:PORT", help="Where to listen; loopback unless told otherwise (port 0 picks a free one).")] = "127.0.0.1:8765",
    as_json: JsonOpt = False,
) -> None:
    """Serve the page until Ctrl-C. The first line printed is the address to open,
    `fw web: http://HOST:PORT/?token=TOKEN`: it signs one browser in, once. --json applies
    to errors before serving starts."""
    from ..serve.web.server import serve  # lazy: start-up speed

    serve(home_of(ctx), listen, write_out)
