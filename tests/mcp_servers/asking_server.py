"""An MCP server (the `mcp` SDK's `MCPServer`) whose tools ask the client for
input, or its model for a sample.

Run over stdio (`python tests/mcp_servers/asking_server.py`) or connect to
`server` in-process. Its tools ask through the SDK's resolvers, which speak
both protocols: on 2025-11-25 an `elicitation/create` request while the call
is open, on 2026-07-28 an `InputRequiredResult` and the call sent again.

- `book(name)` (mutating): asks "Book <name>?" for `{seats: int 1-9, ok: bool}`;
  returns what was booked, or the person's action. Counts its bodies' runs
  (`runs`, in-process): asking again never runs the body twice.
- `sign_in(user)` (read-only): asks for `{api_key: str}` and says how long the key was.
- `contact(who)` (read-only): asks for `{email: str, format email}`.
- `order(item)` (read-only): asks for `{size: str, count: int >= 1}`, both
  required, each with a `default` in the schema (SEP-1034): an answer that
  leaves them out is refused by the server unless the client fills them in.
- `visit()` (read-only, 2025-11-25 only): asks the person to open a URL.
- `summarize(text)` (read-only): asks the client's model for a summary
  (sampling), and says which model wrote what.
- `roots()` (read-only): the client's roots, as `[uri, name]` pairs.
- `chatter()` (read-only): logs three messages (`notifications/message`):
  info "working", warning `{"api_key": ..., "step": 2}`, debug "detail".
- `ping()` (read-only): asks nothing.
"""

from __future__ import annotations

import warnings
from typing import Annotated

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, ListRoots, Resolve, Sample
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import (
    CreateMessageResult,
    ListRootsResult,
    ModelHint,
    ModelPreferences,
    NotificationParams,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

server = MCPServer("asking", log_level="WARNING")

runs: list[str] = []
roots_heard: list[int] = []  # roots/list_changed notices, counted (in-process, 2025-11-25)


class Booking(BaseModel):
    seats: int = Field(ge=1, le=9)
    ok: bool


class Key(BaseModel):
    api_key: str


class Contact(BaseModel):
    email: str = Field(json_schema_extra={"format": "email"})


class Order(BaseModel):
    size: str = Field(json_schema_extra={"default": "M"})
    count: int = Field(ge=1, json_schema_extra={"default": 1})


def _ask_order(item: str) -> Elicit[Order]:
    return Elicit(f"How do you want {item}?", Order)


def _ask_booking(name: str) -> Elicit[Booking]:
    return Elicit(f"Book {name}?", Booking)


def _ask_key(user: str) -> Elicit[Key]:
    return Elicit(f"The API key of {user}?", Key)


def _ask_contact(who: str) -> Elicit[Contact]:
    return Elicit(f"The address of {who}?", Contact)


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
async def order(item: str, answer: Annotated[ElicitationResult[Order], Resolve(_ask_order)]) -> str:
    """Orders `item` as the person says (or as the form offers)."""
    if isinstance(answer, AcceptedElicitation):
        return f"{answer.data.count} x {item} in {answer.data.size}"
    return f"no order: {answer.action}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def contact(who: str, found: Annotated[Contact, Resolve(_ask_contact)]) -> str:
    """Asks for an address whose schema says `"format": "email"` (the SDK's
    server checks only the type)."""
    return f"{who}: {found.email}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def visit(ctx: Context) -> str:
    """Sends the person to a page (URL mode: on 2025-11-25 sessions only)."""
    result = await ctx.elicit_url(
        "Open the payment page", "https://pay.example.com/p?token=SECRET-TOKEN", "pay-1"
    )
    return f"visit: {result.action}"


def _sample(text: str) -> Sample:
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))],
        max_tokens=40,
        system_prompt="Answer in five words.",
        model_preferences=ModelPreferences(hints=[ModelHint(name="claude-haiku")]),
    )


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def summarize(text: str, reply: Annotated[CreateMessageResult, Resolve(_sample)]) -> str:
    """Summarizes `text` with the client's model."""
    content = reply.content
    said = content.text if isinstance(content, TextContent) else type(content).__name__
    return f"{reply.model}: {said}"


def _list_roots() -> ListRoots:
    return ListRoots()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def roots(listed: Annotated[ListRootsResult, Resolve(_list_roots)]) -> list[list[str | None]]:
    """The client's roots, as `[uri, name]` pairs."""
    return [[str(root.uri), root.name] for root in listed.roots]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def chatter(ctx: Context) -> str:
    """Logs three messages while it runs."""
    with warnings.catch_warnings():  # (logging is deprecated as of 2026-07-28)
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await ctx.info("working", logger_name="chatter")
        await ctx.warning({"api_key": "sk-live-abcdefgh1234", "step": 2}, logger_name="chatter")
        await ctx.debug("detail", logger_name="chatter")
    return "chatted"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def ping() -> str:
    """Answers at once."""
    return "pong"


async def _heard_roots(ctx: object, params: NotificationParams) -> None:
    roots_heard.append(len(roots_heard) + 1)


# The SDK's own hook for a notification (MCPServer passes none of its own).
server._lowlevel_server.add_notification_handler(
    "notifications/roots/list_changed", NotificationParams, _heard_roots
)


if __name__ == "__main__":
    server.run()
