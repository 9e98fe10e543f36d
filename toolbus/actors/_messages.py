"""Messages between the executor, the supervisor, the backends and the timers.

Frozen and slotted: pykka passes messages by reference, so nothing a receiver
does can change what the sender sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..models import ErrorCode

if TYPE_CHECKING:
    from ..backends import Job
    from ..pipeline import BatchRun, Outcome, Run

__all__ = [
    "BudgetSpent",
    "Cancel",
    "CancelWhere",
    "Close",
    "Deadline",
    "Expired",
    "Grace",
    "HaltRun",
    "LoopStalled",
    "Report",
    "Reports",
    "RetryDue",
    "StatusQuery",
    "SubmissionCutShort",
    "Submit",
    "SubmitIfRoom",
    "UntilDone",
    "WaitGivenUp",
]


@dataclass(slots=True)
class Submit:
    """Executor -> supervisor: schedule these runs (a batch, or one call).

    (Not frozen, though never changed: a frozen dataclass's `__init__` sets
    each field through `object.__setattr__`, 0.5 µs on every call's path.)"""

    runs: tuple[Run, ...]
    batch: BatchRun | None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Executor -> supervisor: end the unfinished runs of a batch or one run."""

    batch: BatchRun | None
    run: Run | None
    code: ErrorCode
    reason: str


@dataclass(frozen=True, slots=True)
class SubmissionCutShort:
    """Executor -> supervisor: the submission of `submit`'s runs was cut
    short (its caller's Ctrl-C) after they were made, maybe before they were
    handed on: those the scheduler never admitted are counted and end
    `cancelled` as a submission interrupted inside the scheduler does, so
    that what they hold (a quota's unit) is given back and the submission
    hooks that saw them see them end. (Said twice, it ends them once.)"""

    submit: Submit


@dataclass(frozen=True, slots=True)
class WaitGivenUp:
    """Executor -> supervisor: the caller waiting on `waiter` gave up (its
    thread was interrupted): end the unfinished runs it waited for (those
    whose waiter, or whose batch's, it is) `cancelled` with `reason`.

    Found by their waiter, not named: a signal may land after the calls were
    handed on but before the caller held them (inside `execute`'s own
    submission), and they must not run on unwatched. Calls never handed on
    match nothing; one handed on is admitted before this is handled (both go
    through the same queue, in order)."""

    waiter: Any
    reason: str


@dataclass(frozen=True, slots=True)
class CancelWhere:
    """Executor -> supervisor: end every unfinished run with this call id
    and/or of this batch (`Executor.cancel`); answered with how many."""

    call_id: str | None
    batch_id: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class HaltRun:
    """Anyone -> supervisor: end every unfinished run of the agent run
    `agent_run` (None: none) and of `batch` (None: none) `cancelled` with
    `HALTED` and `reason`, but `by` (the run whose policy halted, which ends
    with its own result); `fresh`: the run was not halted before (announced).
    Answered with how many it ended (`Executor.halt`)."""

    agent_run: str | None
    batch: BatchRun | None
    reason: str
    by: Run | None = None
    fresh: bool = True


class Report(tuple[Any, "Job", "Outcome"]):
    """Backend -> supervisor: `(worker, job, outcome)`: `job` is over (run by
    `worker`); this is what became of it. A tuple, made as `Report((worker,
    job, outcome))` by `tuple`'s own constructor: every call ends with one, and
    a dataclass's `__init__` would be Python code on that path."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Reports:
    """Backend -> supervisor: several jobs are over (reported in bulk), each as
    `(job, outcome, worker)` as `Host.report_many` has them (not a `Report` each)."""

    reports: tuple[tuple[Job, Outcome, Any], ...]


@dataclass(frozen=True, slots=True)
class Deadline:
    """Timer -> supervisor: attempt `attempt` of `run` is due (stale unless `gen` is current)."""

    run: Run
    attempt: int
    gen: int


@dataclass(frozen=True, slots=True)
class Expired:
    """Waiting caller -> supervisor: attempt `attempt` of `run` is past its deadline
    and its timer has not acted (see `_backstop.py`)."""

    run: Run
    attempt: int


@dataclass(frozen=True, slots=True)
class LoopStalled:
    """Timer -> supervisor: the watch of an event loop (`_loopwatch.py`) has
    not looked `BLOCKED_LOOP` after it was due to (stale unless `gen` is its
    current one): the calls it watches are looked at from here."""

    watch: Any
    gen: int


@dataclass(frozen=True, slots=True)
class BudgetSpent:
    """Timer or waiting caller -> supervisor: `run`'s whole-call deadline
    (`Run.due`) has come; it ends unless an attempt of it is under way (whose
    own deadline is never later)."""

    run: Run


@dataclass(frozen=True, slots=True)
class Grace:
    """Timer -> supervisor: a settled attempt's hooks are overdue."""

    run: Run
    attempt: int
    gen: int


@dataclass(frozen=True, slots=True)
class RetryDue:
    """Timer -> supervisor: the backoff after attempt `attempt` is over."""

    run: Run
    attempt: int
    gen: int


@dataclass(frozen=True, slots=True)
class UntilDone:
    """A policy's `Delay(until=future)` -> supervisor: the future is done; the
    calls delayed until it are asked again."""

    future: Any


@dataclass(frozen=True, slots=True)
class StatusQuery:
    """Executor -> supervisor (ask): a snapshot of counters."""


@dataclass(frozen=True, slots=True)
class SubmitIfRoom:
    """Executor -> supervisor (ask): handle `submit` if its runs fit in the
    bounded queues they may join, and answer True; else leave it and answer
    False (`on_full="wait"`: the caller waits for room and asks again)."""

    submit: Submit


@dataclass(frozen=True, slots=True)
class Close:
    """Executor -> supervisor (ask): cancel everything unfinished and stop."""

    reason: str
