"""The supervisor actor: the mailbox through which timers reach the scheduler.

Everything the supervisor decides lives in `Scheduler` (`_scheduler.py`),
under its lock. Callers and backends act on it inline; the timer thread only
`tell`s, so a deadline or a backoff is handled here, on the supervisor's own
thread, and the timer thread stays free for the next timer. A thin shell: it
carries each message to the scheduler.
"""

from __future__ import annotations

from typing import Any

import pykka

from .. import pipeline as _pipeline
from .._sync import simple_inbox
from ..backends import Job
from ..bus import _signals as sig
from ..pipeline import Outcome
from ._messages import Close, Report, Reports
from ._scheduler import Scheduler

__all__ = ["Supervisor", "SupervisorHost"]


class SupervisorHost:
    """What backends report to: the scheduler, inline on the reporting thread.
    Late results are announced after the report, so whoever sees the event also
    sees it in the stats."""

    __slots__ = ("loop", "scheduler", "services")

    def __init__(self, services: _pipeline.Services, loop: _pipeline.AsyncRunner) -> None:
        self.services = services
        self.loop = loop
        self.scheduler: Scheduler | None = None

    def report(self, job: Job, outcome: Outcome, worker: Any = None) -> bool:
        assert self.scheduler is not None
        self.scheduler.post(Report((worker, job, outcome)))
        if outcome.late is not None:
            self.services.emitter.emit(sig.LATE_RESULT, outcome.late)
        return True

    def report_many(self, reports: list[tuple[Job, Outcome, Any]]) -> bool:
        assert self.scheduler is not None
        # A copy (the list is the backend's), each entry unpacked here: a
        # malformed one raises in the backend's hands, before anything is posted.
        self.scheduler.post(Reports(tuple([(j, o, w) for j, o, w in reports])))
        emitter = self.services.emitter
        for _, outcome, _ in reports:
            if outcome.late is not None:
                emitter.emit(sig.LATE_RESULT, outcome.late)
        return True


class Supervisor(pykka.ThreadingActor):
    """Carries timer messages (Deadline, Grace, RetryDue) to the scheduler."""

    use_daemon_thread = True
    _create_actor_inbox = staticmethod(simple_inbox)  # C SimpleQueue, not queue.Queue

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__()
        self.scheduler = scheduler

    def on_start(self) -> None:
        ref = self.actor_ref

        def tell(message: Any) -> None:
            try:
                ref.tell(message)
            except pykka.ActorDeadError:
                pass  # a timer firing as the executor closes: Close ended every call

        self.scheduler.bind(tell)

    def on_receive(self, message: Any) -> Any:
        self.scheduler.post(message)
        return None

    def on_stop(self) -> None:
        # Stopped without the executor's close: every open call still gets its result.
        self.scheduler.ask(Close("the executor stopped"))
