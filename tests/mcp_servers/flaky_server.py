"""An MCP server whose tools misbehave on purpose, for toolbus's MCP client tests.

Run it over stdio (`python tests/mcp_servers/flaky_server.py`) or connect to
`server` in-process. Tools:

- `echo` (read-only): returns its text.
- `slow_echo` (read-only): returns its text after `delay` seconds (parallelism).
- `write_note` (mutating, no annotations): returns "saved <text>".
- `fail`: raises a tool error (comes back as `is_error=True`).
- `login`: fails, quoting the password it was given.
- `hang`: never returns; it is cancelled when the client cancels the request.
- `hangs_cancelled` (read-only): how many `hang` calls the client cancelled.
- `freeze`: blocks the server's whole event loop (a hung server).
- `die`: the server process exits mid-call.
- `picture`: returns text and a PNG image block.
- `pid` (read-only): the server's process id (tells one connection from the next).
- `rendezvous` (read-only): returns once `parties` calls are in flight together;
  fails after `wait` seconds otherwise (proves calls ran in parallel, or not).
- `countdown` (read-only): reports progress `n` times, then returns.

`python flaky_server.py --once MARKER` serves only if the file MARKER does not
exist yet (and creates it): every later start exits at once, as a server that
cannot come back would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("flaky", log_level="WARNING")

READ_ONLY = ToolAnnotations(read_only_hint=True)

# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool(annotations=READ_ONLY)
async def slow_echo(text: str, delay: float) -> str:
    """Return the text after `delay` seconds."""
    await asyncio.sleep(delay)
    return text


@server.tool()
def write_note(text: str) -> str:
    """Save a note (mutating)."""
    return f"saved {text}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the reason."""
    raise ToolError(f"cannot do it: {reason}")


@server.tool()
def login(user: str, password: str) -> str:
    """Fails, quoting the password back."""
    raise ToolError(f"wrong password {password} for {user}")


class _Hangs:
    cancelled = 0
    changed = asyncio.Event()


@server.tool()
async def hang() -> str:
    """Never returns; counts the times the client cancelled it."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        _Hangs.cancelled += 1
        _Hangs.changed.set()
        raise
    return "unreachable"


@server.tool(annotations=READ_ONLY)
async def hangs_cancelled(at_least: int) -> int:
    """How many `hang` calls were cancelled, once that is `at_least` (or after 5 s)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            while _Hangs.cancelled < at_least:
                _Hangs.changed.clear()
                await _Hangs.changed.wait()
    return _Hangs.cancelled


@server.tool()
async def freeze(seconds: float = 3600) -> str:
    """Block the whole server (its event loop) for `seconds`."""
    time.sleep(seconds)  # tool under test: a slow server tool
    return "thawed"


@server.tool()
def die() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool(annotations=READ_ONLY, structured_output=False)
def picture() -> list[object]:
    """A caption and a tiny PNG."""
    return ["a red dot", Image(data=PNG, format="png")]


@server.tool(annotations=READ_ONLY)
def pid() -> int:
    """The server's process id."""
    return os.getpid()


class _Meeting:
    arrived = 0
    everyone = asyncio.Event()


@server.tool(annotations=READ_ONLY)
async def rendezvous(parties: int, wait: float = 5.0) -> str:
    """Return once `parties` calls are in flight together; fail after `wait` seconds."""
    _Meeting.arrived += 1
    if _Meeting.arrived >= parties:
        _Meeting.everyone.set()
    try:
        await asyncio.wait_for(_Meeting.everyone.wait(), wait)
    except TimeoutError:
        raise ToolError(f"only {_Meeting.arrived} of {parties} calls arrived") from None
    finally:
        _Meeting.arrived -= 1
        if _Meeting.arrived == 0:
            _Meeting.everyone = asyncio.Event()
    return f"met {parties}"


@server.tool(annotations=READ_ONLY)
async def countdown(n: int, ctx: Context) -> str:
    """Report progress `n` times."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i} of {n}")
    return "liftoff"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--once":
        marker = Path(sys.argv[2])
        if marker.exists():
            sys.exit(4)
        marker.touch()
    server.run()
