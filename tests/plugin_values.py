"""Entry-point values for tests/tools/test_plugins.py's made-up entry points (the
installed example plugin, tests/plugins/toolbus_example_plugin, has the real ones)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolbus import Tool, ToolRegistry, tool


@tool(read_only=True)
def ping() -> str:
    """Answer pong."""
    return "pong"


class Hello(Tool):
    """A Tool subclass: the class is a callable taking no arguments."""

    name = "hello"
    description = "Say hello."
    read_only = True

    def run(self, params: Any) -> str:
        return "hello"


def generated() -> Iterator[Tool]:
    """A factory giving a generator of tools."""

    @tool(name="gen_one")
    def one() -> int:
        return 1

    @tool(name="gen_two")
    def two() -> int:
        return 2

    yield one
    yield two


def registry_factory() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(name="from_factory_registry")
    def made() -> str:
        return "made"

    return registry


def mixed() -> list[Any]:
    """Tools and something else: the whole entry point is refused."""
    return [ping, "not a tool"]


def needs_arguments(city: str) -> str:
    """A plain function, not decorated: not a factory either."""
    return city


def names() -> list[str]:
    """Text is iterable, but not of tools."""
    return ["ping"]


def fails_half_way() -> Iterator[Tool]:
    """A generator factory that raises after its first tool: its body runs
    only when iterated."""
    yield ping
    raise RuntimeError("half way")


class _IterRaises:
    def __iter__(self) -> Iterator[Tool]:
        raise RuntimeError("no iter")


def iter_raises() -> Any:
    """An iterable whose __iter__ raises."""
    return _IterRaises()


def exits() -> Any:
    """A factory that exits the process."""
    raise SystemExit("a plugin that exits")


def interrupted() -> Any:
    """The user's Ctrl-C while a factory runs: not the plugin's fault."""
    raise KeyboardInterrupt
