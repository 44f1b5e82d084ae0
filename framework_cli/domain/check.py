"""`fw home check`: read every file of the home (through the index, where a file is unchanged)
and report what is wrong with it."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import FwError
from ..home import secrets
from ..home.kinds import DEFAULT_CATEGORY, DEFAULT_PROMPT, KINDS
from ..home.records import fix_hint, load_record
from ..home.store import Home
from ..state.store import STATE_FILE, StateStore, disk_is_full
from ..suggest import article
from .bots import check_bots
from .identities import BINDINGS, PRINCIPALS
from .plugins import check_plugin_files
from .resources import summaries
from .run_records import run_list

Checks = Sequence[Callable[[Home], list[dict[str, Any]]]]


def check_home(home: Home, more_warnings: Checks = ()) -> dict[str, Any]:
    """Read every file of the home; report corrupt files, dangling references and duplicates.
    A resource file whose stamp (mtime, size, inode) the index holds is not parsed again.
    `more_warnings` are checks from the floors above (whether each enabled plugin loads)."""

    problems: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []
    present: dict[str, set[str]] = {}
    valid: list[tuple[str, dict[str, Any]]] = []
    counts: dict[str, int] = {}

    for kind, spec in KINDS.items():
        seen: dict[str, str] = {}
        present[kind] = set()
        counts[kind] = 0
        # through the index, as a listing reads: a file whose stamp is unchanged is not read again
        for category, name, rel, summary in summaries(home, spec):
            counts[kind] += 1
            entry = {"name": name, "category": category, "path": rel, **summary}
            present[kind].add(name)
            if name in seen:
                problems.append(
                    {
                        "code": "duplicate",
                        "path": rel,
                        "message": f"{kind} {name!r} also exists at {seen[name]}; names are unique within a kind",
                    }
                )
            seen[name] = rel
            if "error" in entry:
                err = entry["error"]
                problems.append({**{k: v for k, v in err.items() if v is not None}, "hint": err.get("hint") or fix_hint(rel)})
                continue
            valid.append((kind, entry))
            if entry.get("plaintext_secret"):
                warnings.append(
                    {
                        "code": "plaintext_secret",
                        "path": rel,
                        "message": f"{rel} holds a secret value; the next `fw resource write` of it moves the value to secrets/",
                    }
                )
        _stray_files(home, spec, warnings)
    _short_env_keys(valid, warnings)

    for kind, entry in valid:
        for ref_kind, ref in entry["refs"]:
            if ref not in present[ref_kind]:
                problems.append(
                    {
                        "code": "dangling",
                        "path": entry["path"],
                        "message": f"{kind} {entry['name']!r} names {ref_kind} {ref!r}, which does not exist",
                        "reference": f"{ref_kind}/{ref}",
                    }
                )
    if DEFAULT_PROMPT not in present["prompt"]:
        problems.append(
            {
                "code": "missing",
                "path": KINDS["prompt"].relpath(DEFAULT_CATEGORY, DEFAULT_PROMPT),
                "message": "the default prompt is missing",
                "hint": "run `fw home init` on this home to restore it",
            }
        )

    principals: set[str] = set()
    for folder in (PRINCIPALS, BINDINGS):
        if home.path(folder).exists() and not home.path(folder).is_dir():
            problems.append({"code": "corrupt", "path": folder, "message": f"{folder} is not a folder",
                             "hint": f"move the file {folder} away, then run `fw home init` on this home to make the folder again"})
    for folder, kind in ((PRINCIPALS, "principal"), (BINDINGS, "binding")):
        for rel_path in sorted(_yaml_files(home.path(folder))):
            name, rel = rel_path[:-5], f"{folder}/{rel_path}"
            try:
                data = load_record(home, kind, name, rel)
            except FwError as exc:
                problems.append({"code": "corrupt", "message": exc.message, **{k: v for k, v in exc.extra.items() if v is not None}})
                continue
            if kind == "principal":
                principals.add(name)
                continue
            if data["agent"] not in present["agent"]:
                problems.append(
                    {"code": "dangling", "path": rel, "message": f"binding {name!r} names agent {data['agent']!r}, which does not exist", "reference": f"agent/{data['agent']}"}
                )
            if name not in principals:
                problems.append(
                    {"code": "dangling", "path": rel, "message": f"binding {name!r} has no principal {name!r}", "reference": f"principal/{name}"}
                )
    _check_state(home, problems, warnings)
    _check_secrets(home, problems)
    _check_runs(home, problems)
    _check_bots(home, problems)
    problems.extend(check_plugin_files(home))
    for check in more_warnings:
        warnings.extend(check(home))
    home.keep_refreshed_index()
    return {"home": str(home.root), "ok": not problems, "problems": problems, "warnings": warnings, "counts": counts}


def _short_env_keys(valid: list[tuple[str, dict[str, Any]]], warnings: list[dict[str, Any]]) -> None:
    """A provider key read from the environment is redacted from every output, but a short one
    only where it stands as a whole word, and one under 4 characters not at all."""
    for kind, entry in valid:
        variable = (entry.get("summary") or {}).get("api_key_env") if kind == "provider" else None
        value = os.environ.get(variable) if isinstance(variable, str) else None
        if not value or len(value) >= secrets.WHOLE_WORD_BELOW:
            continue
        how = ("is not redacted from fw's output at all" if len(value) < secrets.MIN_REDACTED
               else "is redacted from fw's output only where it stands as a whole word")
        warnings.append({"code": "short_key", "path": entry["path"],
                         "message": f"provider {entry['name']!r} reads its key from ${variable}, which holds {len(value)} characters: "
                                    f"so short a key {how}",
                         "hint": "use the provider's real key (real keys are far longer), or store one with --api-key-stdin"})


def _check_state(home: Home, problems: list[dict[str, Any]], warnings: list[dict[str, Any]]) -> None:
    """The runtime state database, if there is one, read without changing it. One that cannot
    be read because the disk is full is no damage: a warning says so."""

    path = home.path(STATE_FILE)
    if path.exists():
        problem = StateStore.problem(path)
        if problem and disk_is_full(str(path)):
            warnings.append({"code": "disk_full", "path": STATE_FILE,
                             "message": f"{STATE_FILE} could not be checked: the disk that holds the home is full ({problem})",
                             "hint": "free some space there"})
        elif problem:
            problems.append({"code": "corrupt", "path": STATE_FILE, "message": f"{STATE_FILE} is damaged: {problem}",
                             "hint": f"move {STATE_FILE} aside to start with an empty runtime state"})


def _check_secrets(home: Home, problems: list[dict[str, Any]]) -> None:

    for kind, name in secrets.stored(home):
        damaged = secrets.problem(home, kind, name)
        if damaged:
            problems.append({"code": "corrupt", "path": damaged["path"], "message": damaged["message"]})


def _check_runs(home: Home, problems: list[dict[str, Any]]) -> None:

    for run in run_list(home)["runs"]:
        if "error" in run:
            problems.append({"code": "corrupt", "path": run["error"]["path"], "message": run["error"]["message"]})


def _check_bots(home: Home, problems: list[dict[str, Any]]) -> None:

    problems.extend(check_bots(home))


def _yaml_files(folder: Path) -> list[str]:
    try:
        return [e.name for e in os.scandir(folder) if e.name.endswith(".yaml") and not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):  # a file in a folder's place is reported once, by the caller
        return []


def _stray_files(home: Home, spec: Any, warnings: list[dict[str, Any]]) -> None:
    """Files in a kind's folder that fw does not read, so that nobody wonders why."""
    suffix = {"yaml": ".yaml", "markdown": ".md"}.get(spec.layout)
    for category in home.categories(spec):
        folder = home.path(f"{spec.folder}/{category}")
        for entry in os.scandir(folder):
            if entry.name.startswith("."):
                continue
            if spec.layout == "skill":
                stray = not entry.is_dir()  # a folder without SKILL.md is reported as corrupt
            else:
                stray = not entry.name.endswith(suffix or "")  # a folder named so is reported as corrupt
            if stray:
                rel = f"{spec.folder}/{category}/{entry.name}"
                warnings.append({"code": "stray", "path": rel, "message": f"{rel} is not {article(spec.name)} file and is ignored"})
