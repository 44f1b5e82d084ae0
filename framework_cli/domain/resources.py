"""The seven kinds as a library: list, read, write and categories.

Each public function here is the one implementation of its job. The CLI commands and the
tools of the `resource_management` group call these and only render what they return.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from ..errors import FwError
from ..home import secrets
from ..home.kinds import DEFAULT_CATEGORY, KINDS, KindSpec, check_name, kind_spec
from ..home.records import (
    check_reference,
    find_one,
    fix_hint,
    load_for_edit,
    merge_patch,
    parse_text,
    read_definition,
    refuse_secret_values,
    validate_stored,
)
from ..home.secrets import REDACTED
from ..home.store import Home
from ..home.yamlio import join_front_matter, rt_dump, to_commented, to_plain
from ..suggest import did_you_mean, hint_with, plural

MISSING: Any = object()


def refs_of(spec: KindSpec, plain: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for field, kind, is_list in spec.refs:
        value = plain.get(field)
        for ref in (value or []) if is_list else ([value] if value else []):
            out.append((kind, ref))
    return out


def summarize(spec: KindSpec, name: str, rel: str, text: str | None) -> dict[str, Any]:
    """What the index keeps of one file: summary, references, or why it is corrupt. Never a
    secret value: the index lives outside secrets/. Where the file is, the index's key says."""
    try:
        if text is None:
            raise FwError("corrupt", f"{rel}: the file is missing", fix_hint(rel), path=rel)
        data, _ = parse_text(spec, text, rel)
        plain = validate_stored(spec, name, data, rel)
    except FwError as exc:
        return {"error": {"code": "corrupt", "message": exc.message, **exc.extra}}
    return {
        "summary": {k: plain[k] for k in spec.summary if k in plain},
        "refs": refs_of(spec, plain),
        "plaintext_secret": any(plain.get(f) for f in spec.secret_fields),
    }


def _summary_shape(entry: Any) -> bool:
    """Whether a cached index entry has the shape `summarize` gives."""
    if type(entry) is not dict:
        return False
    if "error" in entry:
        return isinstance(entry["error"], dict) and isinstance(entry["error"].get("message"), str)
    refs = entry.get("refs")
    return (
        type(entry.get("summary")) is dict
        and type(refs) is list
        and all(type(r) is list and len(r) == 2 and type(r[0]) is str and type(r[1]) is str for r in refs)
        and type(entry.get("plaintext_secret")) is bool
    )


def summaries(home: Home, spec: KindSpec, category: str | None = None) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(category, name, relative path, `summarize` of the file) of every resource of a kind,
    read through the home's index. The caller saves the index when done."""
    for cat, name, rel in home.resource_files(spec, category):
        yield cat, name, rel, home.cached(rel, lambda text, n=name, r=rel: summarize(spec, n, r, text), _summary_shape)


def scan(home: Home, kind: str, category: str | None = None) -> list[dict[str, Any]]:
    """Every resource of a kind as an index entry, read through the home's index."""
    out = [{"name": name, "category": cat, "path": rel, **cached} for cat, name, rel, cached in summaries(home, KINDS[kind], category)]
    home.keep_refreshed_index()
    return out


def names(home: Home, kind: str) -> set[str]:
    return {e["name"] for e in scan(home, kind)}


# -- presenting ---------------------------------------------------------------------------------
def present(home: Home, spec: KindSpec, name: str, plain: dict[str, Any]) -> dict[str, Any]:
    """A definition as shown to anyone: secret values replaced, a provider's key as a flag."""
    shown = dict(plain)
    if spec.name == "provider":
        key = shown.pop("api_key", None)
        secrets.remember(key)
        shown["api_key_set"] = bool(key) or bool(secrets.load(home, "provider", name).get("api_key"))
    elif spec.name == "mcp":
        stored = secrets.load(home, "mcp", name)
        for field in ("env", "headers"):
            merged = {**(shown.get(field) or {}), **(stored.get(field) or {})}
            secrets.remember(merged)
            shown[field] = {k: REDACTED for k in merged}
    return shown


def _summary_item(home: Home, spec: KindSpec, category: str, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    if "error" in entry:
        return {"name": name, "category": category, "error": entry["error"]}
    item: dict[str, Any] = {"name": name, "category": category, **entry["summary"]}
    if not spec.secret_fields:
        return item
    if spec.name == "provider":
        item["api_key_set"] = entry["plaintext_secret"] or secrets.has(home, "provider", name)
    if secrets.has(home, spec.name, name):
        damaged = secrets.problem(home, spec.name, name)
        if damaged:
            item["error"] = damaged
    return item


# -- the operations ---------------------------------------------------------------------------
def resource_list(home: Home, kind: str, category: str | None = None) -> dict[str, Any]:
    spec = kind_spec(kind)
    if category is not None:
        _require_category(home, spec, check_name(category, "category"))
    items = [_summary_item(home, spec, cat, name, entry) for cat, name, _, entry in summaries(home, spec, category)]
    home.keep_refreshed_index()
    return {"kind": kind, "items": items}


def resource_list_all(home: Home, category: str | None = None) -> dict[str, Any]:
    """Every kind's listing, in the kinds' order; with `category`, the kinds that have it."""
    lists = []
    for kind, spec in KINDS.items():
        if category is None or category in home.categories(spec):
            lists.append(resource_list(home, kind, category))
    if category is not None and not lists:
        check_name(category, "category")
        suggestion = did_you_mean(category, {c for spec in KINDS.values() for c in home.categories(spec)})
        raise FwError("not_found", f"no kind has a category {category!r}", hint_with(suggestion, "see a kind's with `fw category list KIND`"), **suggestion)
    return {"kinds": lists}


def resource_read(home: Home, kind: str, reference: str) -> dict[str, Any]:
    spec = kind_spec(kind)
    check_reference(home, spec, reference)
    category, plain, body = read_definition(home, spec, reference)
    return shown(home, spec, reference, category, plain, body)


def with_newline(text: str | None) -> str:
    """Text as fw writes it: ending with a newline, as a text file does (empty stays empty)."""
    return text if not text or text.endswith("\n") else text + "\n"


def resource_text(home: Home, kind: str, reference: str) -> dict[str, Any]:
    """A resource's file as it is on disk (front matter and body for a prompt or skill),
    for editing it whole: `resource_write(..., text=...)` takes it back."""
    spec = kind_spec(kind)
    check_reference(home, spec, reference)
    category, rel = find_one(home, spec, reference)
    return {"kind": kind, "name": reference, "category": category, "path": rel, "text": home.read_text(rel) or ""}


def _edited_text(spec: KindSpec, text: str) -> tuple[Any, str | None]:
    """The document and body of a whole file given by the user: unreadable is `invalid` (it
    is their input, not the home's file)."""
    try:
        return load_for_edit(text, "the edited text", has_body=spec.has_body)
    except FwError as exc:
        raise FwError("invalid", exc.message, "fix the text and save again", **{k: v for k, v in exc.extra.items() if k == "line"}) from None


def shown(home: Home, spec: KindSpec, name: str, category: str, plain: dict[str, Any], body: str | None) -> dict[str, Any]:
    """The result document of a read or a write: redacted data, and the body of a text kind."""
    result: dict[str, Any] = {"kind": spec.name, "name": name, "category": category, "data": present(home, spec, name, plain)}
    if spec.has_body:
        result["body"] = body
    return result


def _require_category(home: Home, spec: KindSpec, category: str) -> None:
    categories = home.categories(spec)
    if category not in categories:
        suggestion = did_you_mean(category, categories)
        raise FwError(
            "not_found",
            f"no {spec.name} category {category!r}",
            hint_with(suggestion, f"create it with `fw category create {spec.name} {category}`"),
            **suggestion,
        )


def _strip_nulls(data: dict[str, Any]) -> dict[str, Any]:
    return merge_patch({}, data)


def _check_refs(home: Home, spec: KindSpec, name: str, plain: dict[str, Any]) -> None:
    known: dict[str, set[str]] = {}
    for kind, ref in refs_of(spec, plain):
        if kind not in known:
            known[kind] = names(home, kind)
        if ref not in known[kind]:
            suggestion = did_you_mean(ref, known[kind])
            raise FwError(
                "invalid",
                f"{spec.name} {name!r} names {kind} {ref!r}, which does not exist",
                hint_with(suggestion, f"see the {KINDS[kind].folder} there are with `fw resource list {kind}`, or create it first"),
                field=next(f for f, k, _ in spec.refs if k == kind),
                **suggestion,
            )


def _check_key_source(plain: dict[str, Any], stored_key: Any) -> None:
    key, env = stored_key, plain.get("api_key_env")
    if isinstance(key, str) and not key.strip():
        raise FwError("invalid", "api_key is empty", "give the key itself, or name its variable with api_key_env", field="api_key")
    if key is None and env is None:
        raise FwError(
            "invalid",
            "a provider needs a key: api_key or api_key_env",
            "pass the key with --api-key-stdin, or name its variable with api_key_env",
            field="api_key",
            reason="no_key",
        )


def resource_write(
    home: Home,
    kind: str,
    reference: str,
    data: Any,
    *,
    create: bool = False,
    category: str | None = None,
    text: str | None = None,
    base: str | None = None,
) -> dict[str, Any]:
    """Create (a whole definition, a new name) or update (a JSON merge patch) one resource.
    `text` (an update only) replaces the file's whole text instead: what `fw resource edit`
    saves, comments included; `base`, the text it was edited from: a file that is no longer
    that text is `conflict` (`reason: changed_meanwhile`) and nothing is written."""
    from ..home.models import dump, validate  # lazy: start-up speed

    spec = kind_spec(kind)
    if create:
        check_name(reference, f"{kind} reference")
    else:
        check_reference(home, spec, reference)
    if category is not None:
        check_name(category, "category")
    if not isinstance(data, dict):
        raise FwError("invalid", "data must be a JSON object", 'e.g. --data \'{"description": "..."}\'')
    patch = copy.deepcopy(data)
    body = patch.pop("body", MISSING) if spec.has_body else MISSING
    if body is not MISSING and body is not None and not isinstance(body, str):
        raise FwError("invalid", "body must be text", "pass the Markdown text as a JSON string")
    secret_patch = {f: patch.pop(f) for f in spec.secret_fields if f in patch}
    secrets.remember(secret_patch)

    with home.locked():
        found = home.locate(spec, reference)
        if len(found) > 1:
            find_one(home, spec, reference)  # raises conflict
        if create:
            if found:
                raise FwError(
                    "exists",
                    f"{kind} {reference!r} already exists (category {found[0][0]})",
                    f"to change it, drop --create: `fw resource write {kind} {reference} --data ...`",
                )
            old_category, old_rel, old_text = None, None, None
            target_category = category or DEFAULT_CATEGORY
            fresh = _strip_nulls(patch)
            if kind == "skill":
                fresh = {"name": fresh.pop("name", reference), **fresh}
            doc = to_commented(fresh)
            old_body = ""
            stored_secret: dict[str, Any] = {}
            secret_before: dict[str, Any] = {}
            before: Any = None
        else:
            if not found:
                raise FwError(
                    "not_found",
                    f"no {kind} named {reference!r}",
                    f"to create it, add --create: `fw resource write {kind} {reference} --create --data ...`",
                )
            old_category, old_rel = found[0]
            old_text = home.read_text(old_rel) or ""
            if base is not None and old_text != base:
                raise FwError("conflict", f"{kind} {reference!r} was changed by another writer while it was being edited",
                              f"see it as it is now with `fw resource read {kind} {reference}`", reason="changed_meanwhile")
            try:
                doc, old_body = load_for_edit(old_text, old_rel, has_body=spec.has_body)
                before = to_plain(doc)
            except FwError as exc:
                if text is None or exc.code != "corrupt":
                    raise  # a patch needs the fields it patches
                doc, old_body, before = to_commented({}), None, None  # a whole new text repairs a broken file
            if text is not None:
                doc, edited_body = _edited_text(spec, text)
                body = edited_body or "" if spec.has_body else MISSING
            target_category = category or old_category
            stored_secret = _stored_secret(home, spec, reference, secret_patch)
            secret_before = copy.deepcopy(stored_secret)
            for field in spec.secret_fields:  # a secret written into the file by hand moves to secrets/
                if field in doc:
                    value = to_plain(doc.pop(field))
                    secrets.remember(value)
                    if text is not None:  # typed in the editor now: it replaces what was stored
                        stored_secret[field] = {**(stored_secret.get(field) or {}), **value} if isinstance(value, dict) else value
                    elif isinstance(value, dict):
                        stored_secret[field] = {**value, **(stored_secret.get(field) or {})}
                    else:
                        stored_secret.setdefault(field, value)
            merge_patch(doc, patch)
        new_secret = merge_patch(copy.deepcopy(stored_secret), secret_patch)
        new_body = with_newline(old_body if body is MISSING else (body or ""))
        old_body = with_newline(old_body) if old_body is not None else old_body  # a missing last newline is no change

        refuse_secret_values(home, to_plain(doc), new_body)
        full = {**to_plain(doc), **new_secret}
        plain = dump(validate(kind, full))
        if kind == "provider":
            _check_key_source(plain, new_secret.get("api_key"))
        if kind == "skill" and plain["name"] != reference:
            raise FwError("invalid", f"a skill's name must be its reference {reference!r}", "drop name, or set it to the reference", field="name")
        _check_refs(home, spec, reference, plain)
        if kind == "agent":  # event types and platform tools are checked against the catalogue on write only
            from .catalogue import check_agent_fields  # lazy: start-up speed (listing never needs it)

            check_agent_fields(plain, reference)
        if target_category != old_category:
            _require_category(home, spec, target_category)

        new_rel = spec.relpath(target_category, reference)
        front_text = rt_dump(doc)
        if text is not None:  # the fields are checked above; a stored key in a comment is caught here
            secrets.refuse(home, {"a comment of the file": front_text}, "remove the key from the comment")
        new_text = join_front_matter(front_text, new_body) if spec.has_body else front_text
        if spec.secret_fields:  # first: a key moved out of a file by hand is never lost
            secrets.save(home, kind, reference, new_secret)
        if old_rel is None:
            home.write_text(new_rel, new_text)
        else:
            if new_rel != old_rel:
                move_from = old_rel.rsplit("/", 1)[0] if spec.layout == "skill" else old_rel
                move_to = new_rel.rsplit("/", 1)[0] if spec.layout == "skill" else new_rel
                home.rename(move_from, move_to)
            retexted = text is not None and new_text != old_text  # an edited comment is a change too
            if to_plain(doc) != before or new_body != old_body or retexted:  # a no-op edit rewrites nothing
                home.write_text(new_rel, new_text)
        changed = old_rel != new_rel or to_plain(doc) != before or new_body != old_body or new_secret != secret_before
        changed = changed or (text is not None and new_text != old_text)

        result = shown(home, spec, reference, target_category, plain, new_body)
        result["changed"] = changed
        if kind == "agent":
            from .identities import activation  # lazy: start-up speed (listing never needs it)

            result["activation"] = activation(home, reference, plain)
    return result


def _stored_secret(home: Home, spec: KindSpec, name: str, secret_patch: dict[str, Any]) -> dict[str, Any]:
    """The stored secret values of a resource about to be updated. A damaged secret file
    refuses the update, unless the update gives every secret value anew."""
    if not spec.secret_fields:
        return {}
    try:
        return secrets.load(home, spec.name, name)
    except FwError:
        if all(field in secret_patch for field in spec.secret_fields):
            return {}
        raise


# -- categories ----------------------------------------------------------------------------
def category_list(home: Home, kind: str) -> dict[str, Any]:
    spec = kind_spec(kind)
    return {"kind": kind, "categories": home.categories(spec)}


def category_create(home: Home, kind: str, category: str) -> dict[str, Any]:
    spec = kind_spec(kind)
    check_name(category, "category")
    with home.locked():
        if category in home.categories(spec):
            raise FwError("exists", f"{kind} category {category!r} already exists", f"see them with `fw category list {kind}`")
        home.make_dir(f"{spec.folder}/{category}")
    return {"kind": kind, "category": category, "created": True}


def category_delete(home: Home, kind: str, category: str) -> dict[str, Any]:
    spec = kind_spec(kind)
    check_name(category, "category")
    if category == DEFAULT_CATEGORY:
        raise FwError("protected", f"the {kind} category 'default' cannot be deleted", "every kind keeps its default category")
    with home.locked():
        categories = home.categories(spec)
        if category not in categories:
            suggestion = did_you_mean(category, categories)
            raise FwError("not_found", f"no {kind} category {category!r}", hint_with(suggestion, f"see them with `fw category list {kind}`"), **suggestion)
        contents = home.leftovers(f"{spec.folder}/{category}")
        if contents:
            items = [f"{kind}/{n.rsplit('.', 1)[0] if spec.layout != 'skill' else n}" if not n.startswith(".") else n for n in contents]
            raise FwError(
                "not_empty",
                f"{kind} category {category!r} is not empty ({plural(len(contents), 'entry', 'entries')})",
                _emptying_hint(kind, items),
                items=items,
            )
        home.remove_empty_dir(f"{spec.folder}/{category}")
    return {"kind": kind, "category": category, "deleted": True}


def _emptying_hint(kind: str, items: list[str]) -> str:
    first = next((i.split("/", 1)[1] for i in items if i.startswith(f"{kind}/")), None)
    if first is None:
        return "remove what it holds by hand first: fw never deletes files it did not write"
    return f"move or delete what it holds first, e.g. `fw resource write {kind} {first} --category default`"
