"""The home's index: what each file of the home parses to, kept by the file's stamp (mtime,
size, inode) in `.index/` (one file a kind's folder), so that a listing or a run's start neither
parses nor validates a file it read before. It is only a cache: a damaged one is a cold one,
and a home it cannot be written in is simply not cached. `HomeIndex` is the part of `Home`
that keeps it; the rest of `Home` (`store.py`) reads and writes the files themselves."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .files import LOCK_FILE, NOT_TEXT, temp_file
from .kinds import KINDS

INDEXED_FOLDERS = frozenset(spec.folder for spec in KINDS.values())
INDEX_DIR = ".index"  # one file a kind's folder (agents.json, ...), so a listing decodes only its kind
LEGACY_INDEX_FILE = ".index.json"  # the single index of earlier versions, removed when the new one is written
INDEX_VERSION = 5
RACY_NS = 2_000_000_000  # files modified this recently are not cached


class HomeIndex:
    """The index of one `Home` (which supplies `root`, `read_text`, its lock depth and dry run)."""

    root: Path
    _root: str
    _lock_depth: int
    _planned: dict[str, str | None] | None

    def _start_index(self) -> None:
        self._indexes: dict[str, dict[str, Any]] = {}  # index name -> {relative path: [stamp, entry]}
        self._dirty_indexes: set[str] = set()
        self._trusted_indexes: set[str] = set()  # read as fw wrote them: no entry needs checking
        self._checked: set[str] = set()  # entries of other indexes checked (or made) by this process

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
            fd, tmp = temp_file(str(folder), f"{name}.json")
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
