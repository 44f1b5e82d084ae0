"""Fakes that tests run for real: a scripted chat completions server, MCP servers (stdio and
HTTP) and a OneBot implementation."""
