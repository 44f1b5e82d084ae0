"""The files of a run's workspace, for the sandbox tools: read, write, list and edit, never a
step outside it.

A path is relative to the workspace. One that leaves it is `denied`: an absolute path, `..`
past the workspace, a symlink that points out of it (followed or dangling), and any part of the
framework home when the home lies inside the workspace (the box hides it too). The path is
resolved first; then it is opened one part at a time from the workspace's own folder, without
following any symlink, so that a link swapped in meanwhile is refused rather than followed.

Texts are redacted of every stored secret, then cut at 64 KiB of bytes (`truncated`).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import FwError
from ..home import secrets
from ..home.store import Home
from .execution import STREAM_CAP
from .sandbox import is_within

MAX_ENTRIES = 1000  # of a listing
_SLACK = 4096  # read past the cap before redacting, so that a key across the cut is still found
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Workspace:
    """One run's workspace (an existing folder) and the home that must stay out of reach."""

    def __init__(self, home: Home, folder: str) -> None:
        self.shown = folder  # as the run knows it
        self.real = os.path.realpath(folder)
        home_real = os.path.realpath(home.root)
        self.hidden = home_real if is_within(home_real, self.real) else None

    # -- paths ------------------------------------------------------------------------------
    def parts(self, path: Any, *, field: str = "path") -> list[str]:
        """The parts of a path below the workspace, symlinks resolved; `denied` when it leaves."""
        if not isinstance(path, str) or "\0" in path:
            raise FwError("invalid", f"{field} must be a path relative to the workspace", "e.g. notes/todo.md", field=field)
        if os.path.isabs(path):
            raise _outside(field, "an absolute path")
        target = os.path.realpath(os.path.join(self.real, path))
        if not is_within(target, self.real):
            raise _outside(field, "it leads out of the workspace (.. or a symlink)")
        if self.hidden is not None and is_within(target, self.hidden):
            raise _outside(field, "it is inside the framework home")
        rel = os.path.relpath(target, self.real)
        return [] if rel == "." else rel.split(os.sep)

    def relative(self, parts: list[str]) -> str:
        return "/".join(parts) or "."

    @contextmanager
    def folder(self, parts: list[str], *, create: bool = False, field: str = "path") -> Iterator[int]:
        """A descriptor of the folder `parts` name, opened one part at a time without following
        a symlink; missing parts are made with `create`."""
        fd = os.open(self.real, _DIR_FLAGS)
        try:
            for part in parts:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise FwError("not_found", f"{self.relative(parts)} does not exist in the workspace",
                                      "see what is there with sandbox__list_files", field=field) from None
                    os.mkdir(part, 0o755, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _open_error(exc, field, self.relative(parts), fd, part) from None
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    # -- the four jobs --------------------------------------------------------------------------
    def read(self, path: str) -> dict[str, Any]:
        parts = self.parts(path)
        if not parts:
            raise FwError("invalid", "path names the workspace itself, a folder", "give a file's path", field="path")
        with self.folder(parts[:-1]) as fd:
            data, size = self._read(fd, parts)
        content, cut = capped_text(data, size)
        return {"path": self.relative(parts), "content": content, "size": size, "truncated": cut}

    def _read(self, fd: int, parts: list[str], limit: int = STREAM_CAP + _SLACK) -> tuple[bytes, int]:
        try:
            handle = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
        except FileNotFoundError:
            raise FwError("not_found", f"{self.relative(parts)} does not exist in the workspace",
                          "see what is there with sandbox__list_files", field="path") from None
        except OSError as exc:
            raise _open_error(exc, "path", self.relative(parts), fd, parts[-1]) from None
        try:
            info = os.fstat(handle)
            if not stat.S_ISREG(info.st_mode):
                what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
                raise FwError("invalid", f"{self.relative(parts)} is {what}", "give a file's path", field="path")
            chunks, left = [], limit
            while left > 0:
                chunk = os.read(handle, min(left, 65536))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks), info.st_size
        finally:
            os.close(handle)

    def write(self, path: str, content: str) -> dict[str, Any]:
        parts = self.parts(path)
        if not parts:
            raise FwError("invalid", "path names the workspace itself, a folder", "give a file's path", field="path")
        data = content.encode("utf-8")
        with self.folder(parts[:-1], create=True) as fd:
            self._write(fd, parts, data)
        return {"path": self.relative(parts), "bytes": len(data)}

    def _write(self, fd: int, parts: list[str], data: bytes) -> None:
        try:
            handle = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
        except OSError as exc:
            raise _open_error(exc, "path", self.relative(parts), fd, parts[-1]) from None
        try:
            if not stat.S_ISREG(os.fstat(handle).st_mode):
                raise FwError("invalid", f"{self.relative(parts)} is not a regular file", "give a file's path", field="path")
            view = memoryview(data)
            while view:
                view = view[os.write(handle, view):]
        except OSError as exc:
            raise FwError("unavailable", f"{self.relative(parts)} could not be written: {exc.strerror}",
                          "check the space and permissions of the workspace", reason="disk_full" if exc.errno in
                          (errno.ENOSPC, errno.EDQUOT) else "workspace") from None
        finally:
            os.close(handle)

    def edit(self, path: str, old: str, new: str) -> dict[str, Any]:
        if not old:
            raise FwError("invalid", "old must not be empty", "give the exact text to replace, with enough around it to be unique",
                          field="old")
        parts = self.parts(path)
        if not parts:
            raise FwError("invalid", "path names the workspace itself, a folder", "give a file's path", field="path")
        with self.folder(parts[:-1]) as fd:
            data, size = self._read(fd, parts, limit=1 << 62)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise FwError("invalid", f"{self.relative(parts)} is not UTF-8 text", "edit text files only", field="path") from None
            found = text.count(old)
            if found != 1:
                why = "does not occur in" if found == 0 else f"occurs {found} times in"
                raise FwError("invalid", f"old {why} {self.relative(parts)}",
                              "give the exact text to replace (read the file first), with enough around it to occur once",
                              field="old", occurrences=found)
            self._write(fd, parts, text.replace(old, new, 1).encode("utf-8"))
        return {"path": self.relative(parts), "replaced": 1}

    def list(self, path: str | None, pattern: str | None) -> dict[str, Any]:
        parts = self.parts(path or ".")
        entries: list[dict[str, Any]] = []
        truncated = False
        with self.folder(parts) as fd:
            for rel, kind, size in self._walk(fd, parts, recursive=pattern is not None):
                if pattern is not None and not (fnmatch.fnmatchcase(rel, pattern) or fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], pattern)):
                    continue
                if len(entries) == MAX_ENTRIES:
                    truncated = True
                    break
                entry = {"path": secrets.redact(rel), "type": kind}
                if size is not None:
                    entry["size"] = size
                entries.append(entry)
        return {"path": self.relative(parts), "entries": entries, "truncated": truncated}

    def _walk(self, fd: int, parts: list[str], *, recursive: bool, depth: int = 0) -> Iterator[tuple[str, str, int | None]]:
        """(path relative to the workspace, type, size) of each entry below a folder, by name;
        folders are entered (with `recursive`) without following a symlink, the hidden home never."""
        with os.scandir(fd) as found:
            items = sorted(found, key=lambda e: e.name)
        for item in items:
            rel = "/".join([*parts, item.name])
            if self.hidden is not None and is_within(os.path.join(self.real, rel), self.hidden):
                continue
            if item.is_symlink():
                yield rel, "symlink", None
            elif item.is_dir(follow_symlinks=False):
                yield rel, "folder", None
                if recursive and depth < 64:
                    try:
                        child = os.open(item.name, _DIR_FLAGS, dir_fd=fd)
                    except OSError:
                        continue
                    try:
                        yield from self._walk(child, [*parts, item.name], recursive=True, depth=depth + 1)
                    finally:
                        os.close(child)
            else:
                try:
                    size = item.stat(follow_symlinks=False).st_size
                except OSError:
                    size = None
                yield rel, "file", size


def capped_text(data: bytes, size: int) -> tuple[str, bool]:
    """Bytes as text, redacted first and then cut at STREAM_CAP bytes; whether it was cut."""
    redacted = secrets.redact(data.decode("utf-8", errors="replace")).encode("utf-8")
    cut = redacted[:STREAM_CAP].decode("utf-8", errors="ignore")
    return cut, len(redacted) > STREAM_CAP or size > len(data)


def _outside(field: str, why: str) -> FwError:
    return FwError("denied", f"{field} leaves the workspace: {why}",
                   "give a path relative to the workspace that stays inside it", field=field, reason="outside_workspace")


def _open_error(exc: OSError, field: str, rel: str, fd: int, name: str) -> FwError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            link = stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode)
        except OSError:
            link = True
        if link:  # a symlink where the resolved path had a real part: swapped in meanwhile
            return _outside(field, "a symlink on the way")
        return FwError("invalid", f"{rel}: a part of the path is not a folder", "check the path", field=field)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return FwError("denied", f"{rel} may not be opened (permission denied)", "check the file's permissions", field=field)
    if exc.errno == errno.EISDIR:
        return FwError("invalid", f"{rel} is a folder", "give a file's path", field=field)
    return FwError("invalid", f"{rel} cannot be opened: {exc.strerror}", "check the path", field=field)
