"""The actors layer: the supervisor, the tool workers and the machinery they share.

One supervisor actor per executor schedules every call; each tool is served by
its own pool of worker actors, started lazily and reused.
"""

from ._loop import LoopThread
from ._run import BatchRun, LoopWaiter, Run, ThreadWaiter, Waiter
from ._supervisor import Supervisor
from ._timers import TimerHandle, TimerService
from ._worker import ToolWorker, WorkerHandle

__all__ = [
    "BatchRun",
    "LoopThread",
    "LoopWaiter",
    "Run",
    "Supervisor",
    "ThreadWaiter",
    "TimerHandle",
    "TimerService",
    "ToolWorker",
    "Waiter",
    "WorkerHandle",
]
