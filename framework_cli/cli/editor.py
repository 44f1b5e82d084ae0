"""`fw resource edit`: a resource's file in the user's editor, as `kubectl edit` does it.

The file's own text is opened (a prompt or skill with its front matter and body). On save it
is validated; when it is refused the editor opens again with the error at the top, and
nothing is written until the text is valid. An unchanged or emptied file cancels. A file that
another writer changed while it was open is not overwritten unasked: the editor opens again
with a note, and saving once more replaces it."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

from ..errors import FwError

MARK = "# fw: "  # the lines fw puts at the top of the text; they are removed before it is read


def editor_command() -> list[str]:
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        words = shlex.split(editor)
    except ValueError:
        words = []
    if not words:
        raise FwError("usage", f"the editor {editor!r} is not a command", "set EDITOR, e.g. `export EDITOR=nano`")
    return words


def open_in_editor(text: str, suffix: str) -> str:
    """Let the user edit `text` in a private temp file; what they saved."""
    folder = tempfile.mkdtemp(prefix="fw-edit-")  # 0700: only this user can read it
    path = os.path.join(folder, f"edit{suffix}")
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        command = editor_command()
        source = "VISUAL" if os.environ.get("VISUAL") else "EDITOR" if os.environ.get("EDITOR") else "the default editor"
        try:
            status = subprocess.run([*command, path]).returncode
        except OSError as exc:
            raise FwError("usage", f"cannot start the editor {command[0]!r} (from {source}): {exc.strerror or exc}",
                          "set EDITOR to an editor on PATH, e.g. `export EDITOR=nano`") from None
        if status != 0:
            raise FwError("usage", f"the editor {command[0]!r} (from {source}) exited with status {status}; nothing was written",
                          "save and quit the editor normally to keep the edit")
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except UnicodeDecodeError:
            raise FwError("invalid", "the edited file is not UTF-8 text; nothing was written", "save it as UTF-8") from None
    finally:
        for leftover in (path,):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
        os.rmdir(folder)


FIX_IT = "fix it below and save"
REPLACE_IT = "save this text to replace that change"


def with_error(text: str, error: FwError, then: str = FIX_IT) -> str:
    """The text, led by `# fw:` lines: why it was not saved, the hint, and what to do `then`."""
    lines = [f"{MARK}the edit was not saved: {error.message}"]
    if error.hint:
        lines.append(f"{MARK}{error.hint}")
    lines.append(f"{MARK}{then}, or empty the file to cancel. These lines are ignored.")
    return "\n".join(lines) + "\n" + text


def without_marks(text: str) -> str:
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith(MARK.rstrip()):
        lines.pop(0)
    return "".join(lines)


MAX_REFUSED = 20  # refused saves before fw gives up (an editor script that changes the text each time)


def edit_loop(original: str, suffix: str, save: Callable[[str, str], Any], current: Callable[[], str]) -> Any | None:
    """Edit until `save(text, base)` accepts the text (its result), or the user cancels (None).
    `base` is the file's text the edit started from: a file changed by another writer
    meanwhile is refused by `save` (`reason: changed_meanwhile`), and the editor opens again
    with the edit and a note; saving it then replaces the file as it is now (`current()`)."""
    shown, last, base, refused = original, original, original, 0
    while True:
        edited = without_marks(open_in_editor(shown, suffix))
        if not edited.strip() or edited == original:
            return None
        try:
            return save(edited, base)
        except FwError as exc:
            refused += 1
            if exc.extra.get("reason") == "changed_meanwhile" and refused < MAX_REFUSED:
                base = current()
                shown = with_error(edited, exc, REPLACE_IT)  # saved again as it is, it is checked, not given up on
                continue
            if exc.code not in ("invalid", "corrupt", "not_found", "conflict"):
                raise
            if (edited == last and shown != original) or refused >= MAX_REFUSED:  # saved again without a change: give up, as kubectl does
                raise FwError(exc.code, exc.message, "nothing was written; run the edit again to retry", **exc.extra) from None
            shown, last = with_error(edited, exc), edited
