"""A reply the SDK could not read: the call it answers ends, saying so.

Over stdio the SDK reads each line the server writes as a JSON-RPC message; a
line that is not one (a reply whose `result` is 42 or null, an error without
a `message`, a lone surrogate's escape its JSON parser refuses) it hands to
the session's message handler as the exception, and drops. The request that
line answered would wait for its timeout, or forever without one. So the
handler (`Generation`'s, through `heard`) reads the request id from what the
exception holds (the message as parsed, or the line), and ends that request
on the session's dispatcher with an error `is_unreadable` recognises:
`Link.call` makes it an `MCPCallError`, *"MCP server 'x' sent a malformed
reply to the call: field 'result' should be a valid dictionary"*.

The dispatcher's `_resolve_pending` is not public API: without it (another
SDK version), nothing is ended and the call waits as before. A line that
names no request (or is no JSON at all) ends nothing; it is logged.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pydantic
from mcp import Client, MCPError
from mcp_types import PARSE_ERROR, ErrorData

from ._errors import field_at

__all__ = ["end_unreadable", "is_unreadable"]

log = logging.getLogger("toolbus.mcp")

_MARK = "toolbus/unreadable"


def is_unreadable(error: MCPError) -> bool:
    """Whether `error` is the one `end_unreadable` ended a request with."""
    data = error.data
    return isinstance(data, dict) and data.get(_MARK) is True


def end_unreadable(client: Client | None, error: Exception, server: str) -> None:
    """End the request that the unreadable message `error` answered, if it
    can be told; log it otherwise."""
    message = _message(error)
    request_id = message.get("id") if message is not None and "method" not in message else None
    resolve = getattr(
        getattr(getattr(client, "_session", None), "_dispatcher", None), "_resolve_pending", None
    )
    if not isinstance(request_id, str | int) or isinstance(request_id, bool) or resolve is None:
        log.warning(
            "MCP server '%s' sent a message that could not be read: %s",
            server,
            _why(error, message),
        )
        return
    why = f"sent a malformed reply to the call: {_why(error, message)}"
    resolve(request_id, ErrorData(code=PARSE_ERROR, message=why, data={_MARK: True}))


def _message(error: Exception) -> dict[str, Any] | None:
    """The message the exception was made from, as parsed: pydantic's input
    of the whole, or the line again, with a parser that takes what the SDK's
    refuses (a lone surrogate's escape)."""
    if not isinstance(error, pydantic.ValidationError):
        return None
    for problem in error.errors(include_url=False):
        value = problem.get("input")
        if problem["type"] == "json_invalid" and isinstance(value, str):
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):  # (nested past the recursion limit)
                return None
        if isinstance(value, dict) and "jsonrpc" in value:
            return value
    return None


def _why(error: Exception, message: dict[str, Any] | None) -> str:
    """What is wrong with the message: its fields and rules, never the values."""
    if not isinstance(error, pydantic.ValidationError):
        return type(error).__name__
    problems = error.errors(include_url=False)
    if any(p["type"] == "json_invalid" for p in problems):
        return "it is not JSON the SDK reads (a lone surrogate's escape, or nested too deep)"
    kind = "JSONRPCError" if message is not None and "error" in message else "JSONRPCResponse"
    found = []
    for p in problems:
        loc = list(p["loc"])
        if loc[:1] != [kind]:
            continue
        rule = "is missing (required)" if p["type"] == "missing" else f"is not valid ({p['type']})"
        if p["type"] == "dict_type":
            rule = "should be an object"
        found.append(f"{field_at(loc[1:], 'the reply')} {rule}")
    return "; ".join(found[:3]) or "it is no JSON-RPC message"
