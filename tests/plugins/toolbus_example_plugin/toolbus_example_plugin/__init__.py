"""An example toolbus plugin: one entry point of each kind, good and broken.

Imported only when toolbus looks for plugins (`ToolRegistry.from_entry_points`);
the tests check that `import toolbus` alone never imports it.
"""

from __future__ import annotations

from toolbus import Tool, ToolRegistry, tool

__all__ = ["echo", "echo_again", "explode", "make_tools", "not_a_tool", "registry"]


@tool(read_only=True)
def echo(text: str) -> str:
    """Say the text back."""
    return text


# A registry: all its tools are found.
registry = ToolRegistry()


@registry.tool(read_only=True)
def example_upper(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@registry.tool(read_only=True)
def example_lower(text: str) -> str:
    """The text in small letters."""
    return text.lower()


def make_tools() -> list[Tool]:
    """A factory: called with no arguments when the plugins are loaded."""

    @tool(name="example_reverse", read_only=True)
    def reverse(text: str) -> str:
        """The text backwards."""
        return text[::-1]

    return [reverse]


# Broken on purpose: neither a tool nor a registry nor a callable.
not_a_tool = {"name": "not a tool"}


def explode() -> list[Tool]:
    """A factory that fails."""
    raise RuntimeError("the example factory failed on purpose")


# A second tool named "echo": the first entry point to bring it keeps the name.
@tool(name="echo", read_only=True)
def echo_again(text: str) -> str:
    """Say the text back, twice."""
    return text * 2
