"""Floor: the files of the home (beside home/). `state.db`, the runtime state, behind the one
store class that opens it, with its named migrations. May import only errors and suggest."""
