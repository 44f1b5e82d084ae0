"""Floor: the domain. The seven kinds as operations, identities and bindings, runs and their
snapshots, the projection of a run's tools, deletion plans, bot records, the fixed catalogue of
event and platform tools, the types every tool shares (`Tool`, `Caller`) and `fw home check`.
May import home/, state/, errors and suggest; nothing above."""
