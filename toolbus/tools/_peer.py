"""The client a call was served to, when its tool asks it something back.

A tool served over MCP (`toolbus mcp serve`) may ask the person at the
client for input while it runs (`ToolContext.elicit`) and send the client
log messages (`ToolContext.log`). The server sits above the tools layer, so
it hands the client over here instead of being imported: for each call it
serves, `serving(call_id, peer)` names the call's `Peer`, and the tool's
context finds it by the call's id.

A call that was not served has no peer, nor has a tool that runs in another
process (`ProcessBackend`, Ray: the client is reachable from the server's
process only): asking raises `InputUnavailable`, and a log message goes to
Python's logging alone.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict

__all__ = [
    "LOG_LEVELS",
    "ElicitationAnswer",
    "InputUnavailable",
    "LogLevel",
    "Peer",
    "log_locally",
    "peer_of",
    "python_level",
    "serving",
]

LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
"""MCP's log levels (RFC 5424's, the least severe first)."""

LOG_LEVELS: tuple[LogLevel, ...] = get_args(LogLevel)

# notice sits between info and warning; alert and emergency beyond critical.
_PYTHON_LEVELS = dict(zip(LOG_LEVELS, (10, 20, 25, 30, 40, 50, 50, 50), strict=True))


def python_level(level: LogLevel) -> int:
    """The `logging` level of an MCP log level."""
    return _PYTHON_LEVELS[level]


class ElicitationAnswer(BaseModel):
    """An answer to a request for input: accept (with the data, for a form),
    decline (the person said no) or cancel (they dismissed it)."""

    model_config = ConfigDict(frozen=True)

    action: Literal["accept", "decline", "cancel"]
    data: dict[str, Any] | None = None


class InputUnavailable(RuntimeError):
    """Nobody can answer a tool's request for input: its call was not served
    to an MCP client, the client cannot answer (it declared no elicitation,
    or no URL elicitation), or the tool runs in another process."""


class Peer(Protocol):
    """The client of one served call, as its tool may reach it."""

    def elicit(
        self, message: str, schema: Mapping[str, Any] | None, url: str | None
    ) -> concurrent.futures.Future[ElicitationAnswer]:
        """Ask for input: a form (`schema`) or a page to visit (`url`).

        The future resolves to the answer (a form's data checked against the
        schema), or fails with `InputUnavailable` or `ValueError` (a schema
        the client cannot be sent, data that does not match it). It is
        cancelled when the served call ends: nothing waits past it.
        """
        ...

    def log(self, level: LogLevel, data: Any, logger: str | None) -> None:
        """Send a log message, if the client wants that level. Never blocks,
        never raises: logging must not fail a call."""
        ...


_lock = threading.Lock()
_peers: dict[str, Peer] = {}


@contextlib.contextmanager
def serving(call_id: str, peer: Peer) -> Iterator[None]:
    """While the block runs, the tool of call `call_id` reaches its client through `peer`."""
    with _lock:
        if call_id in _peers:
            # Ids are the server's own (one per call it makes): a clash is a bug.
            raise RuntimeError(f"call {call_id!r} is already being served")
        _peers[call_id] = peer
    try:
        yield
    finally:
        with _lock:
            _peers.pop(call_id, None)


def peer_of(call_id: str) -> Peer | None:
    """The client call `call_id` was served to, if it is being served here."""
    return _peers.get(call_id)


def log_locally(tool: str, level: LogLevel, message: str) -> None:
    """A tool's log message, in Python's logging (`toolbus.tool.<tool>`)."""
    logging.getLogger(f"toolbus.tool.{tool}").log(python_level(level), "%s", message)
