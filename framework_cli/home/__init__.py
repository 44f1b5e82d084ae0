"""The framework home on disk: layout, typed kinds, YAML round-trip I/O, secrets, atomic writes under a lock, the index."""
