"""fw: safe, scriptable control of an agent framework's configuration."""

__version__ = "0.1.0"
