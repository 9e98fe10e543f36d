"""One call's steps, from admission to its terminal result, and what they share.

`Run`/`BatchRun` hold a call's state (shared by the supervisor and whoever runs
the call); `_admission.py`, `_steps.py` (attempts, retries) and `_results.py`
hold every step that runs user code, written once as
generators; `_drive.py` drives them on a worker thread or an event loop. This
layer imports neither the actors nor the backends: they import it.
"""

from .._errors import ToolCrashed, WorkerKilled
from ..tools._running import NestedCalls
from ._batch_run import BatchRun
from ._clock import EARLY, SetUpTime, budget_spent, off_clock, ran_out, spent_result
from ._drive import AsyncRunner, InPlace, Waitable, drive_async, drive_sync
from ._halts import Halts, halt_reason, halted_text
from ._keys import canonical_arguments, derive_key
from ._make import caller_cancelled, log_contained, make_result
from ._reports import CallLogs, logged, progress_fraction, publish_progress
from ._results import end_call, end_decided, finish
from ._run import (
    ADMISSION,
    FINISHING,
    JOURNALING,
    OFF_CLOCK,
    POLICIES,
    QUEUED,
    RUNNING,
    STARTING,
    SUPERVISOR,
    Run,
)
from ._services import (
    DONE,
    LOST,
    Hooks,
    Invoke,
    Journal,
    Outcome,
    Services,
    Steps,
    Tally,
    current_run,
    tool_exception_filter,
)
from ._steps import (
    after_timeout,
    attempt,
    plain_after_timeout,
    timed_out_here,
)
from ._waiters import Cancellable, LoopWaiter, ThreadWaiter, Waiter

__all__ = [
    "ADMISSION",
    "DONE",
    "EARLY",
    "FINISHING",
    "JOURNALING",
    "LOST",
    "OFF_CLOCK",
    "POLICIES",
    "QUEUED",
    "RUNNING",
    "STARTING",
    "SUPERVISOR",
    "AsyncRunner",
    "BatchRun",
    "CallLogs",
    "Cancellable",
    "Halts",
    "Hooks",
    "InPlace",
    "Invoke",
    "Journal",
    "LoopWaiter",
    "NestedCalls",
    "Outcome",
    "Run",
    "Services",
    "SetUpTime",
    "Steps",
    "Tally",
    "ThreadWaiter",
    "ToolCrashed",
    "Waitable",
    "Waiter",
    "WorkerKilled",
    "after_timeout",
    "attempt",
    "budget_spent",
    "caller_cancelled",
    "canonical_arguments",
    "current_run",
    "derive_key",
    "drive_async",
    "drive_sync",
    "end_call",
    "end_decided",
    "finish",
    "halt_reason",
    "halted_text",
    "log_contained",
    "logged",
    "make_result",
    "off_clock",
    "plain_after_timeout",
    "progress_fraction",
    "publish_progress",
    "ran_out",
    "spent_result",
    "timed_out_here",
    "tool_exception_filter",
]
