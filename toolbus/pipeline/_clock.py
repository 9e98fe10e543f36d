"""A run's two clocks: which one ran out (`ran_out`), and time off the clock.

An attempt's deadline is the earlier of its own (`timeout`, start-to-close)
and the whole call's (`call_timeout`, schedule-to-close: queueing, policy
waits, every attempt and backoff; `Run.due`). A timeout says which one ran
out: `EXECUTION_TIMEOUT` for the attempt's own, which a retry may follow,
`DEADLINE_EXCEEDED` for the call's, which nothing follows.

A backend that must start a worker, or wait for one to be ready, before the
tool runs does it inside `SetUpTime`: the deadline moves on by as long as that
took (bounded), and the run's phase says where it is meanwhile. The deadline
and the phase are the run's: this is the one place outside the pipeline's
steps that moves them.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Literal

from ..models import ErrorCode, ToolResult
from ._make import make_result
from ._run import ADMISSION, FINISHING, POLICIES, RUNNING, STARTING, Run

__all__ = ["EARLY", "SetUpTime", "off_clock", "ran_out", "spent_result"]

# A deadline timer that fires this much before the run's deadline was armed for
# an earlier one; the timer service itself fires on time or late, never early.
EARLY = 0.001


def ran_out(run: Run, phase: str = "") -> tuple[ErrorCode, str]:
    """The error code and the text a model reads for `run`'s attempt that
    timed out in `phase` (ADMISSION, FINISHING, or "": its tool): which of
    its two clocks ran out."""
    name = run.call.name
    if run.out_of_budget():
        return ErrorCode.DEADLINE_EXCEEDED, budget_spent(run, phase)
    if phase == ADMISSION:
        # Not only the user's hooks: the masker and the content scanner run here too.
        what = "pre-call steps (hooks, masking, content scanning) did not return"
    elif phase == FINISHING:
        what = "post-call hooks did not return"
    else:
        what = f"Tool '{name}' timed out"
    return ErrorCode.EXECUTION_TIMEOUT, f"{what} after {run.timeout}s"


def budget_spent(run: Run, phase: str = "") -> str:
    """The text of a call its whole-call deadline ended (`DEADLINE_EXCEEDED`),
    in `phase` (a step of an attempt) or before any attempt began."""
    if run.budget is not None:
        clock = f"its call_timeout of {run.budget:g}s"
    else:  # inherited from the call that made it
        clock = f"the time left to call {run.parent_call_id}, which made it"
    where = {ADMISSION: " in its pre-call steps", FINISHING: " in its post-call hooks"}
    return (
        f"Tool '{run.call.name}' ran out of {clock}{where.get(phase, '')} (the whole "
        "call: queueing, waits, every attempt and backoff); it was not tried again"
    )


def spent_result(run: Run, attempts: int) -> ToolResult:
    """The result of a call whose whole-call deadline came while none of its
    attempts was running (queued, delayed, backing off, being set up), after
    `attempts` had run: `timeout`/`DEADLINE_EXCEEDED`, marked
    `metadata["between_attempts"]` so a circuit breaker takes it as no
    evidence about the tool (the caller's budget ended it, not the tool)."""
    return make_result(
        run, "timeout", error=budget_spent(run), code=ErrorCode.DEADLINE_EXCEEDED,
        attempts=attempts, metadata={"between_attempts": True},
    )  # fmt: skip


def off_clock(run: Run, now: float) -> tuple[Literal["spent", "undecided", "wait"], float]:
    """What an attempt's deadline timer does, firing at `now` while `run` is
    off the attempt's clock (its policies deciding, its intent being
    journaled, its worker starting): end it as never begun ("spent": the
    whole call's time is up), end it as a policy that did not decide
    ("undecided"), or ("wait", seconds) look again later."""
    due = run.due
    if due is not None and due - now <= EARLY:
        return "spent", 0.0  # off the attempt's clock, never off the whole call's
    if run.phase == POLICIES:
        # Off the deadline's clock, but not for ever: policies get as long as
        # the call's timeout, apart from it.
        if run.timeout is None:
            undecided = (due or now) - now
        else:
            undecided = run.asking_since + run.timeout - now
        if undecided <= EARLY:
            return "undecided", 0.0
    else:
        # Journaling or starting a worker: the step moves the deadline on
        # when it is done, so look again a timeout from now.
        undecided = run.timeout or 0.0
    return "wait", undecided if due is None else min(undecided, due - now)


class SetUpTime:
    """`with SetUpTime(run, limit):` the time spent inside (starting a worker,
    waiting for one to be ready) is off `run`'s deadline's clock, `limit`
    seconds of it at most; the run's phase says it is starting meanwhile."""

    __slots__ = ("began", "limit", "run")

    def __init__(self, run: Run, limit: float) -> None:
        self.run = run
        self.limit = limit
        self.began = 0.0

    def __enter__(self) -> None:
        self.run.phase = STARTING
        self.began = time.monotonic()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Whatever came of it, the set-up was off the clock.
        run = self.run
        run.move_deadline(min(time.monotonic() - self.began, self.limit))
        run.phase = RUNNING
