"""Adapters for agent frameworks: each one is a module of its own, imported by
name (`toolbus.integrations.pydantic_ai`, ...), and needs its framework's extra.

See docs/integrations.md.
"""

__all__: list[str] = []
