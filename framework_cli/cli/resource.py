"""fw resource: list, read, write and delete the seven kinds."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated, Any, Optional

import typer

from ..domain.resources import resource_list, resource_list_all, resource_read, resource_write
from ..errors import EXIT_CODES, FwError
from ..home.kinds import KINDS
from ..suggest import article, plural
from .common import (
    DryRunOpt,
    KindArg,
    complete_category,
    complete_kind,
    complete_reference,
    home_of,
    maybe_dry,
    render_dry_run,
)
from .output import JsonOpt, emit, read_data_arg, read_stdin_text, table

app = typer.Typer(help="List, read, write and delete providers, models, prompts, skills, MCP servers, harnesses and agents.")

RefArg = Annotated[
    str, typer.Argument(metavar="REF", help="The resource's name (unique within its kind).", show_default=False, autocompletion=complete_reference)
]
CategoryOpt = Annotated[
    Optional[str],
    typer.Option("--category", help="Category (sub-folder) to create it in, or to move it to; a new resource goes to `default`.", autocompletion=complete_category),
]
ListCategoryOpt = Annotated[
    Optional[str], typer.Option("--category", help="Only this category (sub-folder); default: every category.", autocompletion=complete_category)
]
OptionalKindArg = Annotated[
    Optional[str],
    typer.Argument(metavar="[KIND]", help="provider, model, prompt, skill, mcp, harness or agent; default: every kind.", show_default=False, autocompletion=complete_kind),
]


@app.command("list")
def list_(ctx: typer.Context, kind: OptionalKindArg = None, category: ListCategoryOpt = None, as_json: JsonOpt = False) -> None:
    """List the resources of a kind (or of every kind, grouped), with a short summary of
    each. Secrets are never shown."""
    if kind is None:
        every = resource_list_all(home_of(ctx), category)
        emit(every, as_json, lambda c: render_every_list(c, every))
        return
    doc = resource_list(home_of(ctx), kind, category)
    emit(doc, as_json, lambda c: render_list(c, doc))


def render_every_list(console: Any, doc: dict[str, Any]) -> None:
    for listing in doc["kinds"]:
        if listing["items"]:
            render_list(console, listing, titled=True)
        else:
            console.print(f"{KINDS[listing['kind']].folder}: none")


def render_list(console: Any, doc: dict[str, Any], titled: bool = False) -> None:
    spec = KINDS[doc["kind"]]
    columns = ["name", "category", *spec.summary]
    rows = []
    for item in doc["items"]:
        if "error" in item:
            rows.append([item["name"], item["category"], f"CORRUPT: {item['error']['message']}", *[""] * (len(columns) - 3)])
        else:
            rows.append([item.get(c) for c in columns])
    table(console, spec.folder, columns, rows, f"No {spec.folder} yet. Create one with `fw resource write {doc['kind']} NAME --create --data ...`.", titled=titled)
    bad = sum(1 for item in doc["items"] if "error" in item)
    if bad:
        console.print(f"{plural(bad, 'corrupt file')}: run `fw home check` for details.")


# Help texts are rich markup: a backslash keeps "[redacted]" from being read as a style.
@app.command("read")
def read(ctx: typer.Context, kind: KindArg, reference: RefArg, as_json: JsonOpt = False) -> None:
    """Show one resource's definition (and its text, for prompts and skills). A provider shows
    `api_key_set`, never the key; an MCP server's env and header values show as \\[redacted]."""
    doc = resource_read(home_of(ctx), kind, reference)
    emit(doc, as_json, lambda c: render_resource(c, doc))


def render_resource(console: Any, doc: dict[str, Any]) -> None:
    import yaml
    from rich.text import Text

    console.print(Text.assemble((f"{doc['kind']} {doc['name']}", "bold"), f" (category {doc['category']})"))
    console.print(yaml.safe_dump(doc["data"], sort_keys=False, allow_unicode=True).rstrip() if doc["data"] else "(no fields)")
    if doc.get("body") is not None:
        console.print("---")
        console.print(doc["body"].rstrip())


@app.command("write")
def write(
    ctx: typer.Context,
    kind: KindArg,
    reference: RefArg,
    create: Annotated[bool, typer.Option("--create", help="Create a new resource from a whole definition (fails if the name exists).")] = False,
    category: CategoryOpt = None,
    data: Annotated[
        Optional[str],
        typer.Option("--data", metavar="JSON|@FILE|-", help="The definition (with --create) or a JSON merge patch (RFC 7386) of it, in JSON (or YAML). A prompt's or skill's text is `body`."),
    ] = None,
    api_key_stdin: Annotated[bool, typer.Option("--api-key-stdin", help="Read a provider's key from standard input, so it never shows in a process list.")] = False,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Create or update a resource. Without --create the data is a merge patch: only the
    fields given change, `null` removes one. --category places a new resource or moves one."""
    payload = _payload(kind, reference, data, api_key_stdin, category, _command_words(kind, reference, create, category, data))
    home = home_of(ctx)
    try:
        doc = maybe_dry(home, dry_run, lambda: resource_write(home, kind, reference, payload, create=create, category=category))
    except FwError as exc:
        raise with_retry_hint(exc, [kind, reference], create, data, category, api_key_stdin) from None
    verb = "Created" if create else "Saved" if doc.get("changed", True) else "Unchanged:"
    emit(doc, as_json, lambda c: render_written(c, doc, verb))


@app.command("edit")
def edit(ctx: typer.Context, kind: KindArg, reference: RefArg, as_json: JsonOpt = False) -> None:
    """Edit a resource's file in $EDITOR (as `kubectl edit` does): a prompt or skill as its
    own text, front matter and body. On save it is validated; a refused edit opens again with
    the error at the top, and nothing is written until it is valid. Save it unchanged, or
    empty, to cancel. If another writer changed the file while it was open, the editor opens
    again with a note: save to replace that change, or empty the file to cancel."""
    from ..domain.resources import resource_text  # lazy: start-up speed
    from .editor import edit_loop  # lazy: start-up speed

    home = home_of(ctx)
    current = resource_text(home, kind, reference)
    suffix = ".md" if KINDS[kind].has_body else ".yaml"
    doc = edit_loop(current["text"], suffix, lambda text, base: resource_write(home, kind, reference, {}, text=text, base=base),
                    lambda: resource_text(home, kind, reference)["text"])
    if doc is None:
        doc = {"kind": kind, "name": reference, "category": current["category"], "changed": False, "cancelled": True}
        emit(doc, as_json, lambda c: c.print(f"Edit cancelled: {kind} {reference} is unchanged."))
        return
    emit(doc, as_json, lambda c: render_written(c, doc, "Saved" if doc["changed"] else "Unchanged:"))


def with_retry_hint(exc: FwError, target: list[str], create: bool, data: Optional[str], category: Optional[str], api_key_stdin: bool) -> FwError:
    """A write that named a resource that exists (with --create) or does not (without it):
    the hint gives the same command the other way round, ready to run."""
    import shlex

    missing = f"no {target[0]} named "  # the resource itself is missing, not its category or a reference
    flips = (exc.code == "exists" and create) or (exc.code == "not_found" and not create and exc.message.startswith(missing))
    if not flips or api_key_stdin:
        return exc
    words = ["fw", "resource", "write", *target, *([] if create else ["--create"])]
    words += ["--category", category] if category else []
    words += ["--data", data] if data is not None else []
    verb = "to change it, drop --create" if create else "to create it, add --create"
    return FwError(exc.code, exc.message, f"{verb}: `{shlex.join(words)}`", **exc.extra)


def _command_words(kind: str, reference: str, create: bool, category: Optional[str], data: Optional[str]) -> list[str]:
    """This `fw resource write` command line, as it was given, to repeat in a hint."""
    words = ["fw", "resource", "write", kind, reference, *(["--create"] if create else [])]
    words += ["--category", category] if category is not None else []
    return words + (["--data", data] if data is not None else [])


def _read_key(command: list[str]) -> str:
    """The key from standard input: typed at a prompt that does not echo it when standard
    input is a terminal (as `llm keys set` does), piped otherwise."""
    if sys.stdin.isatty():
        import getpass  # lazy: start-up speed

        key = getpass.getpass("API key (not shown): ").strip()
    else:
        key = read_stdin_text("the key").strip()
    if not key:
        piped = shlex.join([*command, "--api-key-stdin"])
        raise FwError("invalid", "no key on standard input", f"pipe the key in: `printf %s \"$KEY\" | {piped}`")
    return key


def _payload(kind: str, reference: str, data: Optional[str], api_key_stdin: bool, category: Optional[str], command: list[str]) -> Any:
    if data is None and not api_key_stdin and category is None:
        raise FwError("usage", "nothing to write: give --data", "e.g. --data '{\"description\": \"...\"}', --data @file.json or --data -")
    payload = read_data_arg(data, "--data") if data is not None else {}
    if api_key_stdin:
        if kind != "provider":
            raise FwError("usage", "--api-key-stdin is for providers only", "an MCP server's secrets go in its env and headers")
        if data == "-":
            raise FwError("usage", "--data - and --api-key-stdin both read standard input", "pass --data inline or as @FILE")
        if isinstance(payload, dict) and "api_key" in payload:
            raise FwError("usage", "the key is given twice: in --data and with --api-key-stdin", "drop api_key from --data")
        key = _read_key(command)
        if isinstance(payload, dict):
            payload["api_key"] = key
    return payload


def render_written(console: Any, doc: dict[str, Any], verb: str) -> None:
    if doc.get("dry_run"):
        render_dry_run(console, doc)
        return
    console.print(f"{verb} {doc['kind']} {doc['name']} (category {doc['category']}).")
    activation = doc.get("activation")
    if activation:
        render_activation(console, activation)


def render_activation(console: Any, activation: dict[str, Any]) -> None:
    for note in activation.get("tool_groups", []):
        if not note["grants"]:
            console.print(f"Mounted {note['group']} grants no tools: {note['why']}.")
    if activation["enabled"]:
        names = ", ".join(b["principal"] for b in activation["bindings"] if b["enabled"])
        console.print(f"Enabled: runs as {names}.")
        return
    console.print("Not enabled yet: the agent is configured but nothing runs it.")
    for step in activation["next_steps"]:
        console.print(f"  next: `{step['command']}`")


@app.command("delete")
def delete(
    ctx: typer.Context,
    kind: KindArg,
    reference: RefArg,
    recursive: Annotated[bool, typer.Option("--recursive", help="Also delete everything that uses it, dependents first.")] = False,
    confirm: Annotated[
        Optional[str],
        typer.Option("--confirm", metavar="ITEMS", help="The plan's items, comma-separated, in the plan's order. Without it nothing is deleted."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a resource in two steps. First run without --confirm: it prints the plan (what
    would be deleted, in order, and what blocks it) and deletes nothing. Then run again with
    --confirm and exactly that plan; if the home changed meanwhile, nothing is deleted."""
    from ..domain.deletion import resource_delete  # lazy: start-up speed

    doc = resource_delete(home_of(ctx), kind, reference, recursive=recursive, confirm=confirm)
    emit(doc, as_json, lambda c: render_deletion(c, doc))


def render_deletion(console: Any, doc: dict[str, Any]) -> None:
    if doc["status"] == "deleted":
        n = len(doc["deleted"])
        console.print(f"Deleted {n} resource{'s' if n != 1 else ''}:")
        for entry in doc["deleted"]:
            console.print(f"  - {entry}")
        return
    from rich.text import Text
    from rich.tree import Tree

    from ..domain.deletion import confirm_command, unblock_hint  # lazy: start-up speed

    items, blocked, users = doc["plan"], doc["blocked"], doc["dependents"]  # users: within the plan
    tree = Tree(Text(doc["target"], style="bold"))

    def grow(node: Any, entry: str, seen: frozenset[str]) -> None:
        for user in users.get(entry, []):
            if user not in seen:
                grow(node.add(user), user, seen | {user})

    grow(tree, doc["target"], frozenset({doc["target"]}))
    n = len(items)
    never = any(b["reason"] == "default_prompt" for b in blocked)  # no change of the home unblocks it
    verb = "would be deleted once unblocked" if blocked else "will be deleted"
    console.print(f"{doc['target']} cannot be deleted." if never else
                  f"Plan: {n} resource{'s' if n != 1 else ''} {verb}, in this order: {', '.join(items)}")
    console.print(tree)
    if blocked:
        until = "" if never else ": nothing can be deleted until this is resolved"
        console.print(Text.assemble(("Blocked", "red"), f" ({len(blocked)}){until}."))
        for block in blocked:
            detail = block["detail"]
            detail = ", ".join(detail) if isinstance(detail, list) else detail
            console.print(f"  {block['item']}: {block['reason']} ({str(detail)})")
        console.print(f"Hint: {unblock_hint(blocked[0])}")
        return
    console.print("Nothing was deleted. To delete exactly this, run:")
    console.print(f"  {confirm_command(doc['target'], doc['recursive'], items)}")


@app.command("test")
def test(ctx: typer.Context, kind: KindArg, reference: RefArg, as_json: JsonOpt = False) -> None:
    """Check a provider's or MCP server's configuration statically (no network, no process)."""
    from ..domain.probes import resource_test  # lazy: start-up speed

    doc = resource_test(home_of(ctx), kind, reference)
    emit(doc, as_json, lambda c: table(c, f"{kind} {reference}: {'ok' if doc['ok'] else 'problems found'}", ["check", "ok", "detail"], [[x["name"], x["ok"], x["detail"]] for x in doc["checks"]], "no checks"))
    if not doc["ok"]:
        raise typer.Exit(EXIT_CODES["invalid"])


@app.command("models")
def models(ctx: typer.Context, reference: RefArg, as_json: JsonOpt = False) -> None:
    """List the models a provider serves (GET {base_url}/models with its key)."""
    from ..domain.probes import provider_models  # lazy: start-up speed

    doc = provider_models(home_of(ctx), reference)
    emit(doc, as_json, lambda c: table(c, f"models of {reference}", ["model"], [[m] for m in doc["models"]], "The provider lists no models."))


@app.command("schema")
def schema(kind: KindArg, as_json: JsonOpt = False) -> None:
    """Show the fields a kind takes: which are required, what each accepts (--json: the
    JSON Schema too)."""
    from ..home.kinds import kind_spec  # lazy: start-up speed
    from ..home.models import field_table, json_schema  # lazy: start-up speed

    kind_spec(kind)  # an unknown kind is refused with the closest one
    fields = field_table(kind)
    if KINDS[kind].has_body:
        fields.append({"field": "body", "required": False, "accepts": "text", "description": "the Markdown text after the front matter"})
    doc = {"kind": kind, "fields": fields, "schema": json_schema(kind)}
    rows = [[f["field"], "yes" if f["required"] else "", f["accepts"], f["description"]] for f in fields]
    emit(doc, as_json, lambda c: table(c, f"fields of {article(kind)}", ["field", "required", "accepts", "description"], rows, "no fields"))
