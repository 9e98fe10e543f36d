"""A server's log messages (`notifications/message`), as events of the call they came during.

    with connect_stdio("python", ["server.py"], log_level="info") as conn: ...

A message that arrives while a call of the connection is in flight (the
call whose request carries it on 2026-07-28; on 2025-11-25 the connection's
only call in flight) is a `tool:progress` event of that call, with data
`server_log`: the server, the level, the logger and the data, masked as
arguments are (a value under a secret key as `***`; the executor's scrubber
and content scanner apply to it as to any progress). Any other message goes
to Python's logging, logger `toolbus.mcp.server`, at its level, masked the
same way. A message not tied to one call for sure (2025-11-25: a guess, or
no call) is scrubbed too of what every call in flight, and the last ones of
the connection that ended, masked (`Calls`): it may quote any of them.

`log_level` asks the server for that level and above: with `logging/setLevel`
on 2025-11-25, in each request's `_meta` on 2026-07-28 (where a server sends
none unless asked); a message below it is dropped here too (servers of
2025-11-25 may send regardless). Without it, a 2025-11-25 server sends what
it chooses.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import mcp_types as types

from .._text import text_of
from ..masking import EMPTY_SCRUBBER, Scrubber, mask_arguments
from ..tools import LogLevel
from ..tools._context import call_scrubber, pass_on_log
from ..tools._peer import LOG_LEVELS, python_level
from ._asking import ASKING, NOBODY, Asking, about, every_scrubber, publish
from ._redact import redact_text

__all__ = ["check_log_level", "logging_callback"]

log = logging.getLogger("toolbus.mcp.server")


def check_log_level(level: object, where: str) -> LogLevel | None:
    """`level` if it is None or one of MCP's log levels, else a `ValueError`."""
    if level is None or level in LOG_LEVELS:
        return level
    raise ValueError(f"{where}: log_level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")


def logging_callback(
    server: Callable[[], str], in_flight: Collection[Asking], least: LogLevel | None = None
) -> Callable[[types.LoggingMessageNotificationParams], Awaitable[None]]:
    """The SDK's `logging_callback` for a connection whose name `server()`
    gives and whose calls in flight are `in_flight`, that asked for `least`
    and above (a message below it, from a server that sends what it likes,
    is dropped)."""
    wanted = frozenset(LOG_LEVELS[LOG_LEVELS.index(least) :] if least else LOG_LEVELS)

    async def callback(params: types.LoggingMessageNotificationParams) -> None:
        if params.level not in wanted:
            return
        data = mask_arguments(params.data)[0]
        tied = ASKING.get()  # (set where the SDK runs this in the call's own request)
        asking = tied if tied is not None else about(in_flight)
        # A message toolbus cannot tie to one call (2025-11-25: a guess, or
        # no call) may quote any call's arguments, one in flight or one
        # whose result came already: every one of them scrubs it.
        others = EMPTY_SCRUBBER if tied not in (None, NOBODY) else every_scrubber(in_flight)
        if others:
            data = others.value(data)
        if asking is not None and asking is not NOBODY and not asking.ctx.cancelled:
            details: dict[str, Any] = {
                "server": server(),
                "level": params.level,
                "logger": params.logger,
                "data": data,
            }
            # Its line is scrubbed before it is cut: the executor scrubs the
            # event too, but only of secrets it finds whole.
            line = _line(data, call_scrubber(asking.ctx).merged(others))
            publish(asking, f"MCP server '{server()}' logged: {line}", server_log=details)
            if asking.peer is not None:  # a served call's: its client hears it too
                pass_on_log(asking.ctx, asking.peer, params.level, data, params.logger or server())
            return
        source = f" ({params.logger})" if params.logger else ""
        line = _line(data, others)
        log.log(python_level(params.level), "MCP server '%s'%s: %s", server(), source, line)

    return callback


def _line(data: Any, scrubber: Scrubber = EMPTY_SCRUBBER) -> str:
    """A log message's data on one line, with the secrets `scrubber` knows
    masked, cut to a readable length."""
    text = data if isinstance(data, str) else repr(data)
    text = redact_text(text_of(text))
    if scrubber:
        text = scrubber.text(text)
    text = text.replace("\n", " ")
    return text if len(text) <= 500 else f"{text[:497]}..."
