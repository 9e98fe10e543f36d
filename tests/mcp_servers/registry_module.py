"""A toolbus registry for `toolbus mcp serve tests.mcp_servers.registry_module:served`.

Besides plain tools: typed returns (output schemas), the four hints, progress,
a cancellable wait, a counter, and `finished`, which tells what became of this
process's calls of a tool and how many waits have started (a client in another
process cannot see the executor's results, nor that a call is running,
otherwise). `served()` starts that recording and returns the registry;
importing the module (as in-process tests do) records nothing.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, TypedDict

from pydantic import BaseModel

from toolbus import Attachment, ToolContext, ToolError, ToolOutput, ToolRegistry, bus

registry = ToolRegistry()

# Every call's end in this process, by tool: (status, error code); the waits
# started (running on the server: a client may cancel one now) and interrupted.
_finished: dict[str, list[tuple[str, str | None]]] = {}
_started: list[float] = []
_interrupted: list[float] = []
_bumps = [0]
_lock = threading.Lock()


def _record(sender: Any, *, event: Any, signal: str) -> None:
    code = event.result.error_code
    with _lock:
        _finished.setdefault(event.tool, []).append(
            (event.result.status, code.value if code is not None else None)
        )


_subscriptions: list[bus.Subscription] = []


def served() -> ToolRegistry:
    """The registry, with this process's call endings recorded for `finished`."""
    if not _subscriptions:
        _subscriptions.append(bus.subscribe(_record, "tool:finished"))
    return registry


class Forecast(BaseModel):
    city: str
    celsius: float
    summary: str


class Reading(TypedDict):
    sensor: str
    value: float


PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAACAAAB4iG8MwAAAABJRU5ErkJggg=="
)


@registry.tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@registry.tool(read_only=True)
def city(name: str) -> dict[str, object]:
    """Facts about a city."""
    return {"name": name, "country": "Norway", "population": 709_037}


@registry.tool(destructive=False)
def save_note(text: str) -> str:
    """Save a note (mutating)."""
    return f"saved {text!r}"


@registry.tool
def fail(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"cannot: {reason}", retryable=False)


@registry.tool(timeout=0.5)
async def hang() -> str:
    """Never returns (toolbus times it out after 0.5 s)."""
    await asyncio.Event().wait()
    return "unreachable"


@registry.tool
def login(user: str, password: str) -> str:
    """Fails, quoting the password (which toolbus masks)."""
    raise ToolError(f"wrong password {password} for {user}")


@registry.tool(type="custom", read_only=True)
def shout(text: str) -> str:
    """Upper-case the raw input."""
    return text.upper()


@registry.tool(read_only=True)
def chart() -> ToolOutput:
    """A caption and an image."""
    return ToolOutput(
        content="a red dot", attachments=(Attachment(type="image/png", data=PIXEL, title="dot"),)
    )


# (base64 of the UTF-8 text, as an attachment's data always is)
CSV = "Y2l0eSzCsEMKT3NsbyziiJIz"  # "city,°C\nOslo,\u22123" (a minus sign)
JSON_DATA = "eyJvayI6IHRydWV9"  # '{"ok": true}'
NOT_UTF8 = "//79"  # bytes ff fe fd, declared text/plain


@registry.tool(read_only=True)
def report() -> ToolOutput:
    """A summary with files: text ones (served as text) and bytes that are not text."""
    return ToolOutput(
        content="see the files",
        attachments=(
            Attachment(type="text/csv", url="file:///reports/cold.csv", data=CSV, title="cold"),
            Attachment(type="application/json", data=JSON_DATA),
            Attachment(type="text/plain", data=NOT_UTF8),
        ),
    )


@registry.tool(read_only=True)
def forecast(city: str) -> Forecast:
    """Tomorrow's weather (a pydantic model: served with its output schema)."""
    return Forecast(city=city, celsius=21.5, summary="sunny")


@registry.tool(read_only=True, open_world=False)
def reading(sensor: str) -> Reading:
    """A sensor's value (a TypedDict), from a closed set of sensors."""
    return {"sensor": sensor, "value": 0.5}


@registry.tool(idempotent=True, open_world=False)
def set_mode(mode: str) -> str:
    """Set the mode (mutating, idempotent, closed world)."""
    return mode


@registry.tool(read_only=True)
async def count_up(steps: int, ctx: ToolContext) -> int:
    """Count to `steps`, reporting progress at each."""
    for i in range(1, steps + 1):
        ctx.progress(f"step {i} of {steps}", i / steps)
        await asyncio.sleep(0.02)
    return steps


@registry.tool(timeout=20)
async def wait(seconds: float) -> str:
    """Wait; its start and an interruption are noted (see `finished`)."""
    with _lock:
        _started.append(seconds)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        with _lock:
            _interrupted.append(seconds)
        raise
    return "waited"


@registry.tool
def bump() -> int:
    """Add one to the counter."""
    with _lock:
        _bumps[0] += 1
        return _bumps[0]


@registry.tool(read_only=True)
def finished(tool: str) -> dict[str, Any]:
    """How this process's calls of `tool` ended, how many waits started and how
    many were interrupted, and the counter."""
    with _lock:
        ends = [list(e) for e in _finished.get(tool, [])]
        return {
            "ends": ends,
            "started": len(_started),
            "interrupted": len(_interrupted),
            "bumps": _bumps[0],
        }
