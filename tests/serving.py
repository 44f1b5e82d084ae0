"""A serving fw command (`fw bot serve`, `fw mcp serve --http`, `fw web`) as a real process for
tests: its JSON lines read as they come, one document a line or one printed over several."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time

from conftest import fw_bin


class Served:
    """A serving command as a real process: its JSON lines read as they come."""

    def __init__(self, home, *args):
        self.proc = subprocess.Popen([fw_bin(), *args, "--json"], env={**os.environ, "FW_HOME": str(home)},
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        pending = ""
        for line in self.proc.stdout:
            pending += line
            try:
                self.lines.put(json.loads(pending))  # one document a line, or one printed over several (`fw mcp serve`)
                pending = ""
            except ValueError:
                if not pending.lstrip().startswith("{"):
                    self.lines.put({"type": "not-json", "line": pending})
                    pending = ""
        self.lines.put(None)

    def next(self, test, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                record = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if record is None:
                self.proc.kill()
                raise AssertionError(f"the server ended: {self.proc.stderr.read()}")
            self.seen.append(record)
            if test(record):
                return record
        self.proc.kill()  # a test that fails here leaves no server behind
        raise AssertionError(f"no such record; saw {self.seen}")

    def drain(self):
        while True:
            try:
                record = self.lines.get_nowait()
            except queue.Empty:
                return self.seen
            if record is not None:
                self.seen.append(record)

    def stop(self):
        """SIGINT, then every line it printed up to its exit (read by the reader thread alone:
        `communicate` would take some of them), and its standard error."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        err = self.proc.stderr.read()
        self._reader.join(10)
        self.drain()
        return self.proc.returncode, err

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        if self.proc.poll() is None:
            self.stop()
