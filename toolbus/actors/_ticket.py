"""The scheduler's ticket for one run: where it waits, what it holds, its timer.

A run (`pipeline.Run`) is the call's own record: what it is, its attempts, its
result. What the scheduler keeps about it to place it, bound it and close it
is here instead, written only on the scheduler's thread, so each of the two
records has one writer. The scheduler gives a run its ticket when the run is
submitted (`Admission._on_submit`); `Run.ticket` holds it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PARKED", "READY", "Ticket"]

# Where a run waits (`Ticket.queued`).
READY = 1  # in the ready queue
PARKED = 2  # in a waiting queue (a full capacity group)


class Ticket:
    """One run's scheduling state (the scheduler's thread only).

    No `__init__` and no slots: every field starts as the class's default, so
    making a ticket runs no Python (a call's cost is counted in Python calls:
    `benchmarks/call_budget.py`), and a field is in the instance once written.
    """

    closed = False  # counted, slot released, batch told
    # Its batch's books were cut short as it closed (a signal's exception):
    # mended before the scheduler's lock is let go (`_mend.py`).
    books_cut = False
    slot = False  # holds a concurrency slot (an attempt or its timeout stage)
    queued = 0  # 0: not queued; READY or PARKED
    # Last queued at the front of its priority class (a retry, a run let out
    # of a waiting queue): should it wait again, it keeps that turn.
    ahead = False
    timer: Any = None  # its TimerHandle (`_timers.py`)
    armed: Any = None  # the kind of message `timer` will send (Deadline, ...)
    gen = 0  # bumped whenever `timer` changes: older timer messages are stale
    # The whole call's deadline (`Run.due`) as a timer of its own: it outlives
    # every other, which come and go with attempts, waits and backoffs.
    due_timer: Any = None
    # A cancel asked while a worker held the outcome: (code, reason).
    cancel: tuple[Any, str] | None = None
    # Where its last attempt was when its deadline came (ADMISSION,
    # FINISHING or "": its tool): what a timeout's text says ran out.
    timed_out_in = ""
    pool: Any = None  # the tool's own capacity group
    groups: tuple[Any, ...] = ()  # every capacity group it needs a slot of
    waiting_on: Any = None  # the group it is parked for, if any
    # A nested call may run past a full max_parallel on its caller's share:
    # one such call per caller at a time (`lent` on the caller).
    borrowed = False
    lent = 0
    shared = False  # holds a slot that does not count against max_parallel
    # The calls its tool or hooks made that may still be open (nested), to
    # end with it if it is cancelled: work started inside a call never
    # outlives it. None for the common call, which makes none.
    nested: list[Any] | None = None
    # Known tool, a backend, no quota's refusal, no named group: it may start
    # (set at submission, so admission need not ask `unstartable`).
    plain = False
