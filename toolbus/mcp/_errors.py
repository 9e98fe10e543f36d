"""What can go wrong between toolbus and an MCP server, as errors the model can read.

Every error here is a `ToolError`, so its message reaches the model as is. The
connection errors are also `ConnectionError`s, which the default `RetryPolicy`
treats as transient.
"""

from __future__ import annotations

from collections.abc import Sequence

import pydantic

from ..tools import ToolError

__all__ = [
    "MCPCallError",
    "MCPConnectError",
    "MCPConnectionLost",
    "MCPOutputError",
    "MCPServerUnavailable",
    "field_at",
    "malformed_reply",
]


class MCPConnectError(ConnectionError):
    """Connecting to an MCP server failed (raised by `connect*`, not by calls)."""


class MCPServerUnavailable(ToolError, ConnectionError):
    """A call found no live connection to its server; the request was never sent.

    Safe to retry: the server never saw the call.
    """


class MCPConnectionLost(ToolError, ConnectionError):
    """The connection dropped while a call was in flight (the server exited or crashed).

    The server may have done part of the work, so for a mutating tool this is
    not retryable (`retryable=False`); for a read-only tool the policy decides.
    """


class MCPCallError(ToolError):
    """The server refused the call with a protocol error (unknown tool, bad
    parameters), or answered it with a reply that is no result (`malformed_reply`)."""


class MCPOutputError(ToolError):
    """The server's structured content does not match the tool's `outputSchema`
    (or is missing although the tool declares one); the message names the field."""


def malformed_reply(error: pydantic.ValidationError, *, server: str) -> MCPCallError:
    """The error for a reply to a call that is no `CallToolResult` (nor a task
    the call became): its fields and rules, never the values, which pydantic's
    own text quotes (a server may echo anything, a secret too)."""
    problems: dict[str, str] = {}
    kinds: dict[str, list[str]] = {}
    errors = error.errors(include_url=False)
    # The reply is tried as each kind of answer a call may get (a result, a
    # question): what it lacks as a result is what is wrong with it.
    as_result = [e for e in errors if "CallToolResult" in e["loc"]]
    for e in as_result or errors:
        loc = list(e["loc"])
        if "CallToolResult" in loc:
            loc = loc[len(loc) - loc[::-1].index("CallToolResult") :]
        # (pydantic's own steps in the path: a validator, a union's tag)
        loc = [p for p in loc if not (isinstance(p, str) and "[" in p)]
        # A union (a content block) is tried as each of its kinds, named in the
        # path: one line for the place, naming the kinds, not one per try.
        at = next((i for i, p in enumerate(loc) if isinstance(p, str) and p[:1].isupper()), None)
        if at is not None:
            where = field_at(loc[:at], "the reply")
            problems.setdefault(where, "")  # (its place in the list)
            tried = kinds.setdefault(where, [])
            if str(loc[at]) not in tried:
                tried.append(str(loc[at]))
            continue
        msg, value = e["msg"], e.get("input")
        if msg == "Field required":
            rule = "is missing (required)"
        elif msg.startswith("Input should") and not (
            isinstance(value, str | int | float) and str(value) in msg
        ):
            rule = msg.replace("Input should", "should", 1)
        else:  # a validator's own text, or one that quotes the value
            rule = f"is not valid ({e['type']})"
        problems.setdefault(field_at(loc, "the reply"), rule)
    for where, tried in kinds.items():
        problems[where] = f"is none of the kinds it may be ({', '.join(tried)})"
    listed = [f"{where} {rule}" for where, rule in problems.items()]
    more = f"; and {len(listed) - 3} more" if len(listed) > 3 else ""
    return MCPCallError(
        f"MCP server '{server}' sent a malformed reply to the call: {'; '.join(listed[:3])}{more}"
    )


def field_at(path: Sequence[int | str], whole: str) -> str:
    """Where in a reply something is wrong: "field 'content[0].text'", or
    `whole` (what the reply is called) for all of it."""
    if not path:
        return whole
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return f"field '{text}'"
