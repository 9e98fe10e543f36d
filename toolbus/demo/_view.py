"""Rendering the demo with rich: the script, one line per event, a live board, the summary."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from .. import bus
from ..models import ToolResult
from ..observe._cells import STATUS_STYLE
from ..policies import (
    CACHE_HIT,
    CIRCUIT_CLOSED,
    CIRCUIT_HALF_OPEN,
    CIRCUIT_OPEN,
    GUARDRAIL_TRIPPED,
    THROTTLED,
    CacheHit,
    CircuitChanged,
    GuardrailTripped,
    Throttled,
)
from ..tools import ToolRegistry
from ._turn import Step, TurnEvent

T = TypeVar("T")

__all__ = ["STATUS_STYLE", "Board", "event_line", "script_table", "short"]

SIGNAL_STYLE = {
    bus.EXECUTING: "cyan",
    bus.EXECUTED: "green",
    bus.ERROR: "red",
    bus.TIMEOUT: "bold magenta",
    bus.RETRY_ATTEMPT: "yellow",
    bus.RETRY_SUCCESS: "bold green",
    bus.RETRY_EXHAUSTED: "bold red",
    bus.BATCH_START: "bold blue",
    bus.BATCH_COMPLETE: "bold blue",
    bus.PARALLEL_START: "blue",
    bus.PARALLEL_COMPLETE: "blue",
    bus.REJECTED: "yellow",
    bus.CANCELLED: "yellow",
    bus.PROGRESS: "dim",
    bus.FINISHED: "bold",
    bus.LATE_RESULT: "magenta",
    bus.KILLED: "bold red",
    THROTTLED: "yellow",
    CACHE_HIT: "bold green",
    CIRCUIT_OPEN: "bold red",
    CIRCUIT_HALF_OPEN: "yellow",
    CIRCUIT_CLOSED: "bold green",
    GUARDRAIL_TRIPPED: "bold red",
    bus.RUN_HALTED: "bold red",
}


def short(value: Any, limit: int = 60) -> str:
    """`value` as one line of at most `limit` characters (JSON for non-strings)."""
    # Spaced JSON, unlike orjson's, gives rich places to wrap.
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def describe(signal: str, event: bus.Event, killing: Collection[str] = ()) -> tuple[str, str, str]:
    """(call id, tool, detail) for one event, for a log line (ids are "" for batch events).

    `killing`: the tools whose backend kills a timed-out attempt (the others abandon it).
    """
    match event:
        case bus.Executing():
            detail = f"attempt {event.attempt} · args {short(event.arguments, 70)}"
        case bus.Executed():
            detail = f"attempt {event.attempt} returned after {_ms(event.duration)}"
        case bus.Failed():
            detail = f"attempt {event.attempt} raised: {event.error}"
        case bus.TimedOut():
            fate = "killed" if event.tool in killing else "abandoned"
            detail = f"attempt {event.attempt}: no answer within {event.timeout:g} s; {fate}"
        case bus.WorkerKilled():
            detail = f"attempt {event.attempt}: worker pid {event.pid} and its process group killed"
        case bus.RetryAttempt():
            detail = f"attempt {event.attempt} after: {event.previous_error}"
        case bus.RetrySuccess():
            detail = f"ok after {event.attempts} attempts"
        case bus.RetryExhausted():
            detail = f"gave up after {event.attempts} attempts: {event.error}"
        case bus.CallRejected():
            detail = f"{event.error_code.value}: {event.error}"
        case bus.CallCancelled():
            detail = f"{event.error_code.value}: {event.reason}"
        case bus.Progress():
            pct = f" ({event.fraction:.0%})" if event.fraction is not None else ""
            detail = f"{event.message}{pct}"
        case bus.CallFinished():
            r = event.result
            detail = r.status.upper()
            if r.error_code and r.error_code.value != detail:  # (not "CANCELLED CANCELLED")
                detail += f" {r.error_code.value}"
            if r.attempts:
                detail += f" after {_ms(r.duration)}"
            if r.ok:  # a failure's text had its own line already; an output did not
                detail += f" · {short(r.output, 60)}"
            elif r.status == "deferred":  # nor had a deferral's
                detail += f" · {r.error}"
        case bus.CallQueued():
            detail = f"waits for {event.group}: place {event.position} of {event.queue_length}"
        case bus.LateResult():
            detail = (
                f"abandoned attempt {event.attempt} came back ({event.status}) after "
                f"{_ms(event.duration)}; discarded"
            )
        case Throttled():
            detail = f"waits {_ms(event.wait)} for its turn: at most {event.limit}"
        case CacheHit():
            detail = (
                "answered from an identical call in flight"
                if event.shared
                else "answered from the cache; the tool does not run"
            )
        case CircuitChanged():
            detail = {
                "open": f"{event.failures} failures in a row: open, its calls are rejected",
                "half-open": "the pause is over: half-open, this call is the trial",
                "closed": "the trial worked: closed, its calls run again",
            }.get(event.state, event.state)
            return event.call_id or "", event.tool, detail
        case GuardrailTripped():
            detail = f"guardrail {event.guardrail} ({event.stage}) tripped: {event.reason}"
        case bus.RunHalted():
            whose = f"agent run {event.agent_run}" if event.agent_run else f"{event.batch_id}"
            return (
                event.call_id or "",
                "",
                f"{whose} halted ({event.reason}); {event.cancelled} ended",
            )
        case bus.BatchStart():
            unknown = event.count - event.read_only - event.mutating
            detail = (
                f"{event.count} calls: {event.read_only} read-only, {event.mutating} mutating, "
                f"{unknown} unknown"
            )
            return "", "", f"{event.batch_id} · {detail}"
        case bus.BatchComplete():
            detail = (
                f"{event.success_count} ok, {event.failure_count} not ok in {_ms(event.duration)}"
            )
            return "", "", f"{event.batch_id} · {detail}"
        case bus.ParallelStart():
            return "", "", f"{event.batch_id} · group {event.group}: {event.count} reads released"
        case bus.ParallelComplete():
            detail = (
                f"group {event.group}: {event.success_count} ok, {event.failure_count} not ok "
                f"in {_ms(event.duration)}"
            )
            return "", "", f"{event.batch_id} · {detail}"
        case _:
            return "", "", repr(event)
    return event.call_id, event.tool, detail


def show_part(
    console: Console,
    title: str,
    intro: str,
    items: Iterable[Any],
    done: type[T],
    render: Callable[[Any], RenderableType],
) -> T:
    """Print a part's heading and intro, then each item as `render` draws it
    as it comes, until its outcome (a `done`), which is returned."""
    console.print()
    console.rule(title)
    console.print(intro)
    console.print()
    for item in items:
        if isinstance(item, done):
            console.print()
            return item
        console.print(render(item))
    raise AssertionError(f"{title}: the part ended without an outcome")


def checks_grid(checks: Sequence[tuple[bool, str]]) -> Table:
    """A part's checks, a line each: ✓ or ✗, then what was checked."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for ok, text in checks:
        grid.add_row(Text(" ✓" if ok else " ✗", style="green" if ok else "red"), text)
    return grid


def event_line(item: TurnEvent, *, wide: bool = True, killing: Collection[str] = ()) -> Table:
    """One event as a line: offset, signal, call, tool, detail (the detail wraps).

    Not `wide`, the tool column is left out; the call id says which call it is.
    `killing` as for `describe`.
    """
    call, tool, detail = describe(item.signal, item.event, killing)
    style = SIGNAL_STYLE.get(item.signal, "")
    if isinstance(item.event, bus.CallFinished):
        style = STATUS_STYLE.get(item.event.result.status, style)
    line = Table.grid(padding=(0, 1))
    line.add_column(justify="right", width=8, no_wrap=True)
    line.add_column(width=22, no_wrap=True)
    line.add_column(width=3, no_wrap=True)
    if wide:
        line.add_column(width=17, no_wrap=True)
    line.add_column(ratio=1, overflow="fold")
    cells = [Text(_ms(item.at), style="dim"), Text(item.signal, style=style), Text(call, "bold")]
    if wide:
        cells.append(Text(tool))
    cells.append(Text(detail, style="dim" if item.signal == bus.PROGRESS else ""))
    line.add_row(*cells)
    return line


def script_table(steps: Sequence[Step], registry: ToolRegistry) -> Table:
    """The calls as the model wrote them, with what each is there to show."""
    table = Table(title="The model's tool calls, in its order", title_justify="left")
    table.add_column("id", style="bold", no_wrap=True)
    table.add_column("tool", no_wrap=True)
    table.add_column("arguments as sent", overflow="fold")
    table.add_column("kind", no_wrap=True)
    table.add_column("shows")
    table.add_column("expect", no_wrap=True)
    for s in steps:
        tool = registry.get(s.call.name)
        kind = "—" if tool is None else "read" if tool.read_only else "[bold]write[/]"
        table.add_row(
            s.call.id,
            s.call.name,
            Text(short(s.call.arguments, 60)),
            kind,
            s.shows,
            Text(s.expect, style=STATUS_STYLE.get(s.expect, "")),
        )
    return table


class Board:
    """Where each call stands, redrawn by `rich.live.Live` while the turn runs.

    `update` runs on the rendering thread and `render` on Live's refresh thread;
    both take the lock, and `render` builds a fresh table every time.
    """

    def __init__(self, steps: Sequence[Step]) -> None:
        self._lock = threading.Lock()
        self._steps = tuple(steps)
        self._state: dict[str, tuple[str, str]] = {s.call.id: ("waiting", "dim") for s in steps}
        self._since: dict[str, float] = {}
        self._final: dict[str, ToolResult] = {}
        self._count = 0

    def update(self, item: TurnEvent) -> None:
        ev = item.event
        with self._lock:
            self._count += 1
            if not isinstance(ev, bus.CallEvent) or ev.call_id not in self._state:
                return
            cid = ev.call_id
            match ev:
                case bus.Executing():
                    self._since.setdefault(cid, time.monotonic())
                    self._state[cid] = (f"running (attempt {ev.attempt})", "cyan")
                case bus.Failed():
                    self._state[cid] = (f"failed attempt {ev.attempt}", "red")
                case bus.TimedOut():
                    self._state[cid] = ("timed out", "magenta")
                case bus.RetryAttempt():
                    self._state[cid] = (f"retrying (attempt {ev.attempt})", "yellow")
                case bus.Progress():
                    self._state[cid] = (f"running: {ev.message}", "cyan")
                case bus.CallFinished():
                    self._final[cid] = ev.result
                    self._state[cid] = (ev.result.status, STATUS_STYLE[ev.result.status])

    def render(self) -> RenderableType:
        now = time.monotonic()
        table = Table(title="Calls", title_justify="left", expand=False)
        for name in ("id", "tool", "state", "time"):
            table.add_column(name, no_wrap=True, justify="right" if name == "time" else "left")
        with self._lock:
            for s in self._steps:
                cid = s.call.id
                state, style = self._state[cid]
                if cid in self._final:
                    elapsed = _ms(self._final[cid].duration)
                elif cid in self._since:
                    elapsed = _ms(now - self._since[cid])
                else:
                    elapsed = ""
                table.add_row(cid, s.call.name, Text(state, style=style), elapsed)
            caption = Text(f"{self._count} events so far", style="dim")
        return Group(table, caption)
