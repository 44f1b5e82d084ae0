"""The home store: the only code that touches the home's files.

Every write takes the home's lock (a separate `.lock` file), writes a temp file beside its
target, fsyncs it and `os.replace`s it over the target, so a killed process leaves the old
file or the new one. A run's record is written under a lock of its own instead (one of the
files of `.locks/`), so that many runs start and end at once, each waiting only for the
writers of its own record. Names starting with "." belong to fw (locks, index, temp files)
and are never resources.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shlex
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import FwError
from .kinds import DEFAULT_CATEGORY, KINDS, KindSpec

INDEXED_FOLDERS = frozenset(spec.folder for spec in KINDS.values())

LOCK_FILE = ".lock"
RECORD_LOCKS_DIR = ".locks"  # the locks of records written without the home's lock (runs)
RECORD_LOCKS = 64  # records share these by the hash of their path: two seldom wait for each other
RECORD_FOLDERS = ("runs/",)  # the records written under `record_locked`; everything else takes the home's lock
INDEX_DIR = ".index"  # one file a kind's folder (agents.json, ...), so a listing decodes only its kind
LEGACY_INDEX_FILE = ".index.json"  # the single index of earlier versions, removed when the new one is written
INDEX_VERSION = 5
RACY_NS = 2_000_000_000  # files modified this recently are not cached
SECRETS_DIR = "secrets"
HOME_MARKER_DIRS = ("providers", "agents")
# What reading a file that is not UTF-8 text gives: a NUL is never valid YAML or JSON, so
# every parser reports the file as corrupt instead of reading a mangled version of it.
NOT_TEXT = "\x00"


FULL_DISK_ERRNOS = frozenset({28, 122})  # ENOSPC, EDQUOT (Linux)


def disk_full(rel: str) -> FwError:
    """The error of a write that found no room: nothing was changed, and nothing is damaged."""
    return FwError("unavailable", f"cannot write {rel}: the disk (or the quota) that holds the home is full; nothing was changed",
                   "free some space there, then run the command again", reason="disk_full", path=rel)


def write_failure(exc: OSError, rel: str) -> FwError:
    """Why a file of the home could not be written: a full disk is `unavailable`
    (`disk_full`), anything else (a file where a folder belongs, a read-only folder) is
    the home's own state, `corrupt`."""
    if exc.errno in FULL_DISK_ERRNOS:
        return disk_full(rel)
    return FwError("corrupt", f"cannot write {rel}: {exc.strerror or type(exc).__name__}",
                   "check that the home's folders are folders fw may write (`fw home check`)", path=rel)


_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)  # what pathlib's exists() takes for "not there"


def _temp_file(folder: str, name: str) -> tuple[int, str]:
    """A new temp file beside `name` in `folder`, open for writing, only its owner may read it:
    (its descriptor, its path), named as `is_temp_file` knows it."""
    while True:
        path = f"{folder}/.{name}.{os.urandom(6).hex()}.tmp"
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), path
        except FileExistsError:
            continue


def is_temp_file(name: str) -> bool:
    """A temp file of an interrupted atomic write (`write_text`, the index)."""
    return name.startswith(".") and name.endswith(".tmp")


def is_home(root: Path) -> bool:
    return root.is_dir() and all((root / d).is_dir() for d in HOME_MARKER_DIRS)


def home_origin(option: str | None) -> str:
    """Why this home: `--home` given, else `FW_HOME` set, else the `default` (~/.fw)."""
    return "--home" if option else "FW_HOME" if os.environ.get("FW_HOME") else "default"


def resolve_home_path(option: str | None) -> Path:
    raw = option or os.environ.get("FW_HOME") or str(Path.home() / ".fw")
    return Path(raw).expanduser()


class Home:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._root = str(self.root)
        self._lock_depth = 0
        self._lock_fd: int | None = None
        self._record_locks: dict[int, list[int]] = {}  # lock number -> [its descriptor, depth]
        self._indexes: dict[str, dict[str, Any]] = {}  # index name -> {relative path: [stamp, entry]}
        self._dirty_indexes: set[str] = set()
        self._trusted_indexes: set[str] = set()  # read as fw wrote them: no entry needs checking
        self._checked: set[str] = set()  # entries of other indexes checked (or made) by this process
        self._planned: dict[str, str | None] | None = None  # a dry run: path -> text it would hold (None: gone)
        self._changes: list[dict[str, Any]] = []  # a dry run's changes, in order

    # -- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, option: str | None = None) -> Home:
        root = resolve_home_path(option)
        if not is_home(root):
            raise FwError("not_found", f"the framework home {str(root)!r} {_why_not_a_home(root)}", _home_hint(root))
        return cls(root)

    def path(self, rel: str) -> Path:
        return self.root / rel

    # -- locking -------------------------------------------------------------------------
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise writers across processes. Re-entrant within one process."""
        import fcntl

        if self._lock_depth == 0:
            try:
                fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                if exc.errno not in FULL_DISK_ERRNOS:
                    raise
                raise disk_full(LOCK_FILE) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            self._lock_fd = fd
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0:
                self.save_index()
                assert self._lock_fd is not None
                os.close(self._lock_fd)  # closing releases the flock
                self._lock_fd = None

    @staticmethod
    def _record_lock_of(rel: str) -> int:
        return zlib.crc32(rel.encode("utf-8")) % RECORD_LOCKS

    @contextmanager
    def record_locked(self, rel: str) -> Iterator[None]:
        """Serialise the writers of one record file (a run's) across threads and processes
        without the home's lock: the start and end of a run wait only for writers of the same
        record (or, seldom, of one that shares its lock). Re-entrant within this Home. Code
        that takes the home's lock as well takes it first (`fw run prune`), so none waits
        for the other in turn."""
        import fcntl

        number = self._record_lock_of(rel)
        held = self._record_locks.get(number)
        if held is None:
            folder = self.root / RECORD_LOCKS_DIR
            try:
                folder.mkdir(exist_ok=True)
                fd = os.open(folder / f"{number:02d}", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise write_failure(exc, f"{RECORD_LOCKS_DIR}/{number:02d}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            held = self._record_locks[number] = [fd, 0]
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
            if held[1] == 0:
                del self._record_locks[number]
                os.close(held[0])  # closing releases the flock

    # -- dry runs: every write is recorded instead of made -------------------------------
    @contextmanager
    def dry_run(self) -> Iterator[list[dict[str, Any]]]:
        """Inside, writes change nothing on disk: each is recorded as `{"action", "path",
        "before", "after", "secret"}` (a later read sees it, so the code that writes runs as
        it would). The list is what would have changed."""
        self._planned, self._changes = {}, []
        try:
            yield self._changes
        finally:
            self._planned = None

    @property
    def is_dry_run(self) -> bool:
        return self._planned is not None

    def _record(self, action: str, rel: str, after: str | None, *, secret: bool = False, to: str | None = None) -> None:
        assert self._planned is not None
        before = self.read_text(rel)
        self._changes.append({"action": action, "path": rel, "to": to, "before": before, "after": after, "secret": secret})
        self._planned[rel] = after
        if to is not None:
            self._planned[to] = before

    def _require_lock(self, rel: str | None = None) -> None:
        """Writes hold the home's lock; a record's (runs/) may hold its own lock instead."""
        if self._lock_depth:
            return
        if rel is None or not rel.startswith(RECORD_FOLDERS) or self._record_lock_of(rel) not in self._record_locks:
            raise RuntimeError("home writes must hold the lock")

    # -- reading -------------------------------------------------------------------------
    def read_text(self, rel: str) -> str | None:
        if self._planned is not None and rel in self._planned:
            return self._planned[rel]
        try:
            with open(f"{self._root}/{rel}", encoding="utf-8") as handle:
                return handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (UnicodeDecodeError, IsADirectoryError):
            return NOT_TEXT  # a folder where a file belongs is as unreadable as binary data

    def exists(self, rel: str) -> bool:
        if self._planned is not None and rel in self._planned:
            return self._planned[rel] is not None
        try:
            os.stat(f"{self._root}/{rel}")
        except OSError as exc:
            if exc.errno in _ABSENT:
                return False
            raise  # a folder fw may not read says so, as before
        return True

    # -- writing -------------------------------------------------------------------------
    def write_text(self, rel: str, text: str, *, secret: bool = False) -> None:
        """Atomically replace `rel` with `text`: temp file, fsync, os.replace, fsync dir."""
        self._require_lock(rel)
        if self._planned is not None:
            self._record("write", rel, text, secret=secret)
            return
        data = text.encode("utf-8")
        target = f"{self._root}/{rel}"
        folder, _, name = target.rpartition("/")
        try:
            self._make_dirs(Path(folder), secret=secret)
            fd, tmp = _temp_file(folder, name)
        except OSError as exc:  # a file where a folder belongs, a read-only folder, a full disk
            raise write_failure(exc, rel) from None
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
                os.fchmod(fd, 0o600 if secret else 0o644)
            finally:
                os.close(fd)
            os.replace(tmp, target)
        except BaseException as exc:
            try:
                os.unlink(tmp)  # the old file stands as it was, and no temp file is left
            except FileNotFoundError:
                pass
            if isinstance(exc, OSError):
                raise write_failure(exc, rel) from None
            raise
        self._fsync_dir(folder)

    def _make_dirs(self, folder: Path, *, secret: bool) -> None:
        if os.path.isdir(folder):
            return
        if secret:
            secrets_root = self.root / SECRETS_DIR
            secrets_root.mkdir(mode=0o700, exist_ok=True)
            os.chmod(secrets_root, 0o700)
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            folder.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def _fsync_dir(folder: Path | str) -> None:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, rel: str) -> None:
        self._require_lock(rel)
        if self._planned is not None:
            if self.exists(rel):  # removing what is not there changes nothing, and says nothing
                self._record("remove", rel, None, secret=rel.startswith(SECRETS_DIR + "/"))
            return
        target = self.root / rel
        if target.is_dir():
            import shutil

            shutil.rmtree(target)
        else:
            try:
                target.unlink()
            except FileNotFoundError:
                return
        self._fsync_dir(target.parent)

    def rename(self, src: str, dst: str) -> None:
        self._require_lock()
        if self._planned is not None:
            self._record("move", src, None, to=dst)
            return
        target = self.root / dst
        self._make_dirs(target.parent, secret=False)
        os.replace(self.root / src, target)
        self._fsync_dir(target.parent)
        self._fsync_dir((self.root / src).parent)

    def make_dir(self, rel: str) -> None:
        self._require_lock()
        if self._planned is not None:
            if not (self.root / rel).is_dir():
                self._changes.append({"action": "make_dir", "path": rel, "to": None, "before": None, "after": None, "secret": False})
            return
        (self.root / rel).mkdir(parents=True, exist_ok=True)

    def leftovers(self, rel: str) -> list[str]:
        """What a folder holds besides fw's own temp files (`.NAME.XXXX.tmp`), hidden entries included."""
        return sorted(p.name for p in (self.root / rel).iterdir() if not (is_temp_file(p.name) and p.is_file()))

    def remove_empty_dir(self, rel: str) -> None:
        """Remove a folder that holds nothing but fw's own temp files (the caller checked)."""
        self._require_lock()
        folder = self.root / rel
        for leftover in folder.iterdir():
            if is_temp_file(leftover.name) and leftover.is_file():
                leftover.unlink()
        folder.rmdir()

    # -- layout --------------------------------------------------------------------------
    def categories(self, spec: KindSpec) -> list[str]:
        try:
            names = [
                e.name
                for e in os.scandir(self.root / spec.folder)
                if e.is_dir() and not e.name.startswith(".")
            ]
        except FileNotFoundError:
            return []
        names.sort()
        if DEFAULT_CATEGORY in names:
            names.remove(DEFAULT_CATEGORY)
            names.insert(0, DEFAULT_CATEGORY)
        return names

    def locate(self, spec: KindSpec, name: str) -> list[tuple[str, str]]:
        """(category, relative path) of every file that holds `name` (more than one is a conflict)."""
        found = []
        for category in self.categories(spec):
            rel = spec.relpath(category, name)
            probe = self.root / (rel.rsplit("/", 1)[0] if spec.layout == "skill" else rel)
            if probe.exists():
                found.append((category, rel))
        return found

    def resource_files(self, spec: KindSpec, category: str | None = None) -> Iterator[tuple[str, str, str]]:
        """(category, name, relative path) of every resource file of a kind, by category."""
        for cat in self.categories(spec) if category is None else [category]:
            folder = f"{spec.folder}/{cat}"
            try:
                with os.scandir(f"{self._root}/{folder}") as found:
                    entries = [e for e in found if not e.name.startswith(".")]
            except FileNotFoundError:
                continue
            if spec.layout == "skill":
                for name in sorted(e.name for e in entries if e.is_dir()):
                    yield cat, name, f"{folder}/{name}/SKILL.md"
                continue
            suffix = ".yaml" if spec.layout == "yaml" else ".md"
            cut = -len(suffix)
            # a folder named so is listed too, and read as corrupt
            for name in sorted(e.name[:cut] for e in entries if e.name.endswith(suffix)):
                yield cat, name, f"{folder}/{name}{suffix}"

    # -- the index -----------------------------------------------------------------------
    @staticmethod
    def _index_name(rel: str) -> str:
        folder = rel[: rel.find("/")]
        return folder if folder in INDEXED_FOLDERS else "other"

    def _load_index(self, name: str) -> dict[str, Any]:
        """The cached entries of one index file, read once; a damaged file is only a cold cache.
        A file whose first line is the sha256 of the rest is as fw wrote it: its entries are
        trusted whole; any other is read entry by entry, each checked before use."""
        files = self._indexes.get(name)
        if files is None:
            rel = f"{INDEX_DIR}/{name}.json"
            stamp = _stamp_of(f"{self._root}/{rel}")
            known = _PARSED.get(f"{self._root}/{rel}")
            if stamp is not None and known is not None and known[0] == stamp:
                files, trusted = dict(known[1]), known[2]  # parsed already in this process: a copy of its entries
            else:
                files, trusted = self._parse_index(rel)
                if stamp is not None and stamp == _stamp_of(f"{self._root}/{rel}"):
                    _PARSED[f"{self._root}/{rel}"] = (stamp, dict(files), trusted)
            if trusted:
                self._trusted_indexes.add(name)
            else:
                self._trusted_indexes.discard(name)
            if files and not trusted:
                self._dirty_indexes.add(name)  # written again with its checksum, keeping only entries checked
            self._indexes[name] = files
        return files

    def _parse_index(self, rel: str) -> tuple[dict[str, Any], bool]:
        """The entries of one index file, and whether it is as fw wrote it (its checksum holds)."""
        files: dict[str, Any] = {}
        raw = self.read_text(rel) or ""
        digest, _, body = raw.partition("\n")
        trusted = bool(body) and hashlib.sha256(body.encode("utf-8")).hexdigest() == digest
        if not trusted:
            body = raw
        try:
            doc = json.loads(body) if body else None
            if isinstance(doc, dict) and doc.get("version") == INDEX_VERSION and isinstance(doc.get("files"), dict):
                files = doc["files"]
        except ValueError:
            trusted = False  # a damaged index is only a cold cache
        return files, trusted

    def cached(
        self,
        rel: str,
        parse: Callable[[str | None], dict[str, Any]],
        valid: Callable[[Any], bool] = lambda entry: isinstance(entry, dict),
        index_name: str | None = None,
    ) -> dict[str, Any]:
        """`parse(text)` of a file, reused while the file's stamp (mtime, size, inode) holds
        and the cached entry has the shape `valid` expects (the index is only a cache: a
        damaged one is read past, never trusted). `index_name` names the index file, when it is
        not the one of the file's folder (a second kind of entry for the same files)."""
        name = index_name or self._index_name(rel)
        index = self._load_index(name)
        full = f"{self._root}/{rel}"  # plain strings: this runs once per file of a large home
        try:
            st = os.stat(full)
            stamp = [st.st_mtime_ns, st.st_size, st.st_ino]
        except OSError:
            stamp = None
        hit = index.get(rel)
        if stamp is not None and type(hit) is list and len(hit) == 2 and hit[0] == stamp:
            if name in self._trusted_indexes:
                return hit[1]
            if valid(hit[1]):
                self._checked.add(rel)
                return hit[1]
        try:
            with open(full, encoding="utf-8") as handle:
                st = os.fstat(handle.fileno())  # the stamp of exactly what we read
                text: str | None = handle.read()
            stamp = [st.st_mtime_ns, st.st_size, st.st_ino]
        except (FileNotFoundError, NotADirectoryError):
            text, stamp = None, None
        except (UnicodeDecodeError, IsADirectoryError):
            text = NOT_TEXT
        entry = parse(text)
        # A file changed within the last moments could change again without its stamp
        # changing (coarse file-system clocks, reused inodes), so only settled files are
        # cached; the others are read again next time (git's "racy clean" rule).
        if stamp is not None and time.time_ns() - stamp[0] > RACY_NS:
            index[rel] = [stamp, entry]
            self._checked.add(rel)
            self._dirty_indexes.add(name)
            shared = _PARSED.get(f"{self._root}/{INDEX_DIR}/{name}.json")
            if shared is not None and shared[2]:
                shared[1][rel] = index[rel]  # the process's later Homes (a dispatcher opens one a run) need not read it again
        elif index.pop(rel, None) is not None:
            self._dirty_indexes.add(name)
        return entry

    def save_index(self) -> None:
        """Write the index files that changed. A home we may not write is simply not cached."""
        if self._planned is not None:
            return  # a dry run leaves even the cache as it was
        dirty, self._dirty_indexes = self._dirty_indexes, set()
        for name in sorted(dirty):
            path = f"{self._root}/{INDEX_DIR}/{name}.json"
            files = self._indexes[name]
            shared = _PARSED.get(path)
            if shared is not None and shared[2] and name in self._trusted_indexes:
                # what other Homes of this process refreshed since this one loaded the index
                others = dict(shared[1])  # a copy first: another thread may add to it meanwhile
                files = {**files, **{rel: v for rel, v in others.items() if rel not in self._checked or rel not in files}}
            trusted = name in self._trusted_indexes
            live = {rel: v for rel, v in list(files.items()) if (trusted or rel in self._checked) and os.path.exists(f"{self._root}/{rel}")}
            body = json.dumps({"version": INDEX_VERSION, "files": live}, separators=(",", ":"))
            stamp = self._write_index(name, hashlib.sha256(body.encode("utf-8")).hexdigest() + "\n" + body)
            if stamp is not None:  # what this process wrote need not be parsed again
                _PARSED[path] = (stamp, dict(live), True)
            self._indexes[name] = live
            self._trusted_indexes.add(name)
        if dirty:
            try:
                os.unlink(self.root / LEGACY_INDEX_FILE)
            except OSError:
                pass

    def keep_refreshed_index(self) -> None:
        """After a command that only read: save what this process refreshed of the index (files
        written by hand since the index was saved), so the next command does not read them all
        again. Under the home's lock, taken only if it is free at once (a writer that holds it
        saves its own); a read-only home or a full disk keeps the old index, and the read never
        fails for it."""
        if not self._dirty_indexes or self._planned is not None or self._lock_depth:
            return
        now = time.monotonic()
        paths = [f"{self._root}/{INDEX_DIR}/{name}.json" for name in self._dirty_indexes]
        if all(now - _SAVED_AT.get(path, float("-inf")) < RESAVE_SECONDS for path in paths):
            return  # a read of this process saved them a moment ago, and shares what it refreshed since: the next save holds it
        import fcntl

        try:
            fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return  # a read-only home: not cached
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # busy: another process writes the home now
            self.save_index()
            for path in paths:
                _SAVED_AT[path] = now
        finally:
            os.close(fd)

    def _write_index(self, name: str, text: str) -> list[int] | None:
        """The index is only a cache: a home it cannot be written in (read-only, a full disk)
        is simply not cached, and no temp file is left behind. The stamp of the file written."""
        tmp = None
        try:
            folder = self.root / INDEX_DIR
            folder.mkdir(exist_ok=True)
            fd, tmp = _temp_file(str(folder), f"{name}.json")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(tmp, 0o644)
            stamp = _stamp_of(tmp)  # a rename keeps it: the stamp of the file in place
            os.replace(tmp, folder / f"{name}.json")
            return stamp
        except OSError:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            return None


# Index files parsed in this process, by path: (their stamp, their entries, trusted). A process
# that opens the home again and again (a dispatcher, a bot server: a Home a run) parses each
# index once, not once a Home; a file changed since (its stamp) is parsed again. Entries a Home
# refreshes (a file written by hand since) are added to a trusted one's, for the later Homes.
_PARSED: dict[str, tuple[list[int], dict[str, Any], bool]] = {}
# When a read of this process last saved each index file: a read that refreshed entries saves them
# at most once every RESAVE_SECONDS (hundreds of runs, each refreshing one file written by hand, would
# otherwise write the whole index once a run); the entries refreshed meanwhile are kept in
# `_PARSED` for the process's later Homes, and the next save writes them.
_SAVED_AT: dict[str, float] = {}
RESAVE_SECONDS = 2.0


def _stamp_of(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def _why_not_a_home(root: Path) -> str:
    if not root.exists():
        return "does not exist"
    return "is not a framework home" if root.is_dir() else "is a file, not a framework home"


def _home_hint(root: Path) -> str:
    """`fw home init PATH` only where it would work: a new path or an empty folder."""
    other = "pick another with --home PATH or FW_HOME"
    try:
        can_init = not root.exists() or (root.is_dir() and not any(not p.name.startswith(".") for p in root.iterdir()))
    except OSError:
        can_init = False
    if not can_init:
        return f"{other} (fw home init creates one in a new or empty folder)"
    return f"create one with `fw home init {shlex.quote(str(root))}`, or {other}"
