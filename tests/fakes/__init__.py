"""Fakes that tests run for real: a scripted chat completions server and an MCP server."""
