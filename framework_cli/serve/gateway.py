"""The gateway: MCP over streamable HTTP at `/mcp`, for runners outside fw (seed B's MCP asset
gateway). `Authorization: Bearer <gateway_token>` selects the run; no token, an unknown one, or
one of a run that may no longer act (ended, expired, its session ended) gets 401 before
anything is listed. A run's gateway lists its own tools under their names and the asset tools
its harness permits (`tools/assets.py`); every call goes through the tool service, audited as
the run with `via: gateway`.

- `fw mcp serve --http` serves every active run (`serve_gateway`).
- An external runner's run gets a gateway of its own on an ephemeral loopback port, for as
  long as the runner runs (`run_gateway`, which the CLI hands to the engine).

The official SDK's low-level server and session manager do the protocol, statelessly: each
request stands alone, so the token decides every one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..domain.run_records import load_run, run_for_token
from ..domain.tool_types import Caller
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..tools.assets import GATEWAY
from ..tools.service import check_run
from ..tools.sources import RunSources
from .http import (
    BodyLimit,
    DoorLimits,
    JsonDepthLimit,
    LoopbackHostOnly,
    bind,
    guarded_protocol,
    parse_listen,
    url_host,
)
from .mcp import ToolHandlers, mcp_server

PATH = "/mcp"
DEFAULT_LISTEN = "127.0.0.1:8766"
RUN_KEY = "fw.gateway_run"  # where the auth layer leaves the token's run id in the request's scope
STARTUP_SECONDS = 30.0  # for a run's own gateway to start listening


class _Sources:
    """The MCP connections of each run the gateway serves, opened when a tool of theirs is first
    called and closed when the gateway stops (or handed in: an external runner's run's own)."""

    def __init__(self, home: Home, given: dict[str, Any] | None = None) -> None:
        self.home, self._given = home, dict(given or {})
        self._open: dict[str, RunSources] = {}
        self._lock = threading.Lock()

    def of(self, run_id: str) -> Any:
        if run_id in self._given:
            return self._given[run_id]
        with self._lock:
            if run_id not in self._open:
                self._open[run_id] = RunSources(self.home, load_run(self.home, run_id))
            return self._open[run_id]

    def close(self) -> None:
        with self._lock:
            for sources in self._open.values():
                sources.close()
            self._open.clear()


class BearerRun:
    """Every request must carry the gateway token of a run that may still act (and, for a
    run's own gateway, of that run): 401 otherwise, before the MCP layer sees anything."""

    def __init__(self, app: Any, home: Home, only_run: str | None = None) -> None:
        self.app, self.home, self.only_run = app, home, only_run

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        import anyio

        headers = dict(scope.get("headers") or [])
        token = _bearer(headers.get(b"authorization", b"").decode("latin-1"))
        try:
            scope[RUN_KEY] = await anyio.to_thread.run_sync(self._run_of, token)
        except FwError as exc:
            await _refuse(exc, scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _run_of(self, token: str | None) -> str:
        home = Home(self.home.root)
        run = run_for_token(home, token)
        if self.only_run is not None and run["run_id"] != self.only_run:
            raise FwError("denied", "no valid gateway token", "this gateway serves one run only", reason="token")
        check_run(home, run)  # a run tied to a session that ended may not act: its token is dead
        return run["run_id"]


def _bearer(header: str) -> str | None:
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def _refuse(exc: FwError, scope: Any, receive: Any, send: Any) -> None:
    from starlette.responses import JSONResponse

    doc = exc.to_dict()
    doc["error"] = {k: redact(v) if isinstance(v, str) else v for k, v in doc["error"].items()}
    response = JSONResponse(doc, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="fw gateway"'})
    await response(scope, receive, send)


def gateway_app(home: Home, *, only_run: str | None = None, sources: dict[str, Any] | None = None, on_call: Any = None) -> Any:
    """The gateway as a Starlette app: every active run's, or (`only_run`) one run's, whose
    open MCP connections may be handed in (`sources`: run id -> RunSources); `on_call` hears
    each call's outcome."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    from ..runtime.mcp_client import quiet_sdk_logging  # lazy: start-up speed

    quiet_sdk_logging()
    opened = _Sources(home, sources)

    def handlers_for(ctx: Any) -> ToolHandlers:
        request = getattr(ctx, "request", None)
        run_id = getattr(request, "scope", {}).get(RUN_KEY) if request is not None else None
        if run_id is None:
            raise FwError("denied", "no valid gateway token", "give the token as Authorization: Bearer TOKEN", reason="token")
        return ToolHandlers(home, Caller("run", run_id), opened.of(run_id), via=GATEWAY, on_call=on_call)

    manager = StreamableHTTPSessionManager(mcp_server(handlers_for), stateless=True, json_response=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        async with manager.run():
            try:
                yield
            finally:
                opened.close()

    # the token is checked on the request as it came, before any of its body is parsed
    endpoint = BearerRun(JsonDepthLimit(StreamableHTTPASGIApp(manager)), home, only_run)
    return Starlette(routes=[Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"])], lifespan=lifespan)


def serve_gateway(home: Home, listen: str = DEFAULT_LISTEN, on_started: Any = None, limits: DoorLimits | None = None) -> None:
    """`fw mcp serve --http`: the gateway of every active run, until Ctrl-C or SIGTERM (then
    it returns: the runs it serves are their drivers', and live on)."""
    from .http import serve  # lazy: start-up speed

    host, port = parse_listen(listen)
    sock = bind(host, port)
    url = f"http://{url_host(host)}:{sock.getsockname()[1]}{PATH}"
    try:
        serve(gateway_app(home), sock, on_started=(lambda: on_started(url)) if on_started else None, limits=limits)
    except KeyboardInterrupt:
        return


@contextlib.contextmanager
def run_gateway(home: Home, run_id: str, sources: Any = None, on_call: Any = None) -> Iterator[str]:
    """The gateway of one run, on an ephemeral loopback port, served from a thread for as long
    as the block runs: yields its URL (`http://127.0.0.1:PORT/mcp`). The engine's
    `GatewayStarter`, for an external runner."""
    import uvicorn

    sock = bind("127.0.0.1", 0)
    app = gateway_app(home, only_run=run_id, sources={run_id: sources} if sources is not None else None, on_call=on_call)
    limits = DoorLimits()
    app = BodyLimit(LoopbackHostOnly(app), limits)
    config = uvicorn.Config(app, log_config=None, log_level="critical", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=5, server_header=False, http=guarded_protocol(limits))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"gateway-{run_id}", daemon=True)
    thread.start()
    try:
        _wait_started(server, thread)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{PATH}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def _wait_started(server: Any, thread: threading.Thread) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise FwError("unavailable", "the run's gateway did not start", "try again; check that loopback networking works",
                          reason="gateway")
        time.sleep(0.005)
