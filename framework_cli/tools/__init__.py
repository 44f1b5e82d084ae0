"""The tool service: the registry of tool groups, who may call what, audit, and its MCP front door."""
