"""The lowest floor of the home: the names of fw's own files in it, and how a temp file of an
atomic write is made. The store (`store.py`) and its index (`index.py`) both build on it."""

from __future__ import annotations

import os
import random

LOCK_FILE = ".lock"
# What reading a file that is not UTF-8 text gives: a NUL is never valid YAML or JSON, so
# every parser reports the file as corrupt instead of reading a mangled version of it.
NOT_TEXT = "\x00"


def temp_file(folder: str, name: str) -> tuple[int, str]:
    """A new temp file beside `name` in `folder`, open for writing, only its owner may read it:
    (its descriptor, its path), named as `is_temp_file` knows it. The name needs only to be
    new (O_EXCL refuses one that is not, and another is drawn): drawn without a system call,
    which a serving process's threads would each wait to come back from."""
    while True:
        path = f"{folder}/.{name}.{random.getrandbits(48):012x}.tmp"
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), path
        except FileExistsError:
            continue


def is_temp_file(name: str) -> bool:
    """A temp file of an interrupted atomic write (`write_text`, the index)."""
    return name.startswith(".") and name.endswith(".tmp")
