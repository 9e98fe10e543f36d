"""The waiting side's backstop: a caller notices an overdue attempt itself.

Deadlines are timers on one thread (`_timers.py`). Under load that thread can
fire late, and every caller waiting on a timed-out call would be late with it.
So a waiting caller also wakes at the deadlines of the calls it waits for,
and for an attempt still running past its deadline tells the supervisor
`Expired`: the supervisor then times it out exactly as if its timer had fired
(a stale or repeated notice is ignored there).

A caller's own look is as sure as a timer, and cheaper: an attempt dispatched
on its blocking caller's thread before that caller first looks, or on its
awaiting caller's loop before that loop watches it, gets no timer at all
(`caller_watches`): the caller's first look wakes at its deadline (a loop's
watch keeps one timer for all its calls, for a loop that cannot look). Every
other attempt keeps one: one dispatched on another thread may miss a look
already made, and a caller that noticed an attempt once does not tell of it
again (a deadline re-armed for the same attempt).

Pure: `overdue` reads the runs and a clock reading; the executor does the
waiting and the telling.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterable

from ..pipeline import LoopWaiter, Run, ThreadWaiter

__all__ = ["BLOCKED_LOOP", "POLL", "SLACK", "SPENT", "caller_watches", "overdue"]

# After its deadline, the timer gets this long to act before the caller does:
# none. The caller acts at the deadline itself, and where nothing of the
# user's follows the timeout it finishes its own result there and then,
# without a hop to another thread (the timer's message goes through the
# supervisor's mailbox, then wakes the caller: two more, each a wait for the
# GIL when a CPU-bound thread holds it). Whichever acts second finds it done.
SLACK = 0.0
# The attempt number `overdue` lists a call under when its whole-call deadline
# (`Run.due`) has come: no attempt's (0 is a call a policy's delay put back).
SPENT = -1
# How often a caller looks again at calls not yet started (no deadline yet).
POLL = 0.25
# How late a loop's watch may look before its timer on the timer thread looks
# for it (a loop blocked by other code, stopped or closed: `LoopWatch`).
BLOCKED_LOOP = POLL


def overdue(
    runs: Iterable[Run], now: float, noticed: set[tuple[Run, int]]
) -> tuple[list[tuple[Run, int]], float | None]:
    """(attempts overdue and not yet noticed, seconds until the next look).

    An attempt is overdue when it is past its deadline plus `SLACK` and its
    call has no result yet; a call past its whole-call deadline (`Run.due`)
    plus `SLACK` is listed once more, as attempt `SPENT`, whatever it is doing. The
    next look is None when no call waited for can time out (none has a
    timeout or a whole-call deadline), so the caller may simply wait.
    """
    late: list[tuple[Run, int]] = []
    wake: float | None = None
    for run in runs:
        if run.result is not None:
            continue
        spent = run.due
        if spent is not None and (run, SPENT) not in noticed:
            # Its whole-call deadline, whatever it is doing.
            left = spent + SLACK - now
            if left <= 0:
                late.append((run, SPENT))
                noticed.add((run, SPENT))
            else:
                wake = left if wake is None else min(wake, left)
        if spent is None and (run.timeout is None or math.isinf(run.timeout)):
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


def caller_watches(run: Run) -> bool:
    """True if `run`'s attempt, dispatched now, needs no deadline timer of
    its own: its caller looks at the deadline itself, and sooner, because

    - it blocks, is this very thread and has yet to look: its first look
      wakes at the deadline (and acts on it), as sure as a timer; or
    - it awaits on this thread's loop, whose watch wakes at the deadline:
      told so now if it watches the call already (queued when submitted,
      or a retry: `LoopWatch.expect`), or as it is registered next
      (`LoopWatch.watch`). The caller resumes on that loop, so a timer
      would free it no sooner: it would only put hops in the way, each a
      wait for the GIL. For a loop that cannot look (blocked by other code,
      stopped, closed) the watch keeps one timer of its own, `BLOCKED_LOOP`
      later, for all the calls it watches."""
    batch = run.batch
    waiter = run.waiter if batch is None else batch.waiter
    kind = type(waiter)
    if kind is ThreadWaiter:
        return not waiter.looking and waiter.owner == threading.get_ident()  # type: ignore[union-attr]
    if kind is not LoopWaiter or asyncio._get_running_loop() is not waiter.loop:  # type: ignore[union-attr]
        return False
    watch = waiter.watch  # type: ignore[union-attr]
    if watch is not None:
        deadline = run.deadline
        assert deadline is not None
        return bool(watch.expect(deadline))
    # Not watched yet; or released already, and then nobody will watch it.
    return not waiter.future.done()  # type: ignore[union-attr]
