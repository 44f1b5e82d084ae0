"""The runtime's pages: principals and bindings, bots, sessions and their messages, runs (run
an agent, start a run and call its tools by hand, end it), the audit log, tasks and the queue
(`fw status`, and `fw dispatch --once`).

Each reads and writes through the functions the CLI and the tools use (`principal_create`,
`agent_bind`, `set_binding_enabled`, `bot_add`, `message_post`, `start_run`, `call_tool`,
`run_end`, `dispatch`, `audit_page`, ...): the page decides nothing itself. Long lists are paged
(`?page=N`, PAGE rows a page); a run's and a session's page reload themselves every few seconds
while something in them is live.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...domain.identities import agent_bind, agent_unbind, binding_list, operator, principal_create, principal_list
from ...domain.resources import names
from ...domain.run_records import RUN_STATUSES, run_end, run_ids, run_list, run_prune, run_show
from ...domain.tool_types import Caller
from ...engine.agent_run import arun_agent
from ...engine.aio import Threads
from ...engine.dispatch import dispatch
from ...engine.events import remove_bot
from ...engine.handling import local_say
from ...errors import FwError
from ...liveness import machine_of, pid_of
from ...platform.bots import bot_add, bot_list, bot_set, bot_show, local_platform
from ...runtime.principals import principal_delete_plan, principal_remove
from ...runtime.sessions import message_list, message_post, session_create, session_list, set_binding_enabled
from ...runtime.status import work_status
from ...runtime.tasks import task_list
from ...runtime.turns import turn_list
from ...tools.audit import audit_list, audit_page
from ...tools.service import call_tool, list_tools, start_run
from ..gateway import run_gateway
from . import forms
from .forms import Form, checked_form

PAGE = 50  # rows of a long list a page
LEASES = {"": "1 hour (the default)", "600": "10 minutes", "43200": "12 hours", "86400": "1 day", "604800": "1 week"}
DOOR = "fw web"
WHY_NOT = {  # why a message said to a local bot started no run, in the page's words
    "event_not_selected": "the agent its principal runs does not take this kind of event (its events field)",
    "binding_disabled": "the binding of its principal is disabled: enable it on the Principals page",
    "not_mentioned": "the message does not mention the bot, and its principal's binding takes only messages that do",
}
NOTES = ("page", "saved", "posted", "pruned", "ended", "started")  # what a page says once, not kept in its links


def paged(rows: list[Any], request: Request, newest_first: bool = True) -> tuple[list[Any], dict[str, Any]]:
    """One page of `rows` (newest first by default) and what the page's links need."""
    rows = list(reversed(rows)) if newest_first else rows
    number = page_number(request)
    pages = max(1, (len(rows) + PAGE - 1) // PAGE)
    number = min(number, pages)
    keep = {k: v for k, v in request.query_params.items() if k not in NOTES and v}
    return rows[(number - 1) * PAGE: number * PAGE], {"number": number, "pages": pages, "total": len(rows), "keep": keep}


def plan_words(name: str, item: str) -> str:
    """One item of a principal's delete plan, done, in the page's words."""
    kind, _, what = item.partition("/")
    return {"session": f"{name} left session {what}", "memory": f"the memory of {name} was forgotten",
            "bot": f"bot {what} was deleted"}.get(kind, f"principal {name} was deleted")


def called(home: Any, caller: Caller, form: Form) -> tuple[dict[str, str], str | None, FwError | None]:
    """A tool called by hand from a page's form (`tool`, `args` as JSON text), as `fw tool
    call` calls it: (what was typed, the result as JSON text or None, the refusal or None).
    A refusal is shown at the page's fields: a tool's own field names are not on the page."""
    values = {"tool": forms.one(form, "tool"), "args": (form.get("args") or [""])[0]}
    try:
        if not values["tool"]:
            raise FwError("invalid", "choose the tool to call", "", field="tool")
        try:
            args = json.loads(values["args"] or "{}")
        except ValueError as exc:
            raise FwError("invalid", f"the arguments are not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                          'a JSON object, e.g. {"kind": "agent"}', field="args") from None
        except RecursionError:
            raise FwError("invalid", "the arguments are nested too deeply", 'a JSON object, e.g. {"kind": "agent"}', field="args") from None
        return values, json.dumps(call_tool(home, caller, values["tool"], args), indent=2, ensure_ascii=False), None
    except FwError as exc:
        exc.extra["field"] = "args" if exc.code == "invalid" and values["tool"] else "tool"
        return values, None, exc


def page_number(request: Request) -> int:
    """The page a list is asked for (`?page=N`, from 1)."""
    try:
        return min(max(1, int(request.query_params.get("page", "1"))), 1_000_000)
    except ValueError:
        return 1


def done_run(error: FwError) -> bool:
    """Whether a failure came after the run had started (its page says what happened)."""
    return bool(error.extra.get("run_id"))


def refused_run(error: FwError, values: dict[str, Any]) -> FwError:
    """A run refused before it started, shown at the field it is about: the message, or else
    the principal or agent chosen (whose model or provider could not be used, say)."""
    if error.message.startswith(("a message", "the message")):
        field = "message"
    elif values["principal"] and (not values["agent"] or "principal" in error.message):
        field = "principal"
    else:
        field = "agent"
    if error.extra.get("reason") == "no_key":  # the domain's hint names the command line's flag
        provider = error.extra.get("provider")
        error = FwError(error.code, error.message, f"type the key in the api_key field of the provider's page: /providers/{provider}/edit",
                        **error.extra)
    return at_field(error, field)


def at_field(error: FwError, field: str) -> FwError:
    """The error shown at `field` when it names none of its own (the domain speaks of values,
    the page of its fields)."""
    if field and not error.extra.get("field"):
        error.extra["field"] = field
    return error


class Flash:
    """What an action's page shows once after its redirect (post, redirect, get: reloading the
    page shown never does the action again): kept in this process, taken once, the oldest
    dropped past KEPT."""

    KEPT = 200

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._kept: dict[str, Any] = {}

    def put(self, value: Any) -> str:
        import secrets

        key = secrets.token_urlsafe(9)
        with self._lock:
            self._kept[key] = value
            while len(self._kept) > self.KEPT:
                self._kept.pop(next(iter(self._kept)))
        return key

    def take(self, key: str | None) -> Any:
        with self._lock:
            return self._kept.pop(key, None) if key else None


class RuntimePages:
    """The runtime's pages, rendered through the app's `Pages` (its templates, its redaction)."""

    def __init__(self, pages: Any) -> None:
        self.pages = pages
        self._threads: Threads | None = None  # for the runs started from the page, made on the first
        self.flash = Flash()

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        return self.pages.render(request, template, status, **context)

    # -- principals and bindings ------------------------------------------------------------
    def principals(self, request: Request, form: Form | None) -> Response:
        home = self.pages.home()
        error, values = None, {"name": "", "kind": "agent", "principal": "", "agent": ""}
        if form is not None:
            action = forms.one(form, "action")
            values.update({k: forms.one(form, k) for k in values})
            try:
                if action == "create":
                    principal_create(home, values["name"], values["kind"])
                elif action == "bind":
                    agent_bind(home, values["principal"], values["agent"], by=operator(DOOR))
                elif action in ("enable", "disable"):
                    set_binding_enabled(home, values["principal"], action == "enable", by=operator(DOOR))
                elif action == "unbind":
                    agent_unbind(home, values["principal"])
                else:
                    raise FwError("invalid", "the form asked for nothing this page does", "use the page's buttons")
                return RedirectResponse("/principals?saved=1", status_code=303)
            except FwError as exc:
                default = "name" if action == "create" else "agent" if "agent" in exc.message else "principal"
                error = at_field(exc, default if action in ("create", "bind") else "")
        errors, alerts, status = self.pages.failed(error)
        bindings = {b["principal"]: b for b in binding_list(home)["bindings"]}
        rows = [{**p, "binding": bindings.get(p["name"])} for p in principal_list(home)["principals"]]
        shown, page = paged(rows, request, newest_first=False)
        agents = sorted(names(home, "agent"))
        unbound = [r["name"] for r in rows if r.get("kind") == "agent" and r["binding"] is None]
        return self.render(request, "principals.html", status, rows=shown, page=page, agents=agents, unbound=unbound,
                           values=values, errors=errors, alerts=alerts, saved=request.query_params.get("saved") == "1")

    def principal_delete(self, request: Request, form: Form | None, name: str) -> Response:
        """`fw principal delete NAME --recursive`: the plan (its session memberships, memory and
        bots, then the principal), carried out only when the form confirms exactly the plan
        computed now; a plan changed meanwhile is shown again, and nothing is deleted."""
        home = self.pages.home()
        error = None
        if form is not None:
            try:
                done = principal_remove(home, name, recursive=True, confirm=forms.one(form, "confirm"))
                deleted = done["deleted"] if isinstance(done.get("deleted"), list) else [f"principal/{name}"]
                return self.render(request, "deleted.html", deleted=deleted, ended_runs=done.get("ended_runs") or [], back="/principals",
                                   said=[plan_words(name, item) for item in deleted])
            except FwError as exc:
                if exc.code != "stale_confirmation":
                    raise
                error = exc
        try:
            plan = principal_delete_plan(home, name)
        except FwError as exc:
            if exc.code != "in_use":
                raise
            return self.render(request, "principal_delete.html", 409, name=name, plan=None, bound=True,
                               alerts=[{"field": "", "code": exc.code, "message": f"Principal {name} runs an agent: remove its binding first.",
                                        "hint": "Removing the binding stops its later runs; its principal stays until you delete it here."}])
        _, alerts, status = self.pages.failed(error)
        if error is not None:
            alerts = [{**alerts[0], "message": "The plan changed since it was shown; nothing was deleted. Here is the plan now.", "hint": ""}]
        return self.render(request, "principal_delete.html", status, name=name, plan=plan, confirm=",".join(plan), bound=False,
                           alerts=alerts)

    # -- bots -----------------------------------------------------------------------------
    def bots(self, request: Request, form: Form | None) -> Response:
        home = self.pages.home()
        error, values = None, {"name": "", "adapter": "onebot", "principal": "", "url": ""}
        if form is not None:
            values.update({k: forms.one(form, k) for k in values})
            token = forms.one(form, "access_token") or None
            try:
                if not values["principal"]:
                    raise FwError("invalid", "choose the principal whose runs handle the bot's events", "", field="principal")
                bot_add(home, values["name"], values["adapter"], values["principal"], url=values["url"] or None, access_token=token)
                return RedirectResponse("/bots?saved=1", status_code=303)
            except FwError as exc:
                error = at_field(exc, "access_token" if "token" in exc.message else "principal" if "principal" in exc.message else "name")
        errors, alerts, status = self.pages.failed(error)
        bots = bot_list(home)["bots"]
        principals = [p["name"] for p in principal_list(home)["principals"] if p.get("kind") == "agent"]
        return self.render(request, "bots.html", status, bots=bots, principals=principals, values=values, errors=errors,
                           alerts=alerts, saved=request.query_params.get("saved") == "1",
                           removed=(self.flash.take(request.query_params.get("shown")) or {}).get("removed"))

    def bot(self, request: Request, form: Form | None, name: str) -> Response:
        """One bot: its url, and its access token and signing secret, which are write-only (an
        empty field keeps what is stored); a local bot: a message said to it as a user, and the
        log of what it did on its platform (`fw bot local say` and `log`)."""
        home = self.pages.home()
        shown = bot_show(home, name)
        error, values = None, {"url": shown.get("url") or ""}
        said = {"from": "", "group": "", "text": "", "no_run": ""}
        if form is not None and forms.one(form, "action") == "remove":
            remove_bot(home, name)  # as `fw bot remove`: its file, stored secrets and waiting events go
            return RedirectResponse(f"/bots?shown={self.flash.put({'removed': name})}", status_code=303)
        if form is not None and forms.one(form, "action") == "say":
            said = {k: forms.one(form, k) for k in said}
            said["text"] = (form.get("text") or [""])[0]
            try:
                return self._say(home, name, said)
            except FwError as exc:
                error = at_field(exc, "from" if "user" in exc.message else "group" if "group" in exc.message else "text")
        elif form is not None:
            forms.require_shown(form, ("url", "access_token", "secret"))
            values = {"url": forms.one(form, "url")}
            url = values["url"] if values["url"] != (shown.get("url") or "") else None
            try:
                bot_set(home, name, url=url, access_token=forms.one(form, "access_token") or None, secret=forms.one(form, "secret") or None)
                return RedirectResponse(f"/bots/{name}?saved=1", status_code=303)
            except FwError as exc:
                error = at_field(exc, "secret" if "secret" in exc.message else "access_token" if "token" in exc.message else "url")
        errors, alerts, status = self.pages.failed(error)
        log = local_platform(home, name).log()["actions"][-PAGE:] if shown["adapter"] == "local" else None
        return self.render(request, "bot.html", status, bot=shown, values=values, said=said, log=log, errors=errors, alerts=alerts,
                           saved=request.query_params.get("saved") == "1", note=WHY_NOT.get(request.query_params.get("unhandled", "")))

    def _say(self, home: Any, name: str, said: dict[str, str]) -> Response:
        """The message said, and handled as its event: to the run's page when one was started
        (with "start the run only", its tools are then called by hand there), else back to the
        bot's page, which says why no run was started."""
        if not said["from"]:
            raise FwError("invalid", "say who says it: a user's name", "e.g. alice (created on first use)", field="from")
        if not said["text"].strip():
            raise FwError("invalid", "the message is empty", "write what the user says", field="text")
        doc = local_say(home, name, said["from"], said["text"], said["group"] or None, run=not said["no_run"], gateway=run_gateway)
        run_id = (doc.get("run") or {}).get("run_id") or doc.get("run_id")
        if run_id:
            return RedirectResponse(f"/runs/{run_id}", status_code=303)
        return RedirectResponse(f"/bots/{name}?{urlencode({'unhandled': doc.get('reason') or ''})}", status_code=303)

    # -- sessions ---------------------------------------------------------------------------
    def sessions(self, request: Request, form: Form | None) -> Response:
        home = self.pages.home()
        error, values = None, {"name": "", "title": "", "members": []}
        if form is not None:
            values = {"name": forms.one(form, "name"), "title": forms.one(form, "title"), "members": forms.many(form, "members")}
            try:
                session_create(home, values["name"], values["members"], values["title"] or None, created_by=operator(DOOR))
                return RedirectResponse(f"/sessions/{values['name']}", status_code=303)
            except FwError as exc:
                error = at_field(exc, "members" if "member" in exc.message else "name")
        errors, alerts, status = self.pages.failed(error)
        shown, page = paged(session_list(home)["sessions"], request, newest_first=False)
        principals = [p["name"] for p in principal_list(home)["principals"] if p.get("kind")]
        return self.render(request, "sessions.html", status, sessions=shown, page=page, principals=principals, values=values,
                           errors=errors, alerts=alerts)

    def session(self, request: Request, form: Form | None, name: str) -> Response:
        home = self.pages.home()
        error, values = None, {"author": "", "text": ""}
        if form is not None:
            values = {"author": forms.one(form, "author"), "text": (form.get("text") or [""])[0]}
            try:
                message_post(home, name, values["author"], values["text"])
                return RedirectResponse(f"/sessions/{name}?posted=1", status_code=303)
            except FwError as exc:
                error = at_field(exc, "author" if values["author"] in exc.message or "author" in exc.message else "text")
        errors, alerts, status = self.pages.failed(error)
        doc = message_list(home, name)
        shown, page = paged(doc["messages"], request)
        turns = turn_list(home, session=name)["turns"]
        live = any(t["status"] in ("pending", "running") for t in turns)
        serving = bool(work_status(home).get("serving")) if live else True
        members = next((s["members"] for s in session_list(home)["sessions"] if s["name"] == name), [])
        users = [p["name"] for p in principal_list(home)["principals"] if p.get("kind") == "user" and p["name"] in members]
        return self.render(request, "session.html", status, name=name, messages=list(reversed(shown)), page=page, turns=turns[-10:],
                           live=live, serving=serving, users=users, values=values, errors=errors, alerts=alerts,
                           posted=request.query_params.get("posted") == "1")

    # -- runs -------------------------------------------------------------------------------
    def runs(self, request: Request, form: Form | None, error: FwError | None = None,
             values: dict[str, Any] | None = None) -> Response:
        home = self.pages.home()
        errors, alerts, code = self.pages.failed(error)
        query = {k: request.query_params.get(k, "") for k in ("agent", "principal", "status")}
        wanted = query["status"] if query["status"] in RUN_STATUSES else None
        rows = run_list(home, status=wanted, agent=query["agent"] or None)["runs"]
        if query["principal"]:
            rows = [r for r in rows if r.get("identity") == query["principal"]]
        shown, page = paged(rows, request)
        agents = sorted(names(home, "agent"))
        principals = [p["name"] for p in principal_list(home)["principals"] if p.get("kind") == "agent"]
        pruned = request.query_params.get("pruned")
        return self.render(request, "runs.html", code, runs=shown, page=page, filters=query, statuses=RUN_STATUSES, agents=agents,
                           pruned=int(pruned) if (pruned or "").isdigit() else None,
                           principals=principals, values=values or {"agent": "", "principal": "", "message": ""}, errors=errors,
                           alerts=alerts)

    def run_start(self, request: Request, form: Form | None) -> Response:
        """`fw run start` from the page: a managed run as a principal, or an explicit run of an
        agent, that lives by its lease (its page then calls its tools by hand)."""
        home = self.pages.home()
        error, values = None, {"agent": "", "principal": "", "lease": ""}
        if form is not None:
            values = {k: forms.one(form, k) for k in values}
            try:
                if bool(values["agent"]) == bool(values["principal"]):
                    raise FwError("invalid", "choose a principal (a managed run) or an agent (an explicit run), one of the two",
                                  "a managed run runs the agent its principal's binding names", field="principal")
                if values["lease"] not in LEASES:
                    raise FwError("invalid", "choose one of the leases offered", "", field="lease")
                doc = start_run(home, principal=values["principal"] or None, agent=values["agent"] or None,
                                lease=int(values["lease"]) if values["lease"] else None)
                return RedirectResponse(f"/runs/{doc['run_id']}?started=1", status_code=303)
            except FwError as exc:
                error = at_field(exc, "lease" if "lease" in exc.message else "agent" if values["agent"] else "principal")
        errors, alerts, status = self.pages.failed(error)
        principals = [p["name"] for p in principal_list(home)["principals"] if p.get("kind") == "agent"]
        return self.render(request, "run_start.html", status, values=values, leases=LEASES, agents=sorted(names(home, "agent")),
                           principals=principals, errors=errors, alerts=alerts)

    def run_prune(self, request: Request, form: Form | None) -> Response:
        """`fw run prune --ended`: the records of runs ended by hand or by their runner are
        dropped (active runs, runs whose lease ran out and damaged records are kept)."""
        if form is None:
            return RedirectResponse("/runs", status_code=303)
        done = run_prune(self.pages.home(), ended_only=True)
        return RedirectResponse(f"/runs?pruned={len(done['pruned'])}", status_code=303)

    async def run_agent(self, request: Request) -> Response:
        """`fw agent run` from the page: the run is started, its model loop runs on this
        server's event loop (waiting holds no thread), the run ends, and its page shows the
        answer. A refusal shows at its field and starts nothing."""
        form = await checked_form(request)
        values = {"agent": forms.one(form, "agent"), "principal": forms.one(form, "principal"), "message": (form.get("message") or [""])[0]}
        try:
            if not values["agent"] and not values["principal"]:
                raise FwError("invalid", "choose the agent to run, or a principal (it runs the agent its binding names)", "", field="agent")
            if not values["message"].strip():
                raise FwError("invalid", "the message to the agent is empty", "write what the agent should do", field="message")
            if self._threads is None:
                self._threads = Threads(4, name="fw-web-run")
            done = await arun_agent(self.pages.home(), values["message"], agent=values["agent"] or None, principal=values["principal"] or None,
                                    gateway=run_gateway, conversation=None if values["principal"] else "new", run_sync=self._threads)
        except Exception as exc:  # never a traceback on a page
            if not isinstance(exc, FwError):
                error = {"code": "internal", "message": f"unexpected error: {type(exc).__name__}", "hint": "this is a bug in fw; please report it"}
                return await run_in_threadpool(self.pages.render, request, "error.html", 500, error=error)
            if not done_run(exc):
                return await run_in_threadpool(self.runs, request, None, refused_run(exc, values), values)
            return RedirectResponse(f"/runs/{exc.extra['run_id']}", status_code=303)
        return RedirectResponse(f"/runs/{done['run_id']}?shown={self.flash.put({'done': done})}", status_code=303)

    def run(self, request: Request, form: Form | None, run_id: str, done: dict[str, Any] | None = None) -> Response:
        """One run: its snapshot, its tool calls, and two forms while it is active: end it, or
        call one of its tools by hand (as `fw tool call --run RUN`: authorised against its
        snapshot, validated and audited as the run)."""
        home = self.pages.home()
        error, values, result = None, {"tool": "", "args": "{}"}, None
        if form is not None:
            action = forms.one(form, "action")
            if action == "end":
                run_end(home, run_id)
                return RedirectResponse(f"/runs/{run_id}?ended=1", status_code=303)
            if action != "call":
                raise FwError("invalid", "the form asked for nothing this page does", "use the page's buttons")
            whole = run_show(home, run_id)["run_id"]
            values, result, error = called(home, Caller("run", run_id=whole), form)
            if error is None:
                return RedirectResponse(f"/runs/{whole}?shown={self.flash.put({'values': values, 'result': result})}", status_code=303)
        shown = self.flash.take(request.query_params.get("shown")) or {}
        values, result, done = shown.get("values", values), shown.get("result", result), shown.get("done", done)
        errors, alerts, status = self.pages.failed(error)
        record = run_show(home, run_id)
        calls = audit_list(home, 500, run=record["run_id"])["entries"]
        described = None
        if record["status"] == "active":  # what each of its tools does and takes, as `fw tool list --run` says
            try:
                described = list_tools(home, Caller("run", run_id=record["run_id"]))["tools"]
            except FwError:
                described = None  # ended or damaged meanwhile: its names are shown
        return self.render(request, "run.html", status, run=record, calls=calls, live=record["status"] == "active", described=described,
                           ended=request.query_params.get("ended") == "1", started=request.query_params.get("started") == "1",
                           done=done, values=values, result=result, errors=errors, alerts=alerts)

    def tools(self, request: Request, form: Form | None) -> Response:
        """The Manager's tools (`fw tool list --manager`), and one called by hand as the Manager
        (`fw tool call --manager`)."""
        home = self.pages.home()
        values, result, error = {"tool": "", "args": "{}"}, None, None
        if form is not None:
            if forms.one(form, "action") != "call":
                raise FwError("invalid", "the form asked for nothing this page does", "use the page's buttons")
            values, result, error = called(home, Caller("manager"), form)
            if error is None:
                return RedirectResponse(f"/tools?shown={self.flash.put({'values': values, 'result': result})}", status_code=303)
        shown = self.flash.take(request.query_params.get("shown")) or {}
        values, result = shown.get("values", values), shown.get("result", result)
        errors, alerts, status = self.pages.failed(error)
        tools = list_tools(home, Caller("manager"))["tools"]
        return self.render(request, "tools.html", status, tools=tools, names=[t["name"] for t in tools], values=values, result=result,
                           errors=errors, alerts=alerts)

    # -- the audit log, tasks, the queue ------------------------------------------------------
    def audit(self, request: Request, form: Form | None) -> Response:
        query = {k: request.query_params.get(k, "").strip() for k in ("run", "tool")}
        number = page_number(request)
        doc = audit_page(self.pages.home(), number, PAGE, run=query["run"] or None, tool=query["tool"] or None)
        page = {"number": number, "pages": None, "older": doc["older"], "keep": {k: v for k, v in query.items() if v}}
        # a run's page exists while its record does: a run pruned since (`fw run prune`) is named, not linked
        named_runs = {e["run_id"] for e in doc["entries"] if e.get("run_id")}
        recorded = named_runs & set(run_ids(self.pages.home())) if named_runs else set()
        return self.render(request, "audit.html", entries=doc["entries"], page=page, filters=query, recorded=recorded)

    def tasks(self, request: Request, form: Form | None) -> Response:
        shown, page = paged(task_list(self.pages.home())["tasks"], request)
        return self.render(request, "tasks.html", tasks=shown, page=page)

    def status(self, request: Request, form: Form | None) -> Response:
        """The queue, as `fw status`; its form runs it once, as `fw dispatch --once`: every
        pending turn and task is run (each principal's in order), and the page says what came of it."""
        if form is not None:
            if forms.one(form, "action") != "dispatch_once":
                raise FwError("invalid", "the form asked for nothing this page does", "use the page's buttons")
            ran = dispatch(self.pages.home(), once=True, gateway=run_gateway)
            return RedirectResponse(f"/status?shown={self.flash.put(ran)}", status_code=303)
        ran = self.flash.take(request.query_params.get("shown"))
        return self.render(request, "status.html", queue=work_status(self.pages.home()), ran=ran, machine_of=machine_of, pid_of=pid_of)
