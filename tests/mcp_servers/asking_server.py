"""An MCP server (the `mcp` SDK's `MCPServer`) whose tools ask the client for input.

Run over stdio (`python tests/mcp_servers/asking_server.py`) or connect to
`server` in-process. Its tools ask through the SDK's resolvers, which speak
both protocols: on 2025-11-25 an `elicitation/create` request while the call
is open, on 2026-07-28 an `InputRequiredResult` and the call sent again.

- `book(name)` (mutating): asks "Book <name>?" for `{seats: int 1-9, ok: bool}`;
  returns what was booked, or the person's action. Counts its bodies' runs
  (`runs`, in-process): asking again never runs the body twice.
- `sign_in(user)` (read-only): asks for `{api_key: str}` and says how long the key was.
- `visit()` (read-only, 2025-11-25 only): asks the person to open a URL.
- `ping()` (read-only): asks nothing.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

server = MCPServer("asking", log_level="WARNING")

runs: list[str] = []


class Booking(BaseModel):
    seats: int = Field(ge=1, le=9)
    ok: bool


class Key(BaseModel):
    api_key: str


def _ask_booking(name: str) -> Elicit[Booking]:
    return Elicit(f"Book {name}?", Booking)


def _ask_key(user: str) -> Elicit[Key]:
    return Elicit(f"The API key of {user}?", Key)


@server.tool()
async def book(
    name: str, answer: Annotated[ElicitationResult[Booking], Resolve(_ask_booking)]
) -> str:
    """Books `name`, once the person says how many seats."""
    runs.append(name)
    if isinstance(answer, AcceptedElicitation):
        return f"booked {name} x{answer.data.seats}" if answer.data.ok else "not confirmed"
    return f"not booked: {answer.action}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def sign_in(user: str, key: Annotated[Key, Resolve(_ask_key)]) -> str:
    """Signs `user` in with the key the person gives."""
    return f"signed in {user} with a key of {len(key.api_key)} characters"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def visit(ctx: Context) -> str:
    """Sends the person to a page (URL mode: on 2025-11-25 sessions only)."""
    result = await ctx.elicit_url(
        "Open the payment page", "https://pay.example.com/p?token=SECRET-TOKEN", "pay-1"
    )
    return f"visit: {result.action}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def ping() -> str:
    """Answers at once."""
    return "pong"


if __name__ == "__main__":
    server.run()
