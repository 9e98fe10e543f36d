"""The package's version, at the ground so that any layer may name it."""

__version__ = "0.1.0"
