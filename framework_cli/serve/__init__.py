"""Floor: front doors. The network doors of fw: MCP over stdio (and over HTTP for the
gateway), the web page, `fw bot serve`. Each one maps requests to the tool service or the engine
and renders the answers; none decides who may do what. May import every floor below."""
