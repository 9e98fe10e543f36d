"""The actors layer: the supervisor and the machinery it owns.

One supervisor per executor schedules every call: its `Scheduler` holds the
state (admission over named capacity groups, barriers, the thread budget,
deadlines and backoffs on the `TimerService`, cancellation) under a lock that
callers and backends take to act on it inline; its actor carries the timers.
Where attempts run is the backends' job (`toolbus.backends`); the thread
backend's workers are actors too.
"""

from ..backends import LoopThread, ToolWorker, WorkerHandle
from ..pipeline import BatchRun, LoopWaiter, Run, ThreadWaiter, Waiter
from ._scheduler import Scheduler
from ._supervisor import Supervisor, SupervisorHost
from ._timers import TimerHandle, TimerService

__all__ = [
    "BatchRun",
    "LoopThread",
    "LoopWaiter",
    "Run",
    "Scheduler",
    "Supervisor",
    "SupervisorHost",
    "ThreadWaiter",
    "TimerHandle",
    "TimerService",
    "ToolWorker",
    "Waiter",
    "WorkerHandle",
]
