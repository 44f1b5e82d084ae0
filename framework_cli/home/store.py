"""The home store: the only code that touches the home's files.

Every write takes the home's lock (a separate `.lock` file), writes a temp file beside its
target, fsyncs it and `os.replace`s it over the target, so a killed process leaves the old
file or the new one. A run's record is written under a lock of its own instead (one of the
files of `.locks/`), so that many runs start and end at once, each waiting only for the
writers of its own record. Names starting with "." belong to fw (locks, index, temp files)
and are never resources. What the home's files parse to is cached in its index (`index.py`).
"""

from __future__ import annotations

import errno
import os
import shlex
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import FwError
from .files import LOCK_FILE, NOT_TEXT, is_temp_file, temp_file
from .index import RACY_NS, HomeIndex
from .kinds import DEFAULT_CATEGORY, KindSpec

RECORD_LOCKS_DIR = ".locks"  # the locks of records written without the home's lock (runs)
RECORD_LOCKS = 64  # records share these by the hash of their path: two seldom wait for each other
RECORD_FOLDERS = ("runs/",)  # the records written under `record_locked`; everything else takes the home's lock
SECRETS_DIR = "secrets"
HOME_MARKER_DIRS = ("providers", "agents")


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


ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)  # what pathlib's exists() takes for "not there"


def is_home(root: Path) -> bool:
    return root.is_dir() and all((root / d).is_dir() for d in HOME_MARKER_DIRS)


def home_origin(option: str | None) -> str:
    """Why this home: `--home` given, else `FW_HOME` set, else the `default` (~/.fw)."""
    return "--home" if option else "FW_HOME" if os.environ.get("FW_HOME") else "default"


def resolve_home_path(option: str | None) -> Path:
    raw = option or os.environ.get("FW_HOME") or str(Path.home() / ".fw")
    return Path(raw).expanduser()


class Home(HomeIndex):
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._root = str(self.root)
        self._lock_depth = 0
        self._lock_fd: int | None = None
        self._record_locks: dict[int, list[int]] = {}  # lock number -> [its descriptor, depth]
        self._start_index()
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
            folder = f"{self._root}/{RECORD_LOCKS_DIR}"
            try:
                try:
                    fd = os.open(f"{folder}/{number:02d}", os.O_RDWR | os.O_CREAT, 0o644)
                except FileNotFoundError:  # the home's first record lock (a home that is gone is not made again)
                    try:
                        os.mkdir(folder)
                    except FileExistsError:
                        pass
                    fd = os.open(f"{folder}/{number:02d}", os.O_RDWR | os.O_CREAT, 0o644)
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
            if exc.errno in ABSENT:
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
            try:
                fd, tmp = temp_file(folder, name)
            except FileNotFoundError:  # the first file of its folder: the folder is made first
                self._make_dirs(Path(folder), secret=secret)
                fd, tmp = temp_file(folder, name)
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
            level = secrets_root
            for part in folder.relative_to(secrets_root).parts:  # every folder under secrets/ only its owner may open
                level = level / part
                level.mkdir(mode=0o700, exist_ok=True)
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
        """The category folders of a kind, `default` first. Listed again only when the kind's
        folder changed (its stamp: a folder made, removed or renamed in it changes its mtime,
        and its link count with each folder in it), or changed too recently to tell (the
        index's racy rule): a run's start reads four kinds."""
        folder = f"{self._root}/{spec.folder}"
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            return []
        stamp = (st.st_mtime_ns, st.st_ino, st.st_dev, st.st_nlink)
        known = _CATEGORIES.get(folder)
        if known is not None and known[0] == stamp:
            return list(known[1])
        try:
            names = [e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith(".")]
        except FileNotFoundError:  # removed meanwhile
            return []
        names.sort()
        if DEFAULT_CATEGORY in names:
            names.remove(DEFAULT_CATEGORY)
            names.insert(0, DEFAULT_CATEGORY)
        if time.time_ns() - st.st_mtime_ns > RACY_NS:
            _CATEGORIES[folder] = (stamp, tuple(names))
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


# The category folders of each kind's folder this process listed, by path: (the folder's stamp, names).
_CATEGORIES: dict[str, tuple[tuple[int, int, int, int], tuple[str, ...]]] = {}


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
