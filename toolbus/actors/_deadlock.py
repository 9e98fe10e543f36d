"""Would a nested call wait forever? A wait-for check over the calls in flight.

A tool (or hook) that calls its own executor waits for that nested call while
holding its slots. If the nested call must wait for a capacity group, the wait
ends only when a holder of that group lets go; a holder that is itself waiting,
through nested calls of its own, for groups held by the waiting caller never
will (A calls B while B calls A, each tool `max_concurrency=1`; or a tool that
calls itself). Such a call is refused at once instead.

Pure: reads the runs' `parent` and their tickets' `slot`, `groups` and `waiting_on`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..pipeline import Run

__all__ = ["would_deadlock"]


def _callers(run: Run) -> set[Run]:
    """The runs waiting, through nested calls, for `run`: its parent, its parent's..."""
    out: set[Run] = set()
    parent = run.parent
    while parent is not None:
        out.add(parent)
        parent = parent.parent
    return out


def would_deadlock(run: Run, group: Any, open_runs: Iterable[Run]) -> bool:
    """True if every slot of `group` is held by a run that can only let go once
    `run` (a nested call about to wait for `group`) has finished."""
    runs = list(open_runs)
    memo: dict[int, bool] = {}

    def stuck(group: Any, waiting_for_it: set[Run]) -> bool:
        key = id(group)
        if key in memo:
            return memo[key]
        memo[key] = True  # a wait that leads back here is part of the same knot
        holders = [r for r in runs if r.ticket.slot and group in r.ticket.groups]
        result = bool(holders) and all(
            h in waiting_for_it or _blocked(h, waiting_for_it) for h in holders
        )
        memo[key] = result
        return result

    def _blocked(holder: Run, waiting_for_it: set[Run]) -> bool:
        # The holder waits for a nested call of its own that waits, parked, for
        # a group no holder of which can let go either.
        for r in runs:
            g = r.ticket.waiting_on
            if g is None or r.ticket.slot:
                continue
            callers = _callers(r)
            if holder in callers and stuck(g, waiting_for_it | callers):
                return True
        return False

    return stuck(group, _callers(run))
