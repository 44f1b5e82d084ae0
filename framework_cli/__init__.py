"""fw: safe, scriptable control of an agent framework, from its configuration to its runs.

The floors, each importing only from the floors below it (`lint-imports` checks it in CI):

    cli/  serve/       front doors: Typer apps; the network doors (MCP, web, bot serve)
    engine/            orchestration: model client and loop, agent_run, dispatch, event handling
    tools/             the registry, the tool service (authorization, audit), a module per group
    platform/ runtime/ services the tools call: bots and adapters; sessions, tasks, exec, MCP clients
    domain/            the seven kinds, identities, runs, the projection, deletion, home check
    home/  state/      the files of the home; state.db behind one store class
    errors, suggest    the error value and the did-you-mean helper
"""

import sys

__version__ = "0.1.0"

# httpx imports its command-line client (and with it rich, click and pygments, 70 ms and
# more) whenever those are installed. fw never runs it: with the module marked absent,
# httpx defines its stand-in `main` instead, and the client itself loads as before.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
