"""Floor: services the tools call (beside runtime/). Chat platforms: events, bots and their
adapters, and the platform toolset a run's event and platform tools come from. An adapter only
translates a semantic API call (`send_message`, `kick_member`, ...) into its platform's own;
the tool service decides which tools a run gets and checks every call. May import domain/ and
the floors below; never runtime/, tools/ or above."""
