"""The command line: thin Typer apps that parse arguments and render results."""
