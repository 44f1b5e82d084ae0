"""`fw bot serve BOT`: a onebot bot's door for its implementation (NapCat, Lagrange, ...).

One Starlette app, served by uvicorn, takes both of OneBot v11's ways in at once:
- `POST /`: HTTP reports (the implementation's "HTTP client"), checked against `X-Signature`
  when the bot has a secret (401 otherwise), answered 204 at once;
- `/onebot/v11/ws`: the reverse WebSocket (its "WebSocket client"), whose handshake must carry
  the bot's access token as a Bearer token. Events arrive as frames; a bot without a url sends
  its actions back on the socket and reads the answers here, matched by echo.

Events go to `EventWorkers` and run in the background; meta events only keep the online state;
a report or frame fw cannot read is logged and answered, never a crash. What happens is told
to `on_record` as small documents (the CLI prints them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..domain.bots import load_bot
from ..engine.event_workers import EventWorkers
from ..engine.handling import handle_event
from ..errors import FwError
from ..home.store import Home
from ..platform.adapters import onebot
from .gateway import run_gateway
from .http import bind, is_loopback, parse_listen, serve, url_host

OnRecord = Callable[[dict[str, Any]], None]
KEEP_FRESH_SECONDS = 15  # how often the socket rows of state.db are refreshed while held


class BotDoor:
    """The state the app's endpoints share: the bot, its secrets, its workers."""

    def __init__(self, home: Home, name: str, workers: EventWorkers, on_record: OnRecord) -> None:
        self.home = home
        self.name = name
        self.workers = workers
        self.say = on_record
        stored = onebot.bot_secrets(home, name)
        self.token: str | None = stored.get("access_token")
        self.secret: str | None = stored.get("secret")

    # -- what a report is ---------------------------------------------------------------------
    def take(self, data: Any, link: onebot.SocketLink | None = None) -> None:
        report = onebot.read_report(data)
        if report.kind == "meta":
            if link is not None and report.online is not None:
                link.online = report.online
                self._record_link(link)
            return
        if report.kind == "ignored":
            self.say({"type": "ignored", "why": report.note})
            return
        assert report.event is not None
        if not self.workers.submit(report.event):
            self.say({"type": "dropped", "event": report.event, "why": "the server is stopping, or too many events are waiting"})

    def _record_link(self, link: onebot.SocketLink) -> None:
        try:
            onebot.record_link(self.home, self.name, online=link.online, self_id=link.self_id)
        except FwError as exc:
            self.say({"type": "ignored", "why": f"the online state could not be kept: {exc.message}"})

    # -- HTTP reports ---------------------------------------------------------------------------
    async def report(self, request: Any) -> Any:
        from starlette.responses import Response

        body = await request.body()
        if self.secret is not None and not onebot.signature_ok(self.secret, body, request.headers.get("x-signature")):
            self.say({"type": "refused", "what": "report", "why": "a bad or missing X-Signature"})
            return Response(status_code=401)
        try:
            data = json.loads(body)
        except ValueError:
            self.say({"type": "ignored", "why": "a report that is not JSON"})
            return Response(status_code=204)
        self.take(data)
        return Response(status_code=204)

    # -- the reverse WebSocket --------------------------------------------------------------------
    async def socket(self, websocket: Any) -> None:
        if not onebot.bearer_ok(self.token, websocket.headers.get("authorization")):
            why = "a wrong or missing access token" if self.token else "the bot has no access token"
            self.say({"type": "refused", "what": "websocket", "why": why})
            await websocket.close(code=1008)  # before accept: the handshake is answered 403
            return
        await websocket.accept()
        loop = asyncio.get_running_loop()

        def send(text: str) -> None:  # from a worker thread, never from the loop
            asyncio.run_coroutine_threadsafe(websocket.send_text(text), loop).result(onebot.ACTION_TIMEOUT)

        link = onebot.SocketLink(self.name, send, websocket.headers.get("x-self-id"))
        onebot.LINKS.attach(link)
        self._record_link(link)
        self.say({"type": "connected", "self_id": link.self_id})
        try:
            await self._frames(websocket, link)
        finally:
            if not onebot.LINKS.detach(link):
                with contextlib.suppress(FwError):
                    onebot.forget_link(self.home, self.name)
            self.say({"type": "disconnected", "self_id": link.self_id})

    async def _frames(self, websocket: Any, link: onebot.SocketLink) -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", "replace")
            try:
                frame = json.loads(text)
            except ValueError:
                self.say({"type": "ignored", "why": "a frame that is not JSON"})
                continue
            if isinstance(frame, dict) and "echo" in frame and "post_type" not in frame:
                if not link.answer(frame):
                    self.say({"type": "ignored", "why": "an answer no action waits for"})
                continue
            self.take(frame, link)

    async def keep_fresh(self) -> None:
        """While this process holds sockets, say so in state.db (other processes read it)."""
        while True:
            await asyncio.sleep(KEEP_FRESH_SECONDS)
            link = onebot.LINKS.current(self.name)
            if link is not None:
                self._record_link(link)


def build_app(door: BotDoor) -> Any:
    from starlette.applications import Starlette
    from starlette.routing import Route, WebSocketRoute

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        fresh = asyncio.ensure_future(door.keep_fresh())
        try:
            yield
        finally:
            fresh.cancel()  # the workers are stopped once uvicorn has returned (serve_bot)

    routes = [Route("/", door.report, methods=["POST"]), WebSocketRoute(onebot.WEBSOCKET_PATH, door.socket)]
    return Starlette(routes=routes, lifespan=lifespan)


def stop_workers(door: BotDoor) -> None:
    stopped = door.workers.stop()
    if stopped["ended_runs"] or stopped["dropped"]:
        door.say({"type": "stopped", **stopped})


def serve_bot(home: Home, name: str, listen: str, workers: int, on_record: OnRecord) -> None:
    """Serve the bot until Ctrl-C (KeyboardInterrupt comes through once all is stopped)."""
    bot = load_bot(home, name)
    if bot["adapter"] != "onebot":
        raise FwError("invalid", f"bot {name!r} uses the {bot['adapter']} adapter; `fw bot serve` is for onebot bots",
                      f"a local bot's users speak with `fw bot local say {name} --from USER TEXT`")
    host, port = parse_listen(listen)
    # an external runner's run gets its own gateway, as with `fw event handle`
    handle = functools.partial(handle_event, gateway=run_gateway)
    pool = EventWorkers(home, name, workers, on_record, handle=handle)  # checks --workers before the port is taken
    sock = bind(host, port)
    door = BotDoor(home, name, pool, on_record)
    bound = sock.getsockname()[1]
    base = f"{url_host(host)}:{bound}"
    listening = {"type": "listening", "bot": name, "http": f"http://{base}/", "websocket": f"ws://{base}{onebot.WEBSOCKET_PATH}",
                 "signed": door.secret is not None, "token": door.token is not None, "loopback": is_loopback(host)}
    pool.start()
    try:
        serve(build_app(door), sock, on_started=lambda: on_record(listening))
    finally:
        stop_workers(door)
