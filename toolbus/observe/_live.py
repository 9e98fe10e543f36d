"""`live(executor)`: the dashboard in this terminal, while a block of code runs.

    with Executor(registry) as executor, toolbus.observe.live(executor):
        run_the_agent(executor)

rich's `Live` redraws the board a few times a second on its own thread; a bus
subscription keeps the state (`_state.py`) and `executor.stats()` gives the
counters. Nothing here runs on a tool's or the supervisor's thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._options import positive_number
from ..executor import Executor
from ._state import LiveState
from ._subscription import require_bus

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["LiveView", "live"]


class LiveView:
    """What `live()` yields: the state it draws, and `refresh()` to redraw now."""

    def __init__(self, state: LiveState, refresh: Any) -> None:
        self.state = state
        self._refresh = refresh

    def refresh(self) -> None:
        self._refresh()


@contextmanager
def live(
    executor: Executor,
    *,
    console: Console | None = None,
    refresh_per_second: float = 4.0,
    transient: bool = False,
) -> Iterator[LiveView]:
    """Draw `executor`'s dashboard in the terminal until the block ends.

    Shows calls in flight (attempt, state, elapsed), queued calls, recent
    results and failures, per-tool counts and latency percentiles, retries,
    timeouts, abandoned and killed workers. On exit it waits (up to 2 s) for
    the events already announced, draws a last frame and leaves it on the
    screen (`transient=True` clears it instead). What the block prints
    appears above the board.
    """
    # Checked before anything starts: rich would assert on them, naming nothing.
    require_bus(executor, "live")
    refresh_per_second = positive_number(refresh_per_second, "refresh_per_second", "live")
    from rich.live import Live  # rich's live machinery loads only when used

    from ._config import describe_executor
    from ._feed import Feed
    from ._view import Board

    feed = Feed(executor)
    config = describe_executor(executor)

    def board() -> Board:
        try:
            stats: dict[str, Any] | None = executor.stats().model_dump()
        except Exception:
            stats = None
        now = time.time()
        return Board(config=config, state=feed.state.snapshot(now), stats=stats, now=now)

    try:
        with Live(
            get_renderable=board,
            console=console,
            refresh_per_second=refresh_per_second,
            transient=transient,
            redirect_stdout=True,
            redirect_stderr=True,
        ) as screen:
            yield LiveView(feed.state, screen.refresh)
            executor.drain_events(timeout=2.0, subscription=feed.subscription)
            screen.refresh()
    finally:
        feed.close()
