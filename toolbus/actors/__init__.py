"""The actors layer: the supervisor and the machinery it owns.

One supervisor actor per executor schedules every call: admission (`Slots`,
each tool's `Pool` of slots), barriers, deadlines and backoffs on the
`TimerService`, and cancellation. Where attempts run is the backends' job
(`toolbus.backends`); the thread backend's workers are actors too.
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
