"""A plugin for fw's tests that misbehaves on purpose (entry point `misbehaving`): its tools
raise, hang, kill their process, print on standard output, start a process that tries to
outlive the call, and reach for files and the network (to show what the sandbox keeps out)."""

import os
import socket
import subprocess
import sys
import time


def echo(arguments, context):
    return {"text": arguments.get("text"), "run_id": context.run_id, "identity": context.identity, "agent": context.agent,
            "mode": context.settings.get("mode"), "token_set": bool(context.settings.get("token")), "pid": os.getpid()}


def fail(arguments, context):
    raise RuntimeError(f"it failed on purpose, holding the token {context.settings.get('token')}")


def hang(arguments, context):
    time.sleep(3600)


def crash(arguments, context):
    os._exit(3)


def noisy(arguments, context):
    print("noise on standard output")
    sys.stdout.flush()
    os.write(1, b"more noise on file descriptor 1\n")
    return {"quiet": True}


def spawn(arguments, context):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", arguments["marker"]], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"spawned": True}


def read(arguments, context):
    with open(arguments["path"], encoding="utf-8") as handle:
        return {"text": handle.read()}


def connect(arguments, context):
    socket.create_connection(("127.0.0.1", arguments["port"]), timeout=3).close()
    return {"connected": True}


def huge(arguments, context):
    return {"text": "x" * 200_000}


def _tool(name, function, **properties):
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    return {"name": name, "description": f"the test plugin's {name}", "risk": "read", "input_schema": schema, "function": function}


misbehaving = {
    "settings": {"mode": {"description": "any text", "default": "plain"}, "token": {"description": "a secret", "secret": True}},
    "tools": [
        _tool("echo", echo, text={"type": "string"}),
        _tool("fail", fail),
        _tool("hang", hang),
        _tool("crash", crash),
        _tool("noisy", noisy),
        _tool("spawn", spawn, marker={"type": "string"}),
        _tool("read", read, path={"type": "string"}),
        _tool("connect", connect, port={"type": "integer"}),
        _tool("huge", huge),
    ],
}
