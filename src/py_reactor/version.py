"""The package's version, readable from every layer (the root re-exports it)."""

__all__ = ["__version__"]

__version__ = "0.1.0.dev0"
