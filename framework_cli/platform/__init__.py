"""Chat platforms: the catalogue of event and platform tools, bots, events and adapters.

The tool service decides which of these tools a run gets and checks every call; an adapter
only translates a semantic API call (`send_message`, `kick_member`, ...) into its platform's
own. Nothing here imports the CLI.
"""
