"""Floor: the files of the home. Layout, typed kinds, YAML round-trip I/O, secrets, atomic
writes under a lock, the index. The only code that touches the home's files. May import only
errors and suggest."""
