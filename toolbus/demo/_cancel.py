"""The demo's fourth part: a sync caller cancels a running batch.

Six page fetches in one batch, two at a time (`max_parallel=2`): the first
three pages answer at once, the other three come from a server that stopped
answering. The caller, a plain thread, submits the batch without waiting
(`Executor.submit_batch`), waits on the handles of the three quick calls, and
cancels the batch: the slow fetches that run are told to stop (they watch
`ctx.cancelled`), the one still queued never starts, and each of the three
ends `cancelled`, once. Nothing is left held: `stats()` is back to idle.

`play_cancel()` runs it on a background thread and hands each call event to
the caller as delivered, like `play()` does for the turn; `cancel_part()`
prints them and checks them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from rich.console import Console

from .. import bus
from ..executor import Executor, ExecutorStats
from ..models import BatchResult, ToolCall
from ..tools import ToolContext, ToolRegistry
from ._turn import Player, TurnEvent
from ._view import checks_grid, event_line, show_part

__all__ = ["CancelOutcome", "build_cancel_registry", "cancel_part", "play_cancel"]

PAGES = ("home", "docs", "pricing", "slow-1", "slow-2", "slow-3")
QUICK = 3  # the first three answer at once

_INTRO = (
    "Six page fetches in one batch, two at a time (max_parallel=2). The first three pages "
    "answer at once; the other three come from a server that stopped answering. The caller, "
    "a plain thread, submits the batch without waiting (executor.submit_batch), waits on the "
    "handles of the quick three, then calls handle.cancel(): the fetches that run are told "
    "to stop, the one still queued never starts, and each ends cancelled, once."
)


def build_cancel_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def fetch_page(ctx: ToolContext, page: str) -> str:
        """Fetch one page of the shop's site."""
        if page.startswith("slow"):
            # A server that never answers: the fetch waits until it is told to stop.
            ctx.wait_cancelled(60)
            return "never answered"
        return f"<html>{page}</html>"

    return registry


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    batch: BatchResult
    cancelled_any: bool  # what `handle.cancel()` returned
    stats: ExecutorStats  # once the batch's handle resolved and the events were delivered
    events: tuple[TurnEvent, ...]


class _Cancel(Player):
    def wants(self, event: bus.Event) -> bool:
        return isinstance(event, bus.CallEvent)

    def _play(self) -> CancelOutcome:
        with Executor(build_cancel_registry(), max_parallel=2, timeout=30.0) as ex:
            sub = bus.subscribe(self.receive, sender=ex)
            try:
                self.started = time.monotonic()
                handle = ex.submit_batch(
                    [
                        ToolCall(id=f"p{i + 1}", name="fetch_page", arguments={"page": page})
                        for i, page in enumerate(PAGES)
                    ]
                )
                for quick in handle.calls[:QUICK]:
                    quick.result(30)
                cancelled = handle.cancel()
                batch = handle.result(30)
                ex.drain_events()
                stats = ex.stats()
            finally:
                sub.close()
        with self.lock:
            events = tuple(self.events)
        return CancelOutcome(batch, cancelled, stats, events)


def play_cancel() -> Iterator[TurnEvent | CancelOutcome]:
    """Run the part; yield each call event as delivered, then the outcome last."""
    yield from _Cancel().stream("toolbus-demo-cancel", CancelOutcome)


def cancel_part(console: Console, *, wide: bool) -> int:
    """Play the part; print its events and a line per check; its exit code."""
    outcome = show_part(
        console,
        "[bold]A caller cancels[/]: a running batch, from a plain thread",
        _INTRO,
        play_cancel(),
        CancelOutcome,
        lambda item: event_line(item, wide=wide),
    )
    checks = _checks(outcome)
    console.print(checks_grid(checks))
    return 0 if all(ok for ok, _ in checks) else 1


def _checks(o: CancelOutcome) -> list[tuple[bool, str]]:
    statuses = [r.status for r in o.batch.results]
    quick, slow = statuses[:QUICK], statuses[QUICK:]
    calls = [(e.signal, e.event.call_id) for e in o.events if isinstance(e.event, bus.CallEvent)]
    started = {cid for signal, cid in calls if signal == bus.EXECUTING}
    finished = [cid for signal, cid in calls if signal == bus.FINISHED]
    never = [f"p{i + 1}" for i in range(QUICK, len(PAGES)) if f"p{i + 1}" not in started]
    s = o.stats
    return [
        (quick == ["ok"] * QUICK, f"the three quick pages: {', '.join(quick)}"),
        (
            o.cancelled_any and slow == ["cancelled"] * len(slow),
            "handle.cancel() "
            + ("stopped" if o.cancelled_any else "found nothing to stop")
            + f" the slow ones: {', '.join(slow)}"
            + (f" ({', '.join(never)} never started)" if never else ""),
        ),
        (
            sorted(finished) == sorted(f"p{i + 1}" for i in range(len(PAGES))),
            f"one tool:finished per call: {len(finished)} for {len(PAGES)} calls",
        ),
        (
            s.in_flight == 0 and s.queued == 0,
            f"nothing left held: in_flight={s.in_flight}, queued={s.queued}",
        ),
    ]
