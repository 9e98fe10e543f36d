"""Which tools a caller is offered: here, by the scopes its token grants.

A tool's `scopes` are what a caller's OAuth token must grant before the tool
is listed for it or called by it (the MCP server over HTTP with OAuth,
`toolbus.mcp`). The decision is a pure function of the tool and what was
granted, so a listing and a call can never disagree: a tool not offered to
a token is a tool that token cannot call.

`granted` carries what the served call's token grants into the call's
context, so the calls it makes in turn (a sequence's steps, a tool calling
another) are held to it too, and an unknown tool's error names only tools
the token is offered.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Set
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._tool import Tool

__all__ = ["check_scopes", "granted", "missing_scopes", "offered", "scope_name"]

# What the token of the served call running in this context grants (None:
# no token, nothing checked). Set by the MCP server around a call.
granted: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "toolbus_granted_scopes", default=None
)


def check_scopes(value: object, owner: str) -> tuple[str, ...]:
    """`scopes` as a tool keeps them: a tuple of scope names (RFC 6749 3.3:
    printable ASCII without spaces, quotes or backslashes); one name alone is
    taken as a list of one."""
    try:
        names: tuple[object, ...] = (value,) if isinstance(value, str) else tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{owner}: scopes must be a list of scope names") from None
    for name in names:
        if not scope_name(name):
            raise ValueError(
                f"{owner}: scope {name!r} is not a scope name (printable ASCII without spaces, "
                "double quotes or backslashes)"
            )
    return tuple(dict.fromkeys(str(n) for n in names))


def scope_name(name: object) -> bool:
    """Whether `name` is a scope name: RFC 6749's scope-token (%x21 / %x23-5B / %x5D-7E)."""
    return (
        isinstance(name, str)
        and bool(name)
        and all(c == "!" or "#" <= c <= "[" or "]" <= c <= "~" for c in name)
    )


def missing_scopes(tool: Tool, granted: Set[str] | None) -> tuple[str, ...]:
    """The scopes `tool` needs that `granted` lacks (None: nothing is checked,
    as for a caller in this process or behind a shared token)."""
    if granted is None or not tool.scopes:
        return ()
    return tuple(s for s in tool.scopes if s not in granted)


def offered(tools: Iterable[Tool], granted: Set[str] | None) -> list[Tool]:
    """The tools a caller granted `granted` may see and call."""
    return [t for t in tools if not missing_scopes(t, granted)]
