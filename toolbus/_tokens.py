"""Which bearer tokens an HTTP request can carry: shared by the status server,
`toolbus top` and the MCP server, so that a server never accepts a token its
clients could not send."""

from __future__ import annotations

__all__ = ["token_problem"]


def token_problem(token: str) -> str | None:
    """Why `token` cannot go in an `Authorization` header, None if it can: a
    server refuses such a token (no request could send it), a client will not
    send it. The reason never quotes it: an error about a token must not print
    the token."""
    for char in token:
        if char.isspace() or not char.isprintable():
            # Whitespace at either end is stripped from a header's value; a
            # control character is refused in one.
            return "it holds whitespace or a control character"
        if ord(char) > 0xFF:
            return "it holds a character an HTTP header cannot carry (beyond Latin-1)"
    return None
