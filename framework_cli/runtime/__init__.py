"""Floor: services the tools call (beside platform/). What runs keep while they run: sessions,
messages, turns and memory, tasks, host execution (`exec`), MCP client connections. May import
domain/ and the floors below; never platform/, tools/ or above. The MCP SDK loads only when a
connection is opened."""
