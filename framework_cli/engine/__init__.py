"""Floor: orchestration. What runs an agent: the model client, the model loop, `agent_run`,
the dispatcher of turns and tasks, event handling, starting external runners. It calls the tool
service for every tool call, never the reverse. May import tools/ and every floor below it;
nothing below imports it. The HTTP client and the MCP SDK load only on the run path."""
