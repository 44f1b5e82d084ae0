"""Floor: the tool service. The registry of tool groups (each group registers its tools from
its own module), the one `call_tool` path (authorization from the caller and the run's snapshot,
parameter checks, audit, redaction) and the run's tool sources. May import platform/, runtime/
and the floors below; only the engine and the front doors import it."""
