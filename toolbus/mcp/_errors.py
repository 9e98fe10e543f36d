"""What can go wrong between toolbus and an MCP server, as errors the model can read.

Every error here is a `ToolError`, so its message reaches the model as is. The
connection errors are also `ConnectionError`s, which the default `RetryPolicy`
treats as transient.
"""

from __future__ import annotations

from ..tools import ToolError

__all__ = [
    "MCPCallError",
    "MCPConnectError",
    "MCPConnectionLost",
    "MCPOutputError",
    "MCPServerUnavailable",
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
    """The server refused the call with a protocol error (unknown tool, bad parameters)."""


class MCPOutputError(ToolError):
    """The server's structured content does not match the tool's `outputSchema`
    (or is missing although the tool declares one); the message names the field."""
