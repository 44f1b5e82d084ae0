"""A signal, within one process, that runtime work changed: a turn or task was added, became
pending, or ended. A dispatcher (and `task_wait`) waits on it instead of sleeping on a timer,
so work added in the same process is picked up at once; work other processes add is seen by
a short poll of `state.db`, the only thing every process shares.

A counter makes the wait race-free: read `generation()` before looking for work, then
`wait(seen, timeout)` returns at once if anything changed in between.
"""

from __future__ import annotations

import threading
from typing import Any

_changed = threading.Condition()
_generation = 0
_listeners: list[Any] = []  # called (from any thread) when work changes: an engine's loop wakes


def changed() -> None:
    """Work changed: wake every waiter."""
    global _generation
    with _changed:
        _generation += 1
        _changed.notify_all()
        listeners = list(_listeners)
    for listener in listeners:
        listener()


def listen(listener: Any) -> Any:
    """Call `listener()` whenever work changes (from the thread that changed it); returns what
    stops it."""
    with _changed:
        _listeners.append(listener)

    def stop() -> None:
        with _changed:
            if listener in _listeners:
                _listeners.remove(listener)

    return stop


def generation() -> int:
    return _generation


def wait(seen: int, timeout: float) -> int:
    """Until the work changes from what `seen` saw, or `timeout` seconds; the generation now."""
    with _changed:
        _changed.wait_for(lambda: _generation != seen, timeout)
        return _generation
