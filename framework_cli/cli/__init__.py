"""Floor: front doors. The command line: one small Typer app per command group, added to the
root app only when its command runs. A command parses arguments, calls one function of a floor
below and renders the result; it decides nothing. May import every floor below; and `serve/`,
its sibling front door, for the commands that start a server."""
