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

from ..models import ErrorCode
from ._run import ADMISSION, FINISHING, RUNNING, STARTING, Run

__all__ = ["SetUpTime", "ran_out"]


def ran_out(run: Run, phase: str = "") -> tuple[ErrorCode, str]:
    """The error code and the text a model reads for `run`'s attempt that
    timed out in `phase` (ADMISSION, FINISHING, or "": its tool): which of
    its two clocks ran out."""
    name = run.call.name
    if run.out_of_budget():
        return ErrorCode.DEADLINE_EXCEEDED, budget_spent(run, phase)
    if phase == ADMISSION:
        what = "pre-call hooks did not return"
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
    where = {ADMISSION: " in its pre-call hooks", FINISHING: " in its post-call hooks"}
    return (
        f"Tool '{run.call.name}' ran out of {clock}{where.get(phase, '')} (the whole "
        "call: queueing, waits, every attempt and backoff); it was not tried again"
    )


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
