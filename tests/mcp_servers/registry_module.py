"""A toolbus registry for `toolbus mcp serve tests.mcp_servers.registry_module:registry`."""

from __future__ import annotations

import asyncio

from toolbus import Attachment, ToolError, ToolOutput, ToolRegistry

registry = ToolRegistry()

PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAACAAAB4iG8MwAAAABJRU5ErkJggg=="
)


@registry.tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@registry.tool(read_only=True)
def city(name: str) -> dict[str, object]:
    """Facts about a city."""
    return {"name": name, "country": "Norway", "population": 709_037}


@registry.tool
def save_note(text: str) -> str:
    """Save a note (mutating)."""
    return f"saved {text!r}"


@registry.tool
def fail(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"cannot: {reason}", retryable=False)


@registry.tool(timeout=0.5)
async def hang() -> str:
    """Never returns (toolbus times it out after 0.5 s)."""
    await asyncio.Event().wait()
    return "unreachable"


@registry.tool
def login(user: str, password: str) -> str:
    """Fails, quoting the password (which toolbus masks)."""
    raise ToolError(f"wrong password {password} for {user}")


@registry.tool(type="custom", read_only=True)
def shout(text: str) -> str:
    """Upper-case the raw input."""
    return text.upper()


@registry.tool(read_only=True)
def chart() -> ToolOutput:
    """A caption and an image."""
    return ToolOutput(
        content="a red dot", attachments=(Attachment(type="image/png", data=PIXEL, title="dot"),)
    )
