"""Starting a fake MCP server over streamable HTTP on a free port of 127.0.0.1, for tests and
benchmarks: `start(lambda port: [python, server, "--http", str(port)])` gives the process
and its URL once it accepts connections."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(argv_for: Callable[[int], list[str]], seconds: float = 60) -> tuple[subprocess.Popen, str]:
    """The server's process and URL (`http://127.0.0.1:PORT/mcp`); RuntimeError when it does
    not listen within `seconds` (the process is stopped then)."""
    port = free_port()
    proc = subprocess.Popen(argv_for(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"the HTTP MCP server {argv_for(port)[1:2]} did not start") from None
            time.sleep(0.05)
