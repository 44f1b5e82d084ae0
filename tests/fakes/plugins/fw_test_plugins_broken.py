"""A plugin for fw's tests that fails to load (entry point `broken`)."""

raise ImportError("this plugin is broken on purpose")
