"""One file at a time: parsing, validating and round-trip editing of the files of the home.

These are the file-level helpers every operation on a resource, a principal or a binding
shares: find a resource's file, parse and validate it (`corrupt` with path and field when it
does not fit), and merge a patch into it keeping a person's comments.
"""

from __future__ import annotations

from typing import Any

from ..errors import FwError
from ..suggest import did_you_mean, hint_with
from . import secrets
from .kinds import KINDS, NAME_RE, KindSpec, check_name, is_reserved
from .store import ABSENT, NOT_TEXT, Home
from .yamlio import YamlProblem, fast_load, rt_dump, rt_load, split_front_matter, to_commented, to_plain


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
                replaced, target[key] = target.get(key), _commented(new)
                _keep_comments(replaced, target[key])
    return target


def _keep_comments(old: Any, new: Any) -> None:
    """A list replaced by a patch keeps the comments of the file: each item that stays where it
    was keeps its own end-of-line comment, and the lines of comments after the old list (which
    the YAML reader hangs on its last item) follow the new one's last item."""
    import copy

    comments = getattr(old, "ca", None)
    if not isinstance(old, list) or not isinstance(new, list) or comments is None or not old or not new:
        return
    line_comments: dict[int, str] = {}
    after = ""
    for index, found in comments.items.items():
        token = found[0] if found else None
        if token is None or not isinstance(index, int):
            continue
        own, _, rest = token.value.partition("\n") if not token.value.startswith("\n") else ("", "", token.value[1:])
        if own.strip() and index < len(new) and _same(old[index], new[index]):
            line_comments[index] = own
        if index == len(old) - 1:
            after = rest
    if not line_comments and not after:
        return
    template = next(f[0] for f in comments.items.values() if f and f[0] is not None)
    last = len(new) - 1
    for index in sorted(set(line_comments) | ({last} if after else set())):
        token = copy.copy(template)
        token.value = (line_comments.get(index, "") + "\n" + (after if index == last else "")) if index in line_comments \
            else "\n" + after
        new.ca.items[index] = [token, None, None, None]


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
        raise FwError("corrupt", f"{rel}: {exc.message}", fix_hint(rel), path=rel, line=exc.line) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FwError("corrupt", f"{rel}: expected a mapping of fields", fix_hint(rel), path=rel)
    return data, body


def fix_hint(rel: str) -> str:
    """How to repair a broken file: a resource's in $EDITOR (a whole new text replaces a file
    that cannot be read), any other by hand."""
    parts = rel.split("/")
    spec = next((s for s in KINDS.values() if s.folder == parts[0]), None)
    if spec is not None and len(parts) >= 3:
        name = parts[2] if spec.layout == "skill" else parts[2].rsplit(".", 1)[0]
        return f"fix it with `fw resource edit {spec.name} {name}` (or by hand), then run `fw home check`: {rel}"
    return f"fix the file by hand, then run `fw home check`: {rel}"


def validate_stored(spec: KindSpec, name: str, data: dict[str, Any], rel: str) -> dict[str, Any]:
    """Validate a stored definition; `corrupt` (with path and field) when it does not fit."""
    from .models import dump, validate  # lazy: start-up speed

    if not NAME_RE.fullmatch(name):
        raise FwError("corrupt", f"{rel}: {name!r} is not a valid {spec.name} name", fix_hint(rel), path=rel)
    try:
        plain = dump(validate(spec.name, data))
    except FwError as exc:
        raise FwError("corrupt", f"{rel}: {exc.message}", fix_hint(rel), path=rel, field=exc.extra.get("field")) from None
    if spec.name == "skill" and plain["name"] != name:
        raise FwError(
            "corrupt",
            f"{rel}: name {plain['name']!r} does not match its folder {name!r}",
            fix_hint(rel),
            path=rel,
            field="name",
        )
    return plain


def load_record(home: Home, kind: str, name: str, rel: str) -> dict[str, Any]:
    """A validated principal, binding or bot file; `corrupt` with path and field when it is
    not. Read through the home's index, as listings are: an unchanged file is neither parsed
    nor validated again (so `fw message post`, which reads every principal, loads neither the
    YAML parser nor the models). The caller saves the index when done."""
    entry = home.cached(rel, lambda text: _record_entry(kind, name, rel, text), _checked_again)
    if "error" in entry:
        raise FwError("corrupt", entry["error"], fix_hint(rel), **entry["extra"])
    return plain_copy(entry["record"])  # the index's own entry must not change with the caller's copy


def find_record(home: Home, kind: str, name: str, rel: str) -> dict[str, Any] | None:
    """`load_record`, or None when there is no such file: one look at the disk where asking
    `home.exists` first takes two (a run's start reads its principal and binding several
    times). A dry run asks `exists`, which sees the writes it planned."""
    if home.is_dry_run:
        return load_record(home, kind, name, rel) if home.exists(rel) else None
    try:
        entry = home.cached(rel, lambda text: _record_entry(kind, name, rel, text), _checked_again)
    except OSError as exc:
        if exc.errno in ABSENT:  # a symbolic link that loops, say: not there, as `exists` takes it
            return None
        raise
    if entry.get("missing"):
        return None
    if "error" in entry:
        raise FwError("corrupt", entry["error"], fix_hint(rel), **entry["extra"])
    return plain_copy(entry["record"])


def plain_copy(value: Any) -> Any:
    """A copy of JSON-shaped data (what the index keeps: dicts, lists and plain values), made
    several times faster than `copy.deepcopy`, which a run's start pays a dozen times."""
    if type(value) is dict:
        return {key: plain_copy(item) for key, item in value.items()}
    if type(value) is list:
        return [plain_copy(item) for item in value]
    return value  # text, numbers, booleans, None: never changed in place


def _checked_again(entry: Any) -> bool:
    """An entry of an index fw did not write as it is (no checksum) is never trusted: the
    file is read and validated again, and the index rewritten."""
    return False


def _record_entry(kind: str, name: str, rel: str, text: str | None) -> dict[str, Any]:
    """What the index keeps of a principal, binding or bot file: the validated record, or
    why it is corrupt."""
    if text is None:  # never kept in the index (a file that is not there has no stamp); loads nothing
        return {"missing": True, "error": f"{rel}: the file is missing", "extra": {"path": rel}}
    from .models import dump, validate  # lazy: start-up speed

    try:
        if NOT_TEXT in text:
            raise YamlProblem("the file is missing or not text", None)
        data = fast_load(text) or {}
        if not NAME_RE.fullmatch(name):
            raise YamlProblem(f"{name!r} is not a valid {kind} name", None)
        if kind == "principal" and is_reserved(name):
            raise YamlProblem(f"{name!r} is a reserved name ('manager', 'runtime...')", None)
        return {"record": dump(validate(kind, data))}
    except YamlProblem as exc:
        return {"error": f"{rel}: {exc.message}", "extra": {"path": rel}}
    except FwError as exc:
        return {"error": f"{rel}: {exc.message}", "extra": {"path": rel, "field": exc.extra.get("field")}}


def edit_record(home: Home, kind: str, rel: str, patch: dict[str, Any]) -> dict[str, Any]:
    """Merge `patch` into a principal's or binding's file (created if missing), keeping a
    person's comments; validate; write only if something changed. Caller holds the lock."""
    from .models import dump, validate  # lazy: start-up speed

    text = home.read_text(rel)
    doc, _ = load_for_edit(text or "", rel)
    before = to_plain(doc)
    merge_patch(doc, patch)
    refuse_secret_values(home, to_plain(doc), None)
    plain = dump(validate(kind, to_plain(doc)))
    if text is None or to_plain(doc) != before:
        home.write_text(rel, rt_dump(doc))
    return plain


def validate_record(home: Home, kind: str, data: dict[str, Any]) -> None:
    """Check a whole principal, binding or bot record before anything is written (`invalid`
    naming the field); a key that is None is one left out."""
    from .models import validate  # lazy: start-up speed

    plain = {k: v for k, v in data.items() if v is not None}
    refuse_secret_values(home, plain, None)
    validate(kind, plain)


def resource_names(home: Home, spec: KindSpec) -> set[str]:
    """The names of a kind's files, read from the folders alone (no file is parsed)."""
    return {name for _, name, _ in home.resource_files(spec)}


def read_definition(home: Home, spec: KindSpec, name: str) -> tuple[str, dict[str, Any], str | None]:
    """(category, validated definition, body) of one resource; `not_found` or `corrupt`.
    A definition (with its body, for a prompt or skill) is read through the kind's definitions
    index, so that `fw run start` parses and validates nothing it read before; one that holds a
    secret value (a key written into the file by hand) never goes in the index, and is read again."""
    category, rel = find_one(home, spec, name)
    entry = home.cached(rel, lambda text: _definition_entry(spec, name, rel, text), _checked_again, index_name=f"{spec.folder}-definitions")
    home.keep_refreshed_index()
    if "error" in entry:
        raise FwError("corrupt", entry["error"], entry["hint"], **entry["extra"])
    if "definition" not in entry:
        return (category, *_parse_definition(home.read_text(rel), spec, name, rel))
    return category, plain_copy(entry["definition"]), entry.get("body")


def _parse_definition(text: str | None, spec: KindSpec, name: str, rel: str) -> tuple[dict[str, Any], str | None]:
    if text is None:
        raise FwError("corrupt", f"{rel}: the file is missing", fix_hint(rel), path=rel)
    data, body = parse_text(spec, text, rel)
    return validate_stored(spec, name, data, rel), body


def _definition_entry(spec: KindSpec, name: str, rel: str, text: str | None) -> dict[str, Any]:
    """What a definitions index keeps of a file: the validated definition (never one that
    holds a secret value: the index lives outside secrets/), or why the file is corrupt."""
    try:
        plain, body = _parse_definition(text, spec, name, rel)
    except FwError as exc:
        return {"error": exc.message, "hint": exc.hint, "extra": exc.extra}
    if any(plain.get(field) for field in spec.secret_fields) or (body and secrets.known_in(body)):
        return {"holds_secret": True}  # a key in a file (by hand) is read from the file each time
    return {"definition": plain, **({"body": body} if spec.has_body else {})}


def find_one(home: Home, spec: KindSpec, name: str) -> tuple[str, str]:
    found = home.locate(spec, name)
    if not found:
        suggestion = did_you_mean(name, resource_names(home, spec))
        raise FwError(
            "not_found",
            f"no {spec.name} named {name!r}",
            hint_with(suggestion, f"list them with `fw resource list {spec.name}`"),
            **suggestion,
        )
    if len(found) > 1:
        cats = ", ".join(c for c, _ in found)
        raise FwError(
            "conflict",
            f"{spec.name} {name!r} exists in several categories ({cats})",
            "names are unique within a kind: remove or rename all copies but one by hand",
        )
    return found[0]


def check_reference(home: Home, spec: KindSpec, name: object) -> str:
    """`check_name` for a reference to an existing resource: a malformed one close to a
    name of the home (`Ops` for `ops`) says which it probably meant."""
    try:
        return check_name(name, f"{spec.name} reference")
    except FwError as exc:
        suggestion = did_you_mean(name, resource_names(home, spec))
        raise FwError(exc.code, exc.message, hint_with(suggestion, exc.hint), **suggestion) from None


def refuse_secret_values(home: Home, data: Any, body: str | None) -> None:
    """A stored secret value copied into a plain field (or a prompt's text) would be written
    outside secrets/: refuse, naming the field and never the value."""
    fields = dict(data) if isinstance(data, dict) else {"data": data}
    secrets.refuse(home, fields, "remove the key from that field; a provider's key goes in api_key (or --api-key-stdin)")
    secrets.refuse(home, {"body": body or None}, "remove the key from the text")


def load_for_edit(text: str, rel: str, *, has_body: bool = False) -> tuple[Any, str | None]:
    """The round-trip document (comments, order and quotes kept) and body of a stored file."""

    body = None
    try:
        if NOT_TEXT in text:
            raise YamlProblem("not a readable text file (a folder, or not UTF-8)", None)
        front = text
        if has_body:
            front, body = split_front_matter(text)
        if front.strip():
            fast_load(front)  # a broken file is reported in the reader's words, on write as on read
        doc = rt_load(front) if front.strip() else None
    except YamlProblem as exc:
        raise FwError("corrupt", f"{rel}: {exc.message}", fix_hint(rel), path=rel, line=exc.line) from None
    if doc is None:
        doc = to_commented({})
    if not isinstance(doc, dict):
        raise FwError("corrupt", f"{rel}: expected a mapping of fields", fix_hint(rel), path=rel)
    return doc, body
