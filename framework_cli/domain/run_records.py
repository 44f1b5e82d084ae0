"""Run records: where they are kept, what they say of a run as it stands, and its life after
its start (shown, listed, ended, pruned; `runs.py` starts runs).

A run record (`runs/<run_id>.json`, or a row of the state store with PostgreSQL) holds the
agent's definition as it was, its fingerprint, the identity the run acts as, the tools granted
and the lease. Every tool call checks the record again: ended, expired or missing runs refuse
every call.

A run driven by a process of fw (`fw agent run`, `fw dispatch`, `fw bot serve`, `fw event
handle`) records that process as its `owner`, whose heartbeat it renews while it lives. A run
whose owner is gone (on its host: the process is gone; elsewhere: its heartbeat is older than
ABANDONED_SECONDS) is ended as `abandoned` by the next fw process that touches it: its token
and every call are refused at once, not when its lease runs out. A run started for a runner
launched some other way (`fw run start`, `--no-run`) has no owner and lives by its lease.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import FwError, without_lone_surrogates
from ..home.secrets import GATEWAY_TOKEN_PREFIX, redact
from ..home.store import Home
from ..liveness import HOST, gone_here, me
from ..state.location import state_url
from ..state.store import StateStore
from ..suggest import did_you_mean, hint_with

RUNS = "runs"


class RunRecords:
    """Where run records are kept: a file each in `runs/` (with SQLite: as ever), or a row each
    of the state store's `runs` table (with PostgreSQL: every host sees every run). `locked`
    holds one record for a read and a write (its file's lock; its row's transaction)."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.in_store = state_url(home.root) is not None
        self._store: Any = None  # the open transaction of `locked`, with PostgreSQL

    @contextmanager
    def locked(self, run_id: str) -> Iterator[RunRecords]:
        if not self.in_store:
            with self.home.record_locked(f"{RUNS}/{run_id}.json"):
                yield self
            return
        with StateStore.open(self.home) as store, store.transaction():
            self._store = store
            try:
                yield self
            finally:
                self._store = None

    def read(self, run_id: str) -> str | None:
        if not self.in_store:
            return self.home.read_text(f"{RUNS}/{run_id}.json")
        row = self._query(lambda store: store.one("SELECT record FROM runs WHERE run_id = ?", (run_id,)))
        return row["record"] if row else None

    def write(self, run_id: str, text: str) -> None:
        if not self.in_store:
            self.home.write_text(f"{RUNS}/{run_id}.json", text)
            return

        def put(store: Any) -> None:
            with store.transaction():
                if not store.execute("UPDATE runs SET record = ? WHERE run_id = ?", (text, run_id)).rowcount:
                    store.insert("runs", {"run_id": run_id, "record": text})

        self._query(put)

    def remove(self, run_id: str) -> None:
        if not self.in_store:
            self.home.remove(f"{RUNS}/{run_id}.json")
            return

        def drop(store: Any) -> None:
            with store.transaction():
                store.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))

        self._query(drop)

    def ids(self) -> list[str]:
        if not self.in_store:
            try:
                names = os.listdir(self.home.path(RUNS))
            except FileNotFoundError:
                return []
            return sorted(n[:-5] for n in names if n.endswith(".json") and RUN_ID_RE.fullmatch(n[:-5]))
        return [r["run_id"] for r in self._query(lambda store: store.all("SELECT run_id FROM runs ORDER BY run_id"))]

    def _query(self, work: Callable[[Any], Any]) -> Any:
        if self._store is not None:
            return work(self._store)
        with StateStore.open(self.home) as store:
            return work(store)


RUN_ID_RE = re.compile(r"run-[0-9]{8}T[0-9]{6}-[0-9a-f]{8}")


# A gateway token names its run (not a secret) and carries 32 random bytes (the secret). Only
# the sha256 of the whole token is kept, in the run record; the token is shown once, at start.
TOKEN_RE = re.compile(GATEWAY_TOKEN_PREFIX + r"(run-[0-9]{8}T[0-9]{6}-[0-9a-f]{8})_[A-Za-z0-9_-]{43}")


TOKEN_HASH = "gateway_token_sha256"


DEFAULT_LEASE_SECONDS = 3600


OWNER_BEAT_SECONDS = 20.0  # how old an owned run's heartbeat gets before its owner renews it
BEAT_LOOK_SECONDS = 5.0  # how often the owner looks for heartbeats to renew


ABANDONED_SECONDS = 60.0  # a run whose owner (on another host) has not beaten for this long is abandoned


MAX_LEASE_SECONDS = 366 * 24 * 3600  # a year: past it a lease is a mistake, not a plan


# What a run record must hold, and of which type, for any call to trust it.
RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "run_id": str,
    "mode": str,
    "identity": str,
    "agent": str,
    "fingerprint": str,
    "definition": dict,
    "tools": list,
    "status": str,
    "started_at": str,
    "lease_expires_at": str,
}


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def stamp_of(moment: datetime) -> str:
    # milliseconds: a lease of 1 s must not be cut to what is left of the current second
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def record_text(record: dict[str, Any]) -> str:
    """A run record as its file holds it: one field a line, each value as one line of JSON.
    Written by the C encoder: an indented dump runs the pure-Python one, about a millisecond
    for a record with many tools, twice in every run."""
    fields = ",\n".join(f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in record.items())
    return "{\n" + fields + "\n}\n"


def token_hash(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def run_for_token(home: Home, token: str | None) -> dict[str, Any]:
    """The record of the run a gateway token belongs to, if that run may still act; `denied`
    for no token or an unknown one, `run_ended` / `lease_expired` for a run that may not."""
    match = TOKEN_RE.fullmatch(token or "")
    if match is None:
        raise FwError("denied", "no valid gateway token", "give the token `fw run start` printed, as Authorization: Bearer TOKEN",
                      reason="token")
    try:
        record = load_run(home, match.group(1))
    except FwError as exc:
        if exc.code == "corrupt":
            raise
        record = None
    stored = record.get(TOKEN_HASH) if record else None
    if not isinstance(stored, str) or not hmac.compare_digest(stored, token_hash(token or "")):
        raise FwError("denied", "no valid gateway token", "give the token `fw run start` printed, as Authorization: Bearer TOKEN",
                      reason="token")
    return require_active(unless_abandoned(home, record))  # type: ignore[arg-type]


def present(record: dict[str, Any]) -> dict[str, Any]:
    """A run as shown: its record with the status as it stands now (a lapsed lease is `expired`)."""
    shown = {k: v for k, v in record.items() if k != TOKEN_HASH}
    if shown["status"] == "active" and utc_now() >= _parse(shown["lease_expires_at"]):
        shown["status"] = "expired"
    return shown


def load_run(home: Home, run_id: str, records: RunRecords | None = None) -> dict[str, Any]:
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        raise FwError("invalid", f"{run_id!r} is not a run id", "run ids look like run-20261130T120000-1a2b3c4d; see them with `fw run list`")
    text = (records or RunRecords(home)).read(run_id)
    if text is None:
        raise FwError("not_found", f"no run {run_id!r}", "see `fw run list`")
    rel = f"{RUNS}/{run_id}.json"
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    problem = _record_problem(record, run_id)
    if problem:
        raise FwError("corrupt", f"{rel}: {problem}", "this run cannot act; start a new one with `fw run start`", path=rel)
    return record


def _record_problem(record: Any, run_id: str) -> str | None:
    """What is wrong with a run record, or None: a record is trusted only whole."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for name, kind in RECORD_FIELDS.items():
        if not isinstance(record.get(name), kind):
            return f"{name} is missing or of the wrong type"
    if record["run_id"] != run_id:
        return "its run_id is not its file name"
    if record["status"] not in ("active", "ended"):
        return f"unknown status {record['status']!r}"
    try:
        _parse(record["lease_expires_at"])
    except ValueError:
        return "lease_expires_at is not a time"
    if not all(isinstance(t, str) for t in record["tools"]):
        return "tools holds something other than names"
    return None


def active_run(home: Home, run_id: str) -> dict[str, Any]:
    """The run's record if it may still act; `run_ended` or `lease_expired` otherwise (a run
    whose owner is gone is ended here, as `abandoned`)."""
    return require_active(unless_abandoned(home, load_run(home, run_id)))


def owner_gone(record: dict[str, Any]) -> bool:
    """Whether the process that drives an active run is gone: on its host, by the process
    itself; elsewhere, by a heartbeat older than ABANDONED_SECONDS. A run without an owner
    (started for a runner launched some other way) is never abandoned."""
    owner = record.get("owner")
    if record.get("status") != "active" or not isinstance(owner, dict):
        return False
    process, host = owner.get("process"), owner.get("host")
    if not isinstance(process, str) or not isinstance(host, str):
        return False
    if host == HOST:
        return process != me() and gone_here(process)
    try:
        beat = _parse(str(owner.get("heartbeat_at")))
    except ValueError:
        return True
    return utc_now() - beat > timedelta(seconds=ABANDONED_SECONDS)


def unless_abandoned(home: Home, record: dict[str, Any]) -> dict[str, Any]:
    """The record as it stands once an abandoned run is ended (`end_reason: abandoned`)."""
    if not owner_gone(record):
        return record
    try:
        return run_end(home, record["run_id"], reason="abandoned", only_if_abandoned=True)
    except FwError:
        return record


def require_active(record: dict[str, Any]) -> dict[str, Any]:
    """`record` if its run may still act; `run_ended` or `lease_expired` otherwise."""
    run_id = record["run_id"]
    record = present(record)
    if record["status"] == "ended":
        why = "the process that drove it is gone (abandoned)" if record.get("end_reason") == "abandoned" else "it has ended"
        raise FwError("run_ended", f"run {run_id} can make no further calls: {why}", f"start a new run with `{_run_start_again(record)}`",
                      **({"end_reason": record["end_reason"]} if record.get("end_reason") else {}))
    if record["status"] == "expired":
        raise FwError("lease_expired", f"the lease of run {run_id} ran out at {record['lease_expires_at']}",
                      f"start a new run with `{_run_start_again(record)}`")
    return record


def _run_start_again(record: dict[str, Any]) -> str:
    """The command that starts a run like this one: as its principal (managed), or of its agent."""
    if record.get("mode") == "managed" and record.get("identity"):
        return f"fw run start --principal {record['identity']}"
    return f"fw run start --agent {record['agent']}" if record.get("agent") else "fw run start --agent AGENT"


RUN_ID_PART_RE = re.compile(r"run-[0-9a-fT-]*|[0-9a-fT-]{4,}")  # a part of a run id, as `fw audit list` shows one


def run_ids(home: Home) -> list[str]:
    return RunRecords(home).ids()


def resolve_run_id(home: Home, given: Any) -> str:
    """A whole run id, from itself or from a unique part of it: its end (as `fw audit list`
    shows it) or its start, as git takes a short hash. An ambiguous part is refused with
    the runs it matches."""
    if isinstance(given, str) and RUN_ID_RE.fullmatch(given):
        return given
    if not isinstance(given, str) or not RUN_ID_PART_RE.fullmatch(given):
        short = isinstance(given, str) and re.fullmatch(r"[0-9a-fT-]{1,3}", given) is not None
        raise FwError("invalid", f"{given!r} is too short to name a run: give 4 characters or more of its id" if short
                      else f"{given!r} is not a run id",
                      "run ids look like run-20261130T120000-1a2b3c4d, or their last 4 characters or more; see them with `fw run list`")
    ids = run_ids(home)
    matches = [r for r in ids if r.endswith(given) or r.startswith(given)]
    if not matches:
        suggestion = did_you_mean(given, {r[-len(given):] for r in ids})
        raise FwError("not_found", f"no run {given!r}", hint_with(suggestion, "see `fw run list`"), **suggestion)
    if len(matches) > 1:
        shown = ", ".join(matches[:10]) + (", ..." if len(matches) > 10 else "")
        raise FwError("conflict", f"{given!r} is part of {len(matches)} run ids", f"give more of it; it matches {shown}", candidates=matches)
    return matches[0]


def run_show(home: Home, run_id: str) -> dict[str, Any]:
    home_run = load_run(home, resolve_run_id(home, run_id))
    return present(unless_abandoned(home, home_run))


RUN_STATUSES = ("active", "ended", "expired", "corrupt")


def run_list(home: Home, status: str | None = None, agent: str | None = None) -> dict[str, Any]:
    """Every run record, oldest id first; only those of a `status` or an `agent` when given."""
    if status is not None and status not in RUN_STATUSES:
        suggestion = did_you_mean(status, RUN_STATUSES)
        raise FwError("invalid", f"unknown run status {status!r}", hint_with(suggestion, f"one of: {', '.join(RUN_STATUSES)}"), **suggestion)
    runs = _all_runs(home)
    return {"runs": [r for r in runs if (status is None or r["status"] == status) and (agent is None or r.get("agent") == agent)]}


def _all_runs(home: Home) -> list[dict[str, Any]]:
    runs = []
    records = RunRecords(home)
    if records.in_store:
        names = [f"{run_id}.json" for run_id in records.ids()]
    else:
        try:
            names = sorted(n for n in os.listdir(home.path(RUNS)) if n.endswith(".json") and not n.startswith("."))
        except FileNotFoundError:
            names = []
    for name in names:
        if not RUN_ID_RE.fullmatch(name[:-5]):
            continue  # not a run record's name
        try:
            record = present(unless_abandoned(home, load_run(home, name[:-5])))
        except FwError as exc:  # a damaged record is listed as such, never hidden
            runs.append({"run_id": name[:-5], "status": "corrupt", "error": {"code": exc.code, "message": exc.message, "path": f"{RUNS}/{name}"}})
            continue
        runs.append({**{k: record[k] for k in ("run_id", "mode", "identity", "agent", "status", "started_at", "lease_expires_at", "fingerprint")},
                     "outcome": shown_outcome(record)})
    return runs


def runner_outcome(status: str, error: Any = None) -> dict[str, Any]:
    """What came of a runner's work, as its run's record keeps it: `{"status"}` (completed or
    max_rounds, the runner's; failed; interrupted: Ctrl-C, a stop, a cancelled task), with the
    error's code and its redacted message, cut, for a failure."""
    doc: dict[str, Any] = {"status": status}
    if error is not None:
        doc["error"] = {"code": error.code, "message": without_lone_surrogates(redact(error.message))[:OUTCOME_CHARS]}
    return doc


OUTCOME_CHARS = 300  # of a failure's message kept in the record (redacted first, then cut)


def shown_outcome(record: dict[str, Any]) -> str | None:
    """A run's outcome in a word or two, for a list: `completed`, `failed (unavailable)`,
    `interrupted`, `abandoned`; None while it is active, or when no runner said (a run
    started with `fw run start`, or ended with `fw run end` while its runner worked)."""
    if record.get("status") == "active":
        return None
    outcome = record.get("outcome")
    if isinstance(outcome, dict) and isinstance(outcome.get("status"), str):
        code = (outcome.get("error") or {}).get("code") if isinstance(outcome.get("error"), dict) else None
        return f"{outcome['status']} ({code})" if code and code != outcome["status"] else outcome["status"]
    return str(record["end_reason"]) if record.get("end_reason") else None


def run_end(home: Home, run_id: str, reason: str | None = None, only_if_abandoned: bool = False,
            outcome: dict[str, Any] | None = None) -> dict[str, Any]:
    """End a run: every later call of it is refused. Ending an ended run changes nothing.
    `reason` is kept as `end_reason` (`abandoned`: its owner is gone); `only_if_abandoned`
    ends it only if its owner is still found gone under the record's lock. `outcome` is what
    came of its runner's work, kept as `outcome` (see `runner_outcome`)."""
    run_id = resolve_run_id(home, run_id)
    records = RunRecords(home)
    with records.locked(run_id):
        record = load_run(home, run_id, records)
        if record["status"] != "ended" and (not only_if_abandoned or owner_gone(record)):
            record["status"] = "ended"
            record["ended_at"] = stamp_of(utc_now())
            if reason:
                record["end_reason"] = reason
            if outcome:
                record["outcome"] = outcome
            records.write(run_id, record_text(record))
    BEATS.disown(run_id)
    return present(record)


class _OwnerBeats:
    """The heartbeat of the runs this process drives: each active one has `owner.heartbeat_at`
    renewed once it is OWNER_BEAT_SECONDS old, so that a host that cannot see this process can
    tell it lives (its start is its first beat: a run shorter than that is never written for
    it, however many run at once). One daemon thread a process, started with its first owned
    run; it looks every BEAT_LOOK_SECONDS, so a heartbeat is no older than their sum, plus the
    time its renewal waits for the record's lock."""

    def __init__(self) -> None:
        import threading

        self._runs: dict[str, tuple[Any, float]] = {}  # run id -> the root of its home, when it last beat (monotonic)
        self._lock = threading.Lock()
        self._thread: Any = None

    def own(self, home: Home, run_id: str, beat_at: datetime) -> None:
        """Drive `run_id`, whose record's heartbeat says `beat_at` (its start: the record may
        have waited for its lock since)."""
        import threading

        age = max(0.0, (utc_now() - beat_at).total_seconds())
        with self._lock:
            self._runs[run_id] = (home.root, time.monotonic() - age)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._beat, name="fw-run-owner", daemon=True)
                self._thread.start()

    def disown(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def due(self, now: float) -> list[tuple[str, Any]]:
        """The runs whose last beat is OWNER_BEAT_SECONDS old at `now`: (run id, root)."""
        with self._lock:
            return [(run_id, root) for run_id, (root, beaten) in self._runs.items() if now - beaten >= OWNER_BEAT_SECONDS]

    def _beat(self) -> None:
        while True:
            time.sleep(BEAT_LOOK_SECONDS)
            for run_id, root in self.due(time.monotonic()):
                try:
                    renew_heartbeat(Home(root), run_id)
                except FwError as exc:
                    if exc.code == "not_found":  # removed (its home deleted, say): nothing left to beat for
                        self.disown(run_id)
                    continue  # a damaged record, a full disk, the store busy: the next look tries again
                except Exception:
                    continue
                with self._lock:
                    if run_id in self._runs:
                        self._runs[run_id] = (root, time.monotonic())


def renew_heartbeat(home: Home, run_id: str) -> None:
    records = RunRecords(home)
    with records.locked(run_id):
        record = load_run(home, run_id, records)
        owner = record.get("owner")
        if present(record)["status"] != "active" or not isinstance(owner, dict):  # ended, or its lease ran out
            BEATS.disown(run_id)
            return
        owner["heartbeat_at"] = stamp_of(utc_now())
        records.write(run_id, record_text(record))


BEATS = _OwnerBeats()


def _finished_at(record: dict[str, Any]) -> datetime | None:
    """When a run stopped being able to act: ended, or its lease ran out; None while active."""
    shown = present(record)
    if shown["status"] == "ended":
        return _parse(record["ended_at"]) if isinstance(record.get("ended_at"), str) else _parse(record["lease_expires_at"])
    if shown["status"] == "expired":
        return _parse(record["lease_expires_at"])
    return None


def run_prune(home: Home, ended_only: bool = False, older_than: float | None = None) -> dict[str, Any]:
    """Delete the records of runs that can no longer act (ended, or lease run out): with
    `ended_only` only those ended by `fw run end`, with `older_than` (seconds) only those
    that stopped longer ago than that. Active runs and damaged records are kept."""
    pruned, kept = [], 0
    cutoff = utc_now() - timedelta(seconds=older_than or 0)
    records = RunRecords(home)
    with home.locked():
        for run_id in records.ids():
            with records.locked(run_id):  # a run that ends meanwhile is decided on as ended
                try:
                    record = load_run(home, run_id, records)
                    finished = _finished_at(record)
                except (FwError, ValueError):
                    finished, record = None, None  # a damaged record is left for `fw home check` to report
                if record is None or finished is None or (ended_only and record["status"] != "ended") or finished > cutoff:
                    kept += 1
                    continue
                records.remove(run_id)
            pruned.append(run_id)
    return {"pruned": pruned, "kept": kept}
