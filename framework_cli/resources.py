"""The seven kinds as a library: list, read, write and categories.

Each public function here is the one implementation of its job. The CLI commands and the
tools of the `resource_management` group call these and only render what they return.
"""

from __future__ import annotations

import copy
from typing import Any

from . import secrets
from .errors import FwError
from .kinds import DEFAULT_CATEGORY, KINDS, NAME_RE, KindSpec, check_name, is_reserved, kind_spec
from .secrets import REDACTED
from .store import NOT_TEXT, Home
from .yamlio import YamlProblem, fast_load, split_front_matter

MISSING: Any = object()


# -- JSON merge patch (RFC 7386) ------------------------------------------------------------
def merge_patch(target: Any, patch: Any) -> Any:
    """Apply `patch` to `target` in place where both are mappings, so that a loaded
    round-trip document keeps its comments; values that do not change are not touched."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            new = merge_patch({}, value) if isinstance(value, dict) else value
            if key not in target or not _same(target[key], new):
                target[key] = _commented(new)
    return target


def _same(old: Any, new: Any) -> bool:
    """Equal as JSON values: 1 is not true, but a quoted string equals the plain one (and
    keeping the stored value keeps its quotes)."""
    if isinstance(old, bool) != isinstance(new, bool):
        return False
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(_same(a, b) for a, b in zip(old, new))
    return bool(old == new)


def _commented(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        from .yamlio import to_commented

        return to_commented(value)
    return value


# -- parsing one file -------------------------------------------------------------------------
def parse_text(spec: KindSpec, text: str, rel: str) -> tuple[dict[str, Any], str | None]:
    """(front matter or whole YAML mapping, body) of a resource file; `corrupt` if unreadable."""
    try:
        if NOT_TEXT in text:
            raise YamlProblem("not a readable text file (a folder, or not UTF-8)", None)
        body = None
        if spec.has_body:
            text, body = split_front_matter(text)
        data = fast_load(text) if text.strip() else {}
    except YamlProblem as exc:
        raise FwError("corrupt", f"{rel}: {exc.message}", _fix_hint(rel), path=rel, line=exc.line) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FwError("corrupt", f"{rel}: expected a mapping of fields", _fix_hint(rel), path=rel)
    return data, body


def _fix_hint(rel: str) -> str:
    return f"fix the file by hand, then run `fw home check`: {rel}"


def validate_stored(spec: KindSpec, name: str, data: dict[str, Any], rel: str) -> dict[str, Any]:
    """Validate a stored definition; `corrupt` (with path and field) when it does not fit."""
    from .models import dump, validate

    if not NAME_RE.fullmatch(name):
        raise FwError("corrupt", f"{rel}: {name!r} is not a valid {spec.name} name", _fix_hint(rel), path=rel)
    try:
        plain = dump(validate(spec.name, data))
    except FwError as exc:
        raise FwError("corrupt", f"{rel}: {exc.message}", _fix_hint(rel), path=rel, field=exc.extra.get("field")) from None
    if spec.name == "skill" and plain["name"] != name:
        raise FwError(
            "corrupt",
            f"{rel}: name {plain['name']!r} does not match its folder {name!r}",
            _fix_hint(rel),
            path=rel,
            field="name",
        )
    return plain


def load_record(home: Home, kind: str, name: str, rel: str) -> dict[str, Any]:
    """A validated principal or binding file; `corrupt` with path and field when it is not."""
    from .models import dump, validate

    text = home.read_text(rel)
    try:
        if text is None or NOT_TEXT in text:
            raise YamlProblem("the file is missing or not text", None)
        data = fast_load(text) or {}
        if not NAME_RE.fullmatch(name):
            raise YamlProblem(f"{name!r} is not a valid {kind} name", None)
        if kind == "principal" and is_reserved(name):
            raise YamlProblem(f"{name!r} is a reserved name ('manager', 'runtime...')", None)
        return dump(validate(kind, data))
    except YamlProblem as exc:
        raise FwError("corrupt", f"{rel}: {exc.message}", _fix_hint(rel), path=rel) from None
    except FwError as exc:
        raise FwError("corrupt", f"{rel}: {exc.message}", _fix_hint(rel), path=rel, field=exc.extra.get("field")) from None


def edit_record(home: Home, kind: str, rel: str, patch: dict[str, Any]) -> dict[str, Any]:
    """Merge `patch` into a principal's or binding's file (created if missing), keeping a
    person's comments; validate; write only if something changed. Caller holds the lock."""
    from .models import dump, validate
    from .yamlio import rt_dump, to_plain

    text = home.read_text(rel)
    doc, _ = load_for_edit(text or "", rel)
    before = to_plain(doc)
    merge_patch(doc, patch)
    _refuse_secret_values(home, to_plain(doc), None)
    plain = dump(validate(kind, to_plain(doc)))
    if text is None or to_plain(doc) != before:
        home.write_text(rel, rt_dump(doc))
    return plain


def refs_of(spec: KindSpec, plain: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for field, kind, is_list in spec.refs:
        value = plain.get(field)
        for ref in (value or []) if is_list else ([value] if value else []):
            out.append((kind, ref))
    return out


def index_entry(spec: KindSpec, category: str, name: str, rel: str, text: str | None) -> dict[str, Any]:
    """What the index keeps of one file: summary, references, or why it is corrupt.
    Never a secret value: the index lives outside secrets/."""
    entry: dict[str, Any] = {"name": name, "category": category, "path": rel}
    try:
        if text is None:
            raise FwError("corrupt", f"{rel}: the file is missing", _fix_hint(rel), path=rel)
        data, _ = parse_text(spec, text, rel)
        plain = validate_stored(spec, name, data, rel)
    except FwError as exc:
        entry["error"] = {"code": "corrupt", "message": exc.message, **exc.extra}
        return entry
    entry["summary"] = {k: plain[k] for k in spec.summary if k in plain}
    entry["refs"] = refs_of(spec, plain)
    entry["plaintext_secret"] = any(plain.get(f) for f in spec.secret_fields)
    return entry


def _entry_shape(entry: Any) -> bool:
    """Whether a cached index entry has the shape `index_entry` gives."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("category"), str):
        return False
    if "error" in entry:
        return isinstance(entry["error"], dict) and isinstance(entry["error"].get("message"), str)
    return (
        isinstance(entry.get("summary"), dict)
        and isinstance(entry.get("refs"), list)
        and all(isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r) for r in entry["refs"])
        and isinstance(entry.get("plaintext_secret"), bool)
    )


def scan(home: Home, kind: str, category: str | None = None) -> list[dict[str, Any]]:
    """Every resource of a kind as an index entry, read through the home's index."""
    spec = KINDS[kind]
    out = []
    for cat, name, rel in home.resource_files(spec, category):
        entry = home.cached(rel, lambda text, c=cat, n=name, r=rel: index_entry(spec, c, n, r, text), _entry_shape)
        out.append(entry)
    home.save_index()
    return out


def names(home: Home, kind: str) -> set[str]:
    return {e["name"] for e in scan(home, kind)}


def find_one(home: Home, spec: KindSpec, name: str) -> tuple[str, str]:
    found = home.locate(spec, name)
    if not found:
        raise FwError(
            "not_found",
            f"no {spec.name} named {name!r}",
            f"list them with `fw resource list {spec.name}`",
        )
    if len(found) > 1:
        cats = ", ".join(c for c, _ in found)
        raise FwError(
            "conflict",
            f"{spec.name} {name!r} exists in several categories ({cats})",
            "names are unique within a kind: remove or rename all copies but one by hand",
        )
    return found[0]


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


def _summary_item(home: Home, spec: KindSpec, entry: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = {"name": entry["name"], "category": entry["category"]}
    if "error" in entry:
        item["error"] = entry["error"]
        return item
    item.update(entry["summary"])
    if spec.name == "provider":
        item["api_key_set"] = entry["plaintext_secret"] or secrets.has(home, "provider", entry["name"])
    if spec.secret_fields and secrets.has(home, spec.name, entry["name"]):
        damaged = secrets.problem(home, spec.name, entry["name"])
        if damaged:
            item["error"] = damaged
    return item


# -- the operations ---------------------------------------------------------------------------
def resource_list(home: Home, kind: str, category: str | None = None) -> dict[str, Any]:
    spec = kind_spec(kind)
    if category is not None:
        _require_category(home, spec, check_name(category, "category"))
    items = [_summary_item(home, spec, e) for e in scan(home, kind, category)]
    return {"kind": kind, "items": items}


def resource_read(home: Home, kind: str, reference: str) -> dict[str, Any]:
    spec = kind_spec(kind)
    check_name(reference, f"{kind} reference")
    category, rel = find_one(home, spec, reference)
    text = home.read_text(rel)
    if text is None:
        raise FwError("corrupt", f"{rel}: the file is missing", _fix_hint(rel), path=rel)
    data, body = parse_text(spec, text, rel)
    plain = validate_stored(spec, reference, data, rel)
    return shown(home, spec, reference, category, plain, body)


def shown(home: Home, spec: KindSpec, name: str, category: str, plain: dict[str, Any], body: str | None) -> dict[str, Any]:
    """The result document of a read or a write: redacted data, and the body of a text kind."""
    result: dict[str, Any] = {"kind": spec.name, "name": name, "category": category, "data": present(home, spec, name, plain)}
    if spec.has_body:
        result["body"] = body
    return result


def _require_category(home: Home, spec: KindSpec, category: str) -> None:
    if category not in home.categories(spec):
        raise FwError(
            "invalid",
            f"{spec.name} category {category!r} does not exist",
            f"create it with `fw category create {spec.name} {category}`",
        )


def _strip_nulls(data: dict[str, Any]) -> dict[str, Any]:
    return merge_patch({}, data)


def _check_refs(home: Home, spec: KindSpec, name: str, plain: dict[str, Any]) -> None:
    known: dict[str, set[str]] = {}
    for kind, ref in refs_of(spec, plain):
        if kind not in known:
            known[kind] = names(home, kind)
        if ref not in known[kind]:
            raise FwError(
                "invalid",
                f"{spec.name} {name!r} names {kind} {ref!r}, which does not exist",
                f"create it first (`fw resource write {kind} {ref} --create --data ...`) "
                f"or see what exists with `fw resource list {kind}`",
                field=next(f for f, k, _ in spec.refs if k == kind),
            )


def _check_key_source(plain: dict[str, Any], stored_key: Any) -> None:
    key, env = stored_key, plain.get("api_key_env")
    if isinstance(key, str) and not key.strip():
        raise FwError("invalid", "api_key is empty", "give the key itself, or name its variable with api_key_env")
    if key is None and env is None:
        raise FwError(
            "invalid",
            "a provider needs a key: api_key or api_key_env",
            "pass the key with --api-key-stdin, or name its variable with api_key_env",
        )


def resource_write(
    home: Home,
    kind: str,
    reference: str,
    data: Any,
    *,
    create: bool = False,
    category: str | None = None,
) -> dict[str, Any]:
    """Create (a whole definition, a new name) or update (a JSON merge patch) one resource."""
    from .models import dump, validate
    from .yamlio import join_front_matter, rt_dump, to_commented, to_plain

    spec = kind_spec(kind)
    check_name(reference, f"{kind} reference")
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
            doc, old_body = load_for_edit(old_text, old_rel, has_body=spec.has_body)
            before = to_plain(doc)
            target_category = category or old_category
            stored_secret = _stored_secret(home, spec, reference, secret_patch)
            for field in spec.secret_fields:  # a secret written into the file by hand moves to secrets/
                if field in doc:
                    value = to_plain(doc.pop(field))
                    secrets.remember(value)
                    if isinstance(value, dict):
                        stored_secret[field] = {**value, **(stored_secret.get(field) or {})}
                    else:
                        stored_secret.setdefault(field, value)
            merge_patch(doc, patch)
        new_secret = merge_patch(copy.deepcopy(stored_secret), secret_patch)
        new_body = old_body if body is MISSING else (body or "")

        _refuse_secret_values(home, to_plain(doc), new_body)
        full = {**to_plain(doc), **new_secret}
        plain = dump(validate(kind, full))
        if kind == "provider":
            _check_key_source(plain, new_secret.get("api_key"))
        if kind == "skill" and plain["name"] != reference:
            raise FwError("invalid", f"a skill's name must be its reference {reference!r}", "drop name, or set it to the reference", field="name")
        _check_refs(home, spec, reference, plain)
        if target_category != old_category:
            _require_category(home, spec, target_category)

        new_rel = spec.relpath(target_category, reference)
        front_text = rt_dump(doc)
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
            if to_plain(doc) != before or new_body != old_body:  # a no-op edit rewrites nothing
                home.write_text(new_rel, new_text)

        result = shown(home, spec, reference, target_category, plain, new_body)
        if kind == "agent":
            from .identities import activation

            result["activation"] = activation(home, reference)
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


def _refuse_secret_values(home: Home, data: Any, body: str | None) -> None:
    """A stored secret value copied into a plain field (or a prompt's text) would be written
    outside secrets/: refuse, naming the field and never the value."""
    secrets.remember_home(home)
    for field, text in _strings(data, ""):
        if secrets.known_in(text):
            raise FwError(
                "invalid",
                f"{field} holds a secret value; secret values are stored only under secrets/",
                "remove the key from that field; a provider's key goes in api_key (or --api-key-stdin)",
                field=field,
            )
    if body and secrets.known_in(body):
        raise FwError("invalid", "body holds a secret value; secret values are stored only under secrets/", "remove the key from the text", field="body")


def _strings(data: Any, path: str) -> Any:
    """(field path, text) of every string in plain data, keys included."""
    if isinstance(data, dict):
        for key, value in data.items():
            sub = f"{path}.{key}" if path else str(key)
            yield sub, str(key)
            yield from _strings(value, sub)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings(value, f"{path}[{index}]")
    elif isinstance(data, str):
        yield path, data


def load_for_edit(text: str, rel: str, *, has_body: bool = False) -> tuple[Any, str | None]:
    """The round-trip document (comments, order and quotes kept) and body of a stored file."""
    from .yamlio import rt_load, to_commented

    body = None
    try:
        if NOT_TEXT in text:
            raise YamlProblem("not a readable text file (a folder, or not UTF-8)", None)
        front = text
        if has_body:
            front, body = split_front_matter(text)
        doc = rt_load(front) if front.strip() else None
    except YamlProblem as exc:
        raise FwError("corrupt", f"{rel}: {exc.message}", _fix_hint(rel), path=rel, line=exc.line) from None
    if doc is None:
        doc = to_commented({})
    if not isinstance(doc, dict):
        raise FwError("corrupt", f"{rel}: expected a mapping of fields", _fix_hint(rel), path=rel)
    return doc, body


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
        if category not in home.categories(spec):
            raise FwError("not_found", f"no {kind} category {category!r}", f"see them with `fw category list {kind}`")
        contents = home.leftovers(f"{spec.folder}/{category}")
        if contents:
            items = [f"{kind}/{n.rsplit('.', 1)[0] if spec.layout != 'skill' else n}" if not n.startswith(".") else n for n in contents]
            raise FwError(
                "not_empty",
                f"{kind} category {category!r} is not empty ({len(contents)} entries)",
                "move or delete what it holds first (`fw resource write KIND REF --category default --data '{}'`)",
                items=items,
            )
        home.remove_empty_dir(f"{spec.folder}/{category}")
    return {"kind": kind, "category": category, "deleted": True}
