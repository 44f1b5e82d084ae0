"""The runtime half of fw: what an agent run needs while it runs (the model client, the model
loop, the run's MCP connections). Nothing here knows the CLI; each piece is imported only on
the run path, so listing and editing a home never pay for httpx or the MCP SDK."""
