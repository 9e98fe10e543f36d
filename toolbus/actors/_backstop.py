"""The waiting side's backstop: a caller notices an overdue attempt itself.

Deadlines are timers on one thread (`_timers.py`). Under load that thread can
fire late, and every caller waiting on a timed-out call would be late with it.
So a waiting caller also wakes at the deadlines of the calls it waits for,
and for an attempt still running past its deadline tells the supervisor
`Expired`: the supervisor then times it out exactly as if its timer had fired
(a stale or repeated notice is ignored there).

Pure: `overdue` reads the runs and a clock reading; the executor does the
waiting and the telling.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..pipeline import Run

__all__ = ["POLL", "SLACK", "overdue"]

# After its deadline, the timer gets this long to act before the caller does.
SLACK = 0.005
# How often a caller looks again at calls not yet started (no deadline yet).
POLL = 0.25


def overdue(
    runs: Iterable[Run], now: float, noticed: set[tuple[Run, int]]
) -> tuple[list[tuple[Run, int]], float | None]:
    """(attempts overdue and not yet noticed, seconds until the next look).

    An attempt is overdue when it is past its deadline plus `SLACK` and its
    call has no result yet. The next look is None when no call waited for can time out
    (none has a timeout), so the caller may simply wait.
    """
    late: list[tuple[Run, int]] = []
    wake: float | None = None
    for run in runs:
        if run.result is not None or run.timeout is None or math.isinf(run.timeout):
            continue
        deadline = run.deadline
        key = (run, run.attempt)
        if deadline is None or key in noticed:
            # Queued, or noticed already: look again later. (An attempt settled
            # but still in its hooks counts: the supervisor then bounds the
            # hooks by `hook_grace`, as its own deadline timer would.)
            wake = POLL if wake is None else min(wake, POLL)
            continue
        due = deadline + SLACK - now
        if due <= 0:
            late.append(key)
            noticed.add(key)
            wake = POLL if wake is None else min(wake, POLL)
        else:
            wake = due if wake is None else min(wake, due)
    return late, wake
