"""A registry for `toolbus tools list tests.cli_registries.tools:registry` and `toolbus call`."""

from __future__ import annotations

import sys
from typing import Annotated

from pydantic import Field

from toolbus import RetryPolicy, ToolContext, ToolError, ToolRegistry

registry = ToolRegistry()


@registry.tool(read_only=True, timeout=5, retry=RetryPolicy(max_retries=2))
def add(a: int, b: Annotated[int, Field(description="The second addend.")] = 1) -> int:
    """Add two numbers.

    Args:
        a: The first addend.
        b: Not shown: the annotation's description wins.
    """
    return a + b


@registry.tool
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ToolError(f"cannot: {reason}", retryable=False)


@registry.tool(read_only=True, timeout=0.3)
def hang(ctx: ToolContext) -> str:
    """Never answers in time."""
    ctx.wait_cancelled(10)
    return "late"


@registry.tool
def login(user: str, password: str) -> str:
    """Fails, quoting the password (which toolbus masks)."""
    raise ToolError(f"wrong password {password} for {user}")


@registry.tool(read_only=True, type="custom")
def shout(text: str) -> str:
    """Upper-case the raw input."""
    return text.upper()


def make_registry() -> ToolRegistry:
    """A factory: `module:make_registry` is called."""
    return ToolRegistry([add])


def broken_factory() -> ToolRegistry:
    raise RuntimeError("no registry today")


def exiting_factory() -> ToolRegistry:
    sys.exit(3)


NOT_A_REGISTRY = 42
