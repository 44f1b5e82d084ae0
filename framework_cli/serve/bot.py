"""`fw bot serve BOT [BOT...] | --all`: one listener for onebot bots' implementations (NapCat,
Lagrange, LLOneBot, go-cqhttp), both of OneBot v11's ways in at once:

- `POST /`: HTTP reports (the implementation's "HTTP client"). A report must be
  `Content-Type: application/json` and carry no `Origin` (a browser always sends one on a
  cross-site POST; implementations never do): 403 otherwise, and nothing runs. It is told
  apart by its `X-Self-ID` (or by which bot's secret signs the raw body), checked against
  `X-Signature` on the raw bytes before it is parsed (401), parsed no deeper than 64 levels
  (400), de-duplicated (204 and nothing more for a repeat), then answered 204. A bot with a
  `url` and no secret takes reports only on a loopback listener; a bot without a `url` has no
  report door unless it has a secret (CONTRACT section 11).
- `/onebot/v11/ws`: the reverse WebSocket (its "WebSocket client"), whose handshake carries a
  bot's access token (`Authorization: Bearer` or `Token`, or `?access_token=`), a numeric
  `X-Self-ID` and, if any, `X-Client-Role: Universal`. Events arrive as frames; a bot without a
  url sends its actions back on the socket and reads the answers here, matched by echo.

Store work (de-duplication, heartbeats, the socket's state) runs off the event loop, each piece
bounded: a report that cannot be stored in time gets 503, and the door goes on answering. An
event the bot's principal takes is queued in `state.db` in the transaction that de-duplicates it
(runtime/bot_events.py); the server's engine, on the same event loop, runs the queue
(engine/events.py): at most `--concurrency` runs at once, one at a time per conversation. Meta
events keep each bot's heartbeat and online state; a bot whose heartbeats stop for three
intervals is offline, and the server says so. The server that holds a bot's socket owns the bot
(`onebot_owner`, with an epoch) and sends, in order, the actions other processes put in its
outbox (`bot_upkeep.py`, with the bots' liveness). What happens is told to `on_record` as small
documents (the CLI prints them, each with its time).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..domain.bots import bot_names, load_bot
from ..domain.identities import DEFAULT_MAX_QUEUE, get_binding
from ..engine.aio import Threads
from ..engine.engine import Engine
from ..engine.events import BotEvents
from ..engine.handling import taken
from ..errors import FwError
from ..home.secrets import redact
from ..home.store import Home
from ..http_client import close_async_clients
from ..platform.adapters import onebot, onebot_state
from ..platform.adapters import onebot_relay as relay
from ..platform.adapters.onebot_reports import Report, read_report
from ..runtime import bot_events, work
from ..runtime.processes import stop_descendants
from ..state.store import StateStore, now_iso
from .bot_upkeep import ServedBot, Upkeep
from .gateway import run_gateway
from .http import DoorLimits, RefusalLog, bind, is_loopback, parse_json, parse_listen, serve, url_host

OnRecord = Callable[[dict[str, Any]], None]
STORE_SECONDS = 3.0  # for a report to be stored; past it the implementation is answered 503
STORE_BUSY_SECONDS = 2.5  # how long a door's writer waits for another process's transaction
STORE_THREADS = 4


class GaveUp(Exception):
    """The door stopped waiting for this store work: it rolls back."""


class Refused(Exception):
    """A request refused with this status; `why` is logged (rate-limited)."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


def plan_bots(home: Home, names: list[str], host: str) -> tuple[list[ServedBot], list[dict[str, Any]]]:
    """The bots to serve, checked, and what the server says of their doors at start."""
    if not names:
        raise FwError("usage", "name the bots to serve, or give --all", "e.g. fw bot serve qq, or fw bot serve --all")
    loopback = is_loopback(host)
    bots, notes, tokens, secrets_of = [], [], {}, {}
    for name in dict.fromkeys(names):
        bot = load_bot(home, name)
        if bot["adapter"] != "onebot":
            raise FwError("invalid", f"bot {name!r} uses the {bot['adapter']} adapter; `fw bot serve` is for onebot bots",
                          f"a local bot's users speak with `fw bot local say {name} --from USER TEXT`")
        stored = onebot.bot_secrets(home, name)
        token, secret = stored.get("access_token"), stored.get("secret")
        if token and token in tokens:
            raise FwError("invalid", f"bots {tokens[token]!r} and {name!r} share one access token, so a socket cannot tell them apart",
                          f"give one of them its own: `printf %s \"$TOKEN\" | fw bot set {name} --access-token-stdin`", field="access_token")
        if token:
            tokens[token] = name
        if secret and secret in secrets_of:
            raise FwError("invalid", f"bots {secrets_of[secret]!r} and {name!r} share one secret, so a signed report could be "
                          "taken for either of them", f"give one of them its own: `printf %s \"$SECRET\" | fw bot set {name} --secret-stdin`",
                          field="secret")
        if secret:
            secrets_of[secret] = name
        served = ServedBot(name, bot.get("url"), token, secret, onebot_state.status_view(home, name)["self_id"], True)
        if served.url and not secret and not loopback:
            why = (f"bot {name!r} has no secret, so anyone who can reach {host} could post it reports that run its agent; "
                   "unsigned reports are taken only on a loopback address")
            if len(names) == 1:
                raise FwError("invalid", why, f"set a secret (`printf %s \"$SECRET\" | fw bot set {name} --secret-stdin`) and the same "
                              "in the implementation's HTTP client, or listen on 127.0.0.1", field="listen")
            served.report_door, served.door_note = False, why
        elif not served.url and not secret:
            served.report_door = False  # a socket-only bot takes HTTP reports only when they are signed
        if served.door_note:
            notes.append({"type": "report_door_off", "bot": name, "why": served.door_note})
        bots.append(served)
    return bots, notes


class BotDoor:
    """The state the app's endpoints share: the bots, their engine, the store's threads."""

    def __init__(self, home: Home, bots: list[ServedBot], engine: Engine, on_record: OnRecord, limits: DoorLimits) -> None:
        self.home = home
        self.bots = bots
        self.engine = engine
        self.say = on_record
        self.limits = limits
        self._store = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="fw-bot-store")
        self._stores = threading.local()  # each store thread keeps its connection: opening one costs more than a report
        self._background: set[asyncio.Future[Any]] = set()
        self._over: set[str] = set()  # principals flagged for more waiting events than their max_queue
        self.upkeep = Upkeep(home, bots, on_record, self.stored_or_said)  # the outbox of the bots held here, their liveness

    def close(self) -> None:
        self._store.shutdown(wait=False, cancel_futures=True)

    # -- store work, off the loop ----------------------------------------------------------------
    async def stored(self, work: Callable[[StateStore], Any], seconds: float = STORE_SECONDS,
                     gave_up: threading.Event | None = None) -> Any:
        """`work(store)` on a store thread, within `seconds` (TimeoutError past them). With
        `gave_up`, the answer is the work's own outcome: past the time, `gave_up` is set (the
        work checks it before it commits, and rolls back) and the work is waited for; only a
        work that did not commit raises TimeoutError, so a 503 always means nothing was kept."""

        def run() -> Any:
            store = getattr(self._stores, "store", None)
            if store is None:
                store = self._stores.store = StateStore.open(self.home, busy_seconds=STORE_BUSY_SECONDS)
            try:
                return work(store)
            except FwError:
                self._stores.store = None  # opened afresh next time: the file may have been replaced
                store.close()
                raise

        pending = self._store.submit(run)
        job = asyncio.wrap_future(pending)
        if gave_up is None:
            return await asyncio.wait_for(job, seconds)
        done, _ = await asyncio.wait([job], timeout=seconds)
        if not done:
            if pending.cancel():  # still queued behind other store work: it never runs, nothing is kept
                raise TimeoutError
            gave_up.set()
        try:
            return await job  # a work that had started commits or rolls back within its busy timeout
        except GaveUp:
            raise TimeoutError from None

    async def stored_or_said(self, work: Callable[[StateStore], Any], what: str) -> Any:
        """Store work whose failure is only said (a heartbeat, the socket's state), never fatal."""
        try:
            return await self.stored(work)
        except (TimeoutError, asyncio.TimeoutError):
            self.say({"type": "ignored", "why": f"{what} could not be kept: state.db was busy"})
        except FwError as exc:
            self.say({"type": "ignored", "why": f"{what} could not be kept: {exc.message}"})
        return None

    # -- one report, from either door --------------------------------------------------------------
    async def take(self, bot: ServedBot, data: Any, link: onebot.SocketLink | None = None) -> bool:
        """Read, de-duplicate and hand on one report of `bot`; False when it could not be
        stored in time (the HTTP door answers 503)."""

        decision: dict[str, Any] = {}
        gave_up = threading.Event()

        def read_and_note(store: StateStore) -> tuple[Report, bool]:
            if gave_up.is_set():
                raise GaveUp
            report = read_report(data, bot.self_id, onebot_state.said_by_bot(store, bot.name))
            if report.kind != "event":
                return report, False
            decision.update(self._decide(bot, report.event))  # type: ignore[arg-type]
            with store.transaction():
                fresh = report.key is None or onebot_state.first_sight(store, bot.name, report.key)
                if fresh:
                    onebot_state.record_status(store, bot.name, last_event_at=now_iso(), self_id=bot.self_id or report.self_id)
                    if "principal" in decision:
                        bot_events.enqueue(store, bot.name, decision["principal"], report.event)  # type: ignore[arg-type]
                if gave_up.is_set():
                    raise GaveUp  # answered 503: roll back, so that the implementation's retry is the one kept
            if fresh and "principal" in decision:
                decision["waiting"] = bot_events.waiting_of(store, decision["principal"])
                work.changed()  # the engine looks at once
            return report, fresh

        report, fresh = read_report(data, bot.self_id), False  # said_by_bot only ever turns an event into one ignored
        try:
            if report.kind == "event":  # a heartbeat or a report fw ignores waits for no store work
                report, fresh = await self.stored(read_and_note, gave_up=gave_up)
        except (TimeoutError, asyncio.TimeoutError):
            self.say({"type": "busy", "bot": bot.name, "why": "state.db was busy: the report could not be stored in time"})
            return False
        except FwError as exc:
            self.say({"type": "busy", "bot": bot.name, "why": f"the report could not be stored: {exc.message}"})
            return False
        if bot.self_id is None and report.self_id and report.self_id.isdigit():
            bot.self_id = report.self_id
            self.say({"type": "learned", "bot": bot.name, "self_id": report.self_id})
        if report.kind == "meta":  # kept in the background: a heartbeat is answered at once, however busy state.db is
            task = asyncio.ensure_future(self._meta(bot, report, link))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        elif report.kind == "ignored":
            self.say({"type": "ignored", "bot": bot.name, "why": report.note})
        elif not fresh:
            self.say({"type": "duplicate", "bot": bot.name, "key": report.key, "event": report.event})
        elif "error" in decision:
            self.say({"type": "failed", "bot": bot.name, "event": report.event, "error": decision["error"]})
        elif "reason" in decision:
            self.say({"type": "handled", "bot": bot.name, "event": report.event, "handled": False, "reason": decision["reason"]})
        else:
            self._flag(bot, decision)
        return True

    def _decide(self, bot: ServedBot, event: dict[str, Any]) -> dict[str, Any]:
        """Whether the bot's principal takes the event: `{"principal", "max_queue"}`, `{"reason"}`
        (it does not), or `{"error"}` (it cannot be kept: a stored secret in it, no binding)."""
        home = getattr(self._stores, "home", None)
        if home is None:
            home = self._stores.home = Home(self.home.root)
        try:
            config = load_bot(home, bot.name)
            reason = taken(home, bot.name, config, event)
            if reason is not None:
                return {"reason": reason}
            binding = get_binding(home, config["principal"]) or {}
        except FwError as exc:
            return {"error": {"code": exc.code, "message": redact(exc.message), "hint": redact(exc.hint)}}
        return {"principal": config["principal"], "max_queue": binding.get("max_queue", DEFAULT_MAX_QUEUE)}

    def _flag(self, bot: ServedBot, decision: dict[str, Any]) -> None:
        """Say once when a principal has more events waiting than its binding's max_queue
        (nothing is dropped), and once when it is back under."""
        principal, waiting, limit = decision["principal"], decision.get("waiting", 0), decision["max_queue"]
        if waiting > limit and principal not in self._over:
            self._over.add(principal)
            self.say({"type": "queue_over", "bot": bot.name, "principal": principal, "waiting": waiting, "max_queue": limit})
        elif waiting <= limit and principal in self._over:
            self._over.discard(principal)
            self.say({"type": "queue_normal", "bot": bot.name, "principal": principal, "waiting": waiting, "max_queue": limit})

    async def _meta(self, bot: ServedBot, report: Report, link: onebot.SocketLink | None) -> None:
        if link is not None and report.online is not None:
            link.online = report.online
        values: dict[str, Any] = {"self_id": bot.self_id}
        if report.note == "heartbeat":
            values.update(last_heartbeat_at=now_iso(), heartbeat_online=int(report.online is not False),
                          heartbeat_seconds=report.heartbeat_seconds)

        def keep(store: StateStore) -> None:
            with store.transaction():
                onebot_state.record_status(store, bot.name, **values)
                if link is not None:
                    onebot_state.record_link(store, bot.name, online=link.online, self_id=link.self_id)

        await self.stored_or_said(keep, f"the state of bot {bot.name}")
        await self.upkeep.watch_once()

    # -- HTTP reports --------------------------------------------------------------------------
    async def report(self, request: Any) -> Any:
        from starlette.responses import Response

        try:
            bot, body = await self._checked_report(request)
            data = parse_json(body)
        except Refused as refused:
            self.limits.refused(refused.why, "report")
            return Response(status_code=refused.status)
        except ValueError as exc:
            if "deeper" in str(exc):  # a hostile document: refused
                self.limits.refused(f"a report {exc}", "report")
                return Response(status_code=400)
            self.say({"type": "ignored", "why": "a report that is not JSON"})  # answered, as a report fw cannot read is
            return Response(status_code=204)
        try:
            taken = await self.take(bot, data)
        except Exception as exc:  # a bug of fw's: said as one, and answered 500 (the implementation retries)
            self.say({"type": "internal", "bot": bot.name, "why": f"unexpected error {type(exc).__name__} on a report; "
                      "this is a bug in fw, please report it"})
            return Response(status_code=500)
        if not taken:
            return Response(status_code=503, headers={"Retry-After": "1"})
        return Response(status_code=204)

    async def _checked_report(self, request: Any) -> tuple[ServedBot, bytes]:
        """The bot a report is for, and its raw body, once it has passed every check that
        comes before parsing."""
        headers = request.headers
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json" or "origin" in headers:
            why = "a report from a web page (it carries an Origin)" if "origin" in headers else f"a report of type {media or 'none'}, not application/json"
            raise Refused(403, why)
        doors = [b for b in self.bots if b.report_door]
        if not doors:
            raise Refused(404, "a report to a server whose bots take none over HTTP")
        body = await request.body()
        return self._bot_of(doors, headers.get("x-self-id"), headers.get("x-signature"), body), body

    def _bot_of(self, doors: list[ServedBot], self_id: str | None, signature: str | None, body: bytes) -> ServedBot:
        """Which bot a report is for: by its X-Self-ID, or by which bot's secret signs it."""
        candidates = doors
        if self_id:
            known = [b for b in doors if b.self_id == self_id.strip()]
            candidates = known or [b for b in doors if b.self_id is None]
        signed = [b for b in candidates if b.secret and onebot.signature_ok(b.secret, body, signature)]
        if signed:
            return signed[0]
        if self_id and self_id.strip().isdigit():  # a new account behind a bot's implementation: its secret says which
            moved = [b for b in doors if b.secret and b not in candidates and onebot.signature_ok(b.secret, body, signature)]
            if moved:
                moved[0].self_id = self_id.strip()
                self.say({"type": "learned", "bot": moved[0].name, "self_id": moved[0].self_id})
                return moved[0]
        unsigned = [b for b in candidates if not b.secret]
        if len(unsigned) == 1:
            return unsigned[0]
        if unsigned:
            raise Refused(400, "a report that names no bot fw can tell (send X-Self-ID)")
        raise Refused(401, "a bad or missing X-Signature" if candidates else f"a report for a bot not served here (X-Self-ID {self_id})")

    # -- the reverse WebSocket --------------------------------------------------------------------
    async def socket(self, websocket: Any) -> None:
        token = onebot.handshake_token(websocket.headers.get("authorization"), websocket.query_params.get("access_token"))
        bot = next((b for b in self.bots if b.token and token and onebot.token_matches(b.token, token)), None)
        self_id, role = websocket.headers.get("x-self-id", "").strip(), websocket.headers.get("x-client-role")
        why = None
        if bot is None:
            why = "a wrong or missing access token" if token else "no access token (Authorization: Bearer, Token, or ?access_token=)"
        elif not self_id.isdigit():
            why = "no numeric X-Self-ID header: fw needs to know which account connects"
        elif role is not None and role.strip().lower() != "universal":
            why = (f"X-Client-Role {role.strip()!r}: fw needs one socket for both events and actions; "
                   "set the implementation's reverse WebSocket to Universal")
        if why is not None:
            self.limits.refused(why, "websocket")
            await websocket.close(code=1008)  # before accept: the handshake is answered 403
            return
        assert bot is not None
        await websocket.accept()
        loop = asyncio.get_running_loop()

        def send(text: str) -> None:  # from a worker thread, never from the loop
            asyncio.run_coroutine_threadsafe(websocket.send_text(text), loop).result(onebot.ACTION_TIMEOUT)

        if bot.self_id != self_id:
            bot.self_id = self_id
        link = onebot.SocketLink(bot.name, send, self_id, asend=websocket.send_text)
        onebot.LINKS.attach(link)
        await self.stored_or_said(lambda store: self._linked(store, bot, link), f"the socket of bot {bot.name}")
        epoch = await self.stored_or_said(lambda store: relay.take_ownership(store, bot.name, onebot_state.OWNER), f"the owner of bot {bot.name}")
        if epoch is not None:
            self.upkeep.owned(bot.name, epoch)
        self.say({"type": "connected", "bot": bot.name, "self_id": link.self_id})
        work.changed()  # its waiting events can run now
        try:
            await self._frames(websocket, bot, link)
        finally:
            if not onebot.LINKS.detach(link):
                await self.stored_or_said(lambda store: onebot_state.forget_link_in(store, bot.name), f"the socket of bot {bot.name}")
                if epoch is not None and self.upkeep.let_go(bot.name, epoch):
                    await self.stored_or_said(lambda store: relay.release_ownership(store, bot.name, onebot_state.OWNER, epoch),
                                              f"the owner of bot {bot.name}")
            self.say({"type": "disconnected", "bot": bot.name, "self_id": link.self_id})

    @staticmethod
    def _linked(store: StateStore, bot: ServedBot, link: onebot.SocketLink) -> None:
        with store.transaction():
            onebot_state.record_link(store, bot.name, online=link.online, self_id=link.self_id)
            onebot_state.record_status(store, bot.name, self_id=link.self_id)

    async def _frames(self, websocket: Any, bot: ServedBot, link: onebot.SocketLink) -> None:
        """Read the socket: answers to actions at once; reports in arrival order, by one
        consumer, so that a busy state.db holds back the reports and never the answers."""
        reports: asyncio.Queue[Any] = asyncio.Queue()
        consumer = asyncio.ensure_future(self._consume(reports, bot, link))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None:
                    text = (message.get("bytes") or b"").decode("utf-8", "replace")
                try:
                    frame = parse_json(text)
                except ValueError as exc:
                    self.limits.refused(f"a frame of bot {bot.name} that is not JSON fw reads ({exc}): skipped", "frame")
                    continue
                if isinstance(frame, dict) and "echo" in frame and "post_type" not in frame:
                    if not link.answer(frame):
                        self.say({"type": "ignored", "bot": bot.name, "why": "an answer no action waits for"})
                    continue
                reports.put_nowait(frame)
        finally:
            reports.put_nowait(None)
            self._background.add(consumer)  # the reports already read are still handled
            consumer.add_done_callback(self._background.discard)

    async def _consume(self, reports: asyncio.Queue[Any], bot: ServedBot, link: onebot.SocketLink) -> None:
        while (frame := await reports.get()) is not None:
            try:
                taken = await self.take(bot, frame, link)
            except Exception as exc:  # a bug of fw's: said as one; the socket goes on
                self.say({"type": "internal", "bot": bot.name, "why": f"unexpected error {type(exc).__name__} on a frame; "
                          "this is a bug in fw, please report it"})
                continue
            if not taken:
                self.say({"type": "failed", "bot": bot.name, "why": "a frame was skipped: state.db was busy"})

def build_app(door: BotDoor) -> Any:
    from starlette.applications import Starlette
    from starlette.routing import Route, WebSocketRoute

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        fresh = asyncio.ensure_future(door.upkeep.keep_fresh())
        outbox = asyncio.ensure_future(door.upkeep.relay_outbox())
        engine = asyncio.ensure_future(door.engine.serve())
        try:
            yield
        finally:
            fresh.cancel()
            outbox.cancel()
            if not engine.done():
                await door.engine.stop()  # done already as the server began to stop (serve_bots); waiting events stay queued
                engine.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await engine
            await close_async_clients()

    routes = [Route("/", door.report, methods=["POST"]), WebSocketRoute(onebot.WEBSOCKET_PATH, door.socket)]
    return Starlette(routes=routes, lifespan=lifespan)


def event_record(event: dict[str, Any]) -> dict[str, Any] | None:
    """What the server says of an event run that ended (the engine's `ended`)."""
    if event.get("type") != "ended" or event.get("kind") != "event":
        return None
    base = {"bot": event.get("bot"), "event": event.get("event")}
    status = event["status"]
    if status == "done":
        return {"type": "handled", **base, "handled": True, "run_id": event.get("run_id"), "status": event.get("run_status"),
                "tool_calls": event.get("tool_calls", [])}
    if status == bot_events.REFUSED:
        return {"type": "handled", **base, "handled": False, "reason": event.get("reason")}
    error = event.get("error")
    if not isinstance(error, dict):
        code, _, message = str(error or status).partition(": ")
        error = {"code": code if message else status, "message": message or code, "hint": ""}
    return {"type": "failed", **base, "error": error, **({"run_id": event["run_id"]} if event.get("run_id") else {})}


def stopped_record(home: Home, door: BotDoor) -> dict[str, Any]:
    door.close()
    waiting = 0
    with contextlib.suppress(FwError), StateStore.open(home) as store:
        waiting = bot_events.waiting(store, [b.name for b in door.bots])
    stopped = {"type": "stopped", "ended_runs": door.engine.ended_runs, "waiting": waiting}
    door.say(stopped)
    return stopped


def all_bots(home: Home) -> list[str]:
    """Every onebot bot of the home (`--all`)."""
    names = []
    for name in bot_names(home):
        with contextlib.suppress(FwError):
            if load_bot(home, name)["adapter"] == "onebot":
                names.append(name)
    if not names:
        raise FwError("not_found", "the home has no onebot bots to serve", "add one: `fw bot add NAME --adapter onebot --principal P ...`")
    return names


def serve_bots(home: Home, names: list[str], listen: str, concurrency: int, on_record: OnRecord, limits: DoorLimits | None = None) -> None:
    """Serve the bots until Ctrl-C or SIGTERM. Stopped with no run in flight, it returns; with
    runs in flight they are ended, their processes stopped, and KeyboardInterrupt comes
    through (`interrupted`)."""
    host, port = parse_listen(listen)
    bots, notes = plan_bots(home, names, host)
    limits = limits or DoorLimits(refused=RefusalLog(lambda what, why: on_record({"type": "refused", "what": what, "why": why})))
    threads = Threads(name="fw-bot-engine")
    # an external runner's run gets its own gateway, as with `fw event handle`
    urls = {b.name: b.url for b in bots}
    source = BotEvents(home, list(urls), run_gateway, ready=lambda name: bool(urls[name]) or onebot.LINKS.current(name) is not None)
    engine = Engine(home, [source], concurrency=concurrency, threads=threads,
                    on_event=lambda event: _say_ended(on_record, event), role="bot")  # checks --concurrency before the port is taken
    sock = bind(host, port)
    door = BotDoor(home, bots, engine, on_record, limits)
    bound = sock.getsockname()[1]
    base = f"{url_host(host)}:{bound}"
    listening = {"type": "listening", "bot": bots[0].name, "bots": [_door_of(b) for b in bots], "http": f"http://{base}/",
                 "websocket": f"ws://{base}{onebot.WEBSOCKET_PATH}", "signed": all(b.secret for b in bots if b.report_door),
                 "token": all(b.token for b in bots), "loopback": is_loopback(host),
                 "waiting": _waiting(home, [b.name for b in bots])}
    try:
        serve(build_app(door), sock, on_started=lambda: [on_record(r) for r in (listening, *notes)], limits=limits,
              before_shutdown=engine.stop)  # runs in flight ended while the implementation is still connected
    except KeyboardInterrupt:
        stopped = stopped_record(home, door)
        if stopped["ended_runs"] or engine.stopped_starting:
            stop_descendants()  # what their blocking tool calls or starts began (an `exec` program, an MCP server) goes too
        if stopped["ended_runs"]:
            raise  # runs were in flight: `interrupted`, as the contract says
        return
    finally:
        threads.close()
        door.close()


def _say_ended(on_record: OnRecord, event: dict[str, Any]) -> None:
    record = event_record(event)
    if record is not None:
        on_record(record)


def _waiting(home: Home, bots: list[str]) -> int:
    """Events left waiting by an earlier server of these bots (the engine runs them first)."""
    with contextlib.suppress(FwError), StateStore.open(home) as store:
        return bot_events.waiting(store, bots)
    return 0


def _door_of(bot: ServedBot) -> dict[str, Any]:
    doc = {"bot": bot.name, "report_door": bot.report_door, "signed": bool(bot.secret), "token": bool(bot.token), "self_id": bot.self_id}
    if bot.door_note:
        doc["why"] = bot.door_note
    return doc
