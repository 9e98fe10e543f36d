"""Time a run spends setting up off its deadline's clock (`with SetUpTime(...)`).

A backend that must start a worker, or wait for one to be ready, before the
tool runs does it inside `SetUpTime`: the deadline moves on by as long as that
took (bounded), and the run's phase says where it is meanwhile. The deadline
and the phase are the run's: this is the one place outside the pipeline's
steps that moves them.
"""

from __future__ import annotations

import time
from types import TracebackType

from ._run import RUNNING, STARTING, Run

__all__ = ["SetUpTime"]


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
        if run.deadline is not None:
            run.deadline += min(time.monotonic() - self.began, self.limit)
        run.phase = RUNNING
