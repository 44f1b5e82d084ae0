"""The web page as a Starlette app: `create_app(home)` gives it, with its routes listed below.

Each page reads through the domain functions the CLI uses and saves through them too
(`resource_write`, `agent_edit`, `resource_delete`, `provider_models`, and the tool sources
for the tools an agent's MCP servers and skills give). A page decides nothing itself: what
is refused is refused there, and the page shows the error beside its field.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ...domain.agents import agent_edit, agent_show, sandbox_warnings
from ...domain.catalogue import EVENT_TYPES
from ...domain.check import check_home
from ...domain.deletion import resource_delete
from ...domain.plugins import enabled_plugins
from ...domain.probes import provider_models
from ...domain.projection import PLUGIN_PREFIX
from ...domain.resources import names, resource_list, resource_read, resource_write
from ...errors import FwError
from ...home import secrets
from ...home.kinds import BUILTIN_GROUPS, DEFAULT_CATEGORY, KINDS, check_name
from ...home.store import Home
from ...runtime.plugin_admin import plugin_warnings
from ...tools.service import catalogue_now, tools_offered_now
from . import forms
from .forms import Form, checked_form
from .runtime_pages import RuntimePages
from .signin import SignIn, SignInMiddleware

HERE = Path(__file__).resolve().parent
HEADERS = {
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
}
STATUS = {"not_found": 404, "exists": 409, "conflict": 409, "protected": 409, "stale_confirmation": 409,
          "not_empty": 409, "in_use": 409, "unavailable": 502, "denied": 403}
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
Handler = Callable[..., Response]


def create_app(home: Home, *, signin: SignIn | None = None, allowed_hosts: list[str] | None = None) -> Starlette:
    """The page for one home. Requests must name an allowed host (loopback by default) and
    carry the cookie `signin` gives for its one-time token."""
    pages = Pages(home.root)
    runtime = RuntimePages(pages)
    signin = signin or SignIn()
    routes = [
        pages.route("/", pages.overview),
        pages.route("/agents", pages.agents),
        pages.route("/agents/new", pages.agent_new, post=True),
        pages.route("/agents/tools", pages.agent_tools_part),
        pages.route("/agents/event-tools", pages.event_tools_part),
        pages.route("/agents/{name}/edit", pages.agent_edit, post=True),
        pages.route("/providers", pages.providers),
        pages.route("/providers/new", pages.provider_new, post=True),
        pages.route("/providers/{name}/edit", pages.provider_edit, post=True),
        pages.route("/models/new", pages.model_new, post=True),
        pages.route("/models/ids", pages.model_ids_part),
        pages.route("/models/{name}/edit", pages.model_edit, post=True),
        pages.route("/delete/{kind}/{name}", pages.delete, post=True),
        pages.route("/principals", runtime.principals, post=True),
        pages.route("/principals/{name}/delete", runtime.principal_delete, post=True),
        pages.route("/bots", runtime.bots, post=True),
        pages.route("/bots/{name}", runtime.bot, post=True),
        pages.route("/sessions", runtime.sessions, post=True),
        pages.route("/sessions/{name}", runtime.session, post=True),
        pages.route("/runs", runtime.runs),
        Route("/runs/new", runtime.run_agent, methods=["POST"]),
        pages.route("/runs/start", runtime.run_start, post=True),
        pages.route("/runs/prune", runtime.run_prune, post=True),
        pages.route("/runs/{run_id}", runtime.run, post=True),
        pages.route("/tools", runtime.tools, post=True),
        pages.route("/audit", runtime.audit),
        pages.route("/tasks", runtime.tasks),
        pages.route("/status", runtime.status, post=True),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts or LOOPBACK_HOSTS)),
        Middleware(SignInMiddleware, signin=signin),
    ]
    app = Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: pages.http_error})
    app.state.signin = signin
    return app


class Pages:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True,
                               trim_blocks=True, lstrip_blocks=True)
        self.env.globals["event_types"] = EVENT_TYPES  # the catalogue's, named in the agent form's help

    # -- plumbing -----------------------------------------------------------------------
    def home(self) -> Home:
        """A Home of its own for each request: requests run in threads at once."""
        return Home(self.root)

    def route(self, path: str, handler: Handler, post: bool = False) -> Route:
        async def endpoint(request: Request) -> Response:
            form = await checked_form(request) if request.method == "POST" else None
            return await run_in_threadpool(self.answer, handler, request, form)

        return Route(path, endpoint, methods=["GET", "POST"] if post else ["GET"])

    def answer(self, handler: Handler, request: Request, form: Form | None) -> Response:
        try:
            return handler(request, form, **request.path_params)
        except FwError as exc:
            return self.render(request, "error.html", STATUS.get(exc.code, 400), error=describe(exc))
        except Exception as exc:  # never a traceback on a page
            if os.environ.get("FW_RAISE_ERRORS"):
                raise
            error = {"code": "internal", "message": f"unexpected error: {type(exc).__name__}", "hint": "this is a bug in fw; please report it"}
            return self.render(request, "error.html", 500, error=error)

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """A page, with every secret value the home holds redacted from it, just in case."""
        home = self.home()
        secrets.remember_home(home)
        context.setdefault("errors", {})
        context.setdefault("alerts", [])
        html = self.env.get_template(template).render(csrf_token=request.scope.get("state", {}).get("csrf", ""), here=request.url.path,
                                                      query=request.query_params, **context)
        return HTMLResponse(secrets.redact(html), status_code=status, headers=HEADERS)

    async def http_error(self, request: Request, exc: Any) -> Response:
        """A page of the site's own for a refusal: 404 for what is not here, 403 for a form
        whose CSRF token is wrong, 405 for a method the page does not take."""
        if exc.status_code == 403:
            error = {"code": "denied", "message": "The form's CSRF token is missing or wrong; nothing was saved.",
                     "hint": "Reload the page and try again."}
        elif exc.status_code == 404:
            error = {"code": "not_found", "message": f"There is no page at {request.url.path}.", "hint": "The menu above lists the pages."}
        else:
            error = {"code": str(exc.status_code), "message": str(exc.detail), "hint": ""}
        return await run_in_threadpool(self.render, request, "error.html", exc.status_code, error=error)

    def failed(self, error: FwError | None) -> tuple[dict[str, str], list[dict[str, Any]], int]:
        """A failed save as (errors by field, the alert region's entries, status)."""
        if error is None:
            return {}, [], 200
        field = forms.field_of(error.extra.get("field")) or ("name" if error.code == "exists" else "")
        shown = describe(error)
        return ({field: shown["message"]} if field else {}), [{"field": field, **shown}], STATUS.get(error.code, 400)

    # -- the home -------------------------------------------------------------------------
    def overview(self, request: Request, form: Form | None) -> Response:
        report = check_home(self.home(), (plugin_warnings,))
        return self.render(request, "home.html", report=report)

    # -- agents ---------------------------------------------------------------------------
    def agents(self, request: Request, form: Form | None) -> Response:
        items = resource_list(self.home(), "agent")["items"]
        return self.render(request, "agents.html", items=items)

    def agent_new(self, request: Request, form: Form | None) -> Response:
        home = self.home()
        if form is None:
            return self.agent_page(request, home, forms.new_agent_values(), new=True)
        forms.require_shown(form, forms.AGENT_FIELDS, forms.AGENT_GROUPS, new=True)
        values = forms.agent_form_values(form)
        try:
            definition = self.completed(home, form, forms.agent_definition(values))
            values["allowed_tools"] = definition["allowed_tools"]
            name = named(values["name"], "agent")
            resource_write(home, "agent", name, forms.creation(definition), create=True, category=values["category"])
        except FwError as exc:
            return self.agent_page(request, home, values, new=True, error=exc)
        return RedirectResponse(f"/agents/{name}/edit?saved=1", status_code=303)

    def agent_edit(self, request: Request, form: Form | None, name: str) -> Response:
        home = self.home()
        doc = resource_read(home, "agent", name)
        if form is None:
            return self.agent_page(request, home, forms.agent_values(name, doc["category"], doc["data"]), new=False)
        forms.require_shown(form, forms.AGENT_FIELDS, forms.AGENT_GROUPS)
        values = {**forms.agent_form_values(form), "name": name}
        try:
            definition = self.completed(home, form, forms.agent_definition(values))
            definition["mcps"] = values["mcps"] = forms.kept_order(doc["data"].get("mcps") or [], definition["mcps"])
            values["allowed_tools"] = definition["allowed_tools"]
            patch = forms.changes(doc["data"], definition)
            groups = patch.pop("builtin_tools", None)
            category = values["category"] if values["category"] != doc["category"] else None
            agent_edit(home, name, patch, builtin_set=groups, category=category)
        except FwError as exc:
            return self.agent_page(request, home, values, new=False, error=exc)
        return RedirectResponse(f"/agents/{name}/edit?saved=1", status_code=303)

    def completed(self, home: Home, form: Form, definition: dict[str, Any]) -> dict[str, Any]:
        """The definition with `allowed_tools` as ticked, for the sources it names; a source
        the page did not list (added without the list being refreshed, or a plugin enabled
        since the page was shown) has its tools allowed."""
        mcps, skills, sandbox, plugins = definition["mcps"], definition["skills"], definition["sandbox"] is not None, enabled_plugins(home)
        allowed = [n for n in definition["allowed_tools"] if forms.tool_source_of(n, mcps, skills, sandbox, plugins)]
        new = forms.unlisted_sources(form, mcps, skills, sandbox, plugins)
        if new["mcps"] or new["skills"] or new["sandbox"] or new["plugins"]:
            wanted = {"mcps": new["mcps"], "skills": new["skills"], "sandbox": definition["sandbox"] if new["sandbox"] else None}
            for tool in tools_offered_now(home, wanted, str(home.root))["tools"]:
                if not tool["name"].startswith(PLUGIN_PREFIX) or tool.get("plugin") in new["plugins"]:
                    allowed.append(tool["name"])
        return {**definition, "allowed_tools": list(dict.fromkeys(allowed))}

    def agent_page(self, request: Request, home: Home, values: dict[str, Any], *, new: bool, error: FwError | None = None) -> Response:
        errors, alerts, status = self.failed(error)
        choices = {kind: sorted(names(home, kind)) for kind in ("model", "prompt", "harness", "skill", "mcp")}
        choices["mcp"] = [m for m in values["mcps"] if m in choices["mcp"]] + [m for m in choices["mcp"] if m not in values["mcps"]]
        activation = None if new or error else agent_show(home, values["name"])["activation"]
        definition = {k: v for k, v in forms.agent_definition(values).items() if v is not None}
        catalogue = catalogue_now(home, definition, str(home.root))  # the sources asked once, for both parts below
        return self.render(
            request, "agent_form.html", status, values=values, new=new, choices=choices, errors=errors, alerts=alerts,
            categories=home.categories(KINDS["agent"]), groups=BUILTIN_GROUPS, activation=activation,
            event_tools=forms.event_tools(forms.words(values["events"])),
            platform_tools=forms.platform_tools(values["allowed_platform_tools"]),
            allowed=self.allowed_view(home, values, values["allowed_tools"], None, catalogue["offered"]),
            catalogue=forms.catalogue_groups(catalogue["tools"]), warnings=sandbox_warnings(definition),
            saved=request.query_params.get("saved") == "1",
        )

    def allowed_view(self, home: Home, values: dict[str, Any], allowed: list[str] | None, shown: list[str] | None,
                     offered: dict[str, Any] | None = None) -> dict[str, Any]:
        mcps, skills, sandbox = values["mcps"], values["skills"], bool(values["sandbox"])
        if offered is None:
            wanted = {"mcps": mcps, "skills": skills, "sandbox": {"backend": "bubblewrap"} if sandbox else None}
            offered = tools_offered_now(home, wanted, str(home.root))
        return forms.allowed_tools_view(offered, allowed, shown, mcps, skills, sandbox, enabled_plugins(home))

    def agent_tools_part(self, request: Request, form: Form | None) -> Response:
        """The allowed_tools part of the agent form, for the sources chosen on the page now."""
        query = forms.form_of(request.query_params.multi_items())
        mcps, skills = forms.many(query, "mcps"), forms.many(query, "skills")
        known = {"mcp": names(self.home(), "mcp"), "skill": names(self.home(), "skill")}
        values = {"mcps": [m for m in mcps if m in known["mcp"]], "skills": [s for s in skills if s in known["skill"]],
                  "sandbox": bool(query.get("sandbox"))}
        allowed = forms.many(query, "allowed_tools") + forms.many(query, "allowed_tools_kept")
        view = self.allowed_view(self.home(), values, allowed, forms.many(query, "shown"))
        return self.render(request, "allowed_tools.html", allowed=view)

    def event_tools_part(self, request: Request, form: Form | None) -> Response:
        tools = forms.event_tools(forms.words(request.query_params.get("events", "")))
        return self.render(request, "event_tools.html", event_tools=tools)

    # -- providers and models ---------------------------------------------------------------
    def providers(self, request: Request, form: Form | None) -> Response:
        home = self.home()
        models = resource_list(home, "model")["items"]
        items = [{**p, "models": [m for m in models if m.get("provider") == p["name"]]} for p in resource_list(home, "provider")["items"]]
        known = {p["name"] for p in items}
        orphans = [m for m in models if m.get("provider") not in known]
        return self.render(request, "providers.html", items=items, orphans=orphans)

    def provider_new(self, request: Request, form: Form | None) -> Response:
        home = self.home()
        if form is None:
            return self.provider_page(request, home, forms.provider_values("", DEFAULT_CATEGORY, {}), new=True)
        forms.require_shown(form, forms.PROVIDER_FIELDS, new=True)
        try:
            name = named(forms.one(form, "name"), "provider")
            resource_write(home, "provider", name, forms.provider_definition(form), create=True, category=forms.one(form, "category") or None)
        except FwError as exc:
            return self.provider_page(request, home, forms.provider_form_values(form), new=True, error=exc)
        return RedirectResponse(f"/providers/{name}/edit?saved=1", status_code=303)

    def provider_edit(self, request: Request, form: Form | None, name: str) -> Response:
        home = self.home()
        doc = resource_read(home, "provider", name)
        if form is None:
            return self.provider_page(request, home, forms.provider_values(name, doc["category"], doc["data"]), new=False)
        forms.require_shown(form, forms.PROVIDER_FIELDS)
        values = {**forms.provider_form_values(form, doc["data"]), "name": name}
        try:
            patch = forms.changes(doc["data"], forms.provider_definition(form, doc["data"]))
            category = values["category"] if values["category"] != doc["category"] else None
            resource_write(home, "provider", name, patch, category=category)
        except FwError as exc:
            return self.provider_page(request, home, values, new=False, error=exc)
        return RedirectResponse(f"/providers/{name}/edit?saved=1", status_code=303)

    def provider_page(self, request: Request, home: Home, values: dict[str, Any], *, new: bool, error: FwError | None = None) -> Response:
        if error is not None and error.extra.get("reason") == "no_key":  # the domain's hint names the CLI's flag
            error = FwError(error.code, "a provider needs its API key", "type it in the api_key field: it is kept in secrets/ "
                            "and never shown again (a key read from an environment variable, api_key_env, is set in the "
                            "provider's file or with `fw resource write`)", field="api_key")
        errors, alerts, status = self.failed(error)
        return self.render(request, "provider_form.html", status, values=values, new=new, errors=errors, alerts=alerts,
                           categories=home.categories(KINDS["provider"]), saved=request.query_params.get("saved") == "1")

    def model_new(self, request: Request, form: Form | None) -> Response:
        home = self.home()
        if form is None:
            values = forms.model_values("", DEFAULT_CATEGORY, {"provider": request.query_params.get("provider", "")})
            return self.model_page(request, home, values, new=True)
        forms.require_shown(form, forms.MODEL_FIELDS, forms.MODEL_GROUPS, new=True)
        values = forms.model_form_values(form)
        try:
            name = named(values["name"], "model")
            data = {k: v for k, v in forms.model_definition(values).items() if v is not None}
            resource_write(home, "model", name, data, create=True, category=values["category"])
        except FwError as exc:
            return self.model_page(request, home, values, new=True, error=exc)
        return RedirectResponse(f"/models/{name}/edit?saved=1", status_code=303)

    def model_edit(self, request: Request, form: Form | None, name: str) -> Response:
        home = self.home()
        doc = resource_read(home, "model", name)
        if form is None:
            return self.model_page(request, home, forms.model_values(name, doc["category"], doc["data"]), new=False)
        forms.require_shown(form, forms.MODEL_FIELDS, forms.MODEL_GROUPS)
        values = {**forms.model_form_values(form), "name": name}
        try:
            patch = forms.changes(doc["data"], forms.model_definition(values))
            category = values["category"] if values["category"] != doc["category"] else None
            resource_write(home, "model", name, patch, category=category)
        except FwError as exc:
            return self.model_page(request, home, values, new=False, error=exc)
        return RedirectResponse(f"/models/{name}/edit?saved=1", status_code=303)

    def model_page(self, request: Request, home: Home, values: dict[str, Any], *, new: bool, error: FwError | None = None) -> Response:
        errors, alerts, status = self.failed(error)
        return self.render(request, "model_form.html", status, values=values, new=new, errors=errors, alerts=alerts,
                           categories=home.categories(KINDS["model"]), providers=sorted(names(home, "provider")),
                           live=live_models(home, values["provider"]), saved=request.query_params.get("saved") == "1")

    def model_ids_part(self, request: Request, form: Form | None) -> Response:
        return self.render(request, "model_ids.html", live=live_models(self.home(), request.query_params.get("provider", "")))

    # -- deleting -------------------------------------------------------------------------
    def delete(self, request: Request, form: Form | None, kind: str, name: str) -> Response:
        home = self.home()
        error = None
        if form is None:
            recursive = request.query_params.get("recursive") == "1"
        else:
            recursive = forms.one(form, "recursive") == "1"
            try:
                done = resource_delete(home, kind, name, recursive=recursive, confirm=forms.one(form, "confirm"))
                return self.render(request, "deleted.html", deleted=done["deleted"], back=back_to(kind))
            except FwError as exc:
                if exc.code not in ("stale_confirmation", "protected"):
                    raise
                error = exc
        plan = resource_delete(home, kind, name, recursive=recursive)
        _, alerts, status = self.failed(error)
        hint = page_hint(plan["blocked"][0]) if plan["blocked"] else None
        return self.render(request, "delete.html", status, plan=plan, tree=plan_tree(plan), kind=kind, name=name, blocked_words=BLOCKED,
                           recursive=recursive, alerts=alerts, hint=hint, back=back_to(kind))


def named(name: str, kind: str) -> str:
    """A new resource's name, or `invalid` at the name field."""
    try:
        return check_name(name, f"{kind} name")
    except FwError as exc:
        raise FwError(exc.code, exc.message if name else f"a new {kind} needs a name", exc.hint, field="name") from None


def describe(error: FwError) -> dict[str, Any]:
    return {"code": error.code, "message": error.message, "hint": error.hint}


def live_models(home: Home, provider: str) -> dict[str, Any]:
    """The provider's model ids as it lists them now (`provider_models`), or why not."""
    if not provider:
        return {"provider": "", "models": [], "note": "Pick a provider to see the models it offers."}
    try:
        return {"provider": provider, "models": provider_models(home, provider)["models"], "note": None}
    except FwError as exc:
        return {"provider": provider, "models": [], "note": f"Could not list the models of {provider}: {exc.message}"}


def plan_tree(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan as a tree: the target, and under each item the items of the plan that use it."""

    def grow(entry: str, seen: frozenset[str]) -> dict[str, Any]:
        users = [u for u in plan["dependents"].get(entry, []) if u not in seen]
        return {"item": entry, "children": [grow(u, seen | {u}) for u in users]}

    return grow(plan["target"], frozenset({plan["target"]}))


# What blocks a delete, said in the page's words (the command line has its own, with commands).
BLOCKED = {
    "has_dependents": "other resources use it",
    "managed": "a principal's binding runs it",
    "corrupt": "its file is corrupt",
    "default_prompt": "the default prompt is never deleted",
}


def page_hint(block: dict[str, Any]) -> str:
    """What to do about the first thing that blocks a delete, on this site."""
    reason = block["reason"]
    if reason == "has_dependents":
        return "Delete what uses it first, or plan a recursive delete below."
    if reason == "managed":
        principal = block["detail"][0].split("/", 1)[1]
        return f"Remove the binding of {principal} first (to pause it instead, disable it on the Principals page)."
    if reason == "corrupt":
        return "Fix or remove the corrupt file by hand (the Home page lists what is wrong), then plan again."
    return "Choose another resource to delete."


def back_to(kind: str) -> str:
    return {"agent": "/agents", "provider": "/providers", "model": "/providers"}.get(kind, "/")
