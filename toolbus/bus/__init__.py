"""The bus layer: one blinker signal per lifecycle step, robust delivery, subscriptions.

from toolbus import bus

@bus.signal("tool:finished").connect
def on_finished(sender, event):
    print(event.call_id, event.result.status)

Every subscription gets an executor's events from its own queue, in
announcement order (`event.seq`), on a small pool of delivery threads: a slow
receiver delays only itself. `define_signal` adds signals of your own.
"""

from ._delivery import Announcer
from ._events import (
    BatchComplete,
    BatchStart,
    CallCancelled,
    CallEvent,
    CallFinished,
    CallRejected,
    Event,
    Executed,
    Executing,
    Failed,
    InDoubt,
    LateResult,
    ParallelComplete,
    ParallelStart,
    Progress,
    RetryAttempt,
    RetryExhausted,
    RetrySuccess,
    TimedOut,
    WorkerKilled,
)
from ._publisher import BusPublisher, Emitter, NullPublisher, Publisher
from ._signals import (
    ALL_SIGNALS,
    BATCH_COMPLETE,
    BATCH_START,
    CANCELLED,
    ERROR,
    EXECUTED,
    EXECUTING,
    FINISHED,
    IN_DOUBT,
    KILLED,
    LATE_RESULT,
    PARALLEL_COMPLETE,
    PARALLEL_START,
    PROGRESS,
    REJECTED,
    RETRY_ATTEMPT,
    RETRY_EXHAUSTED,
    RETRY_SUCCESS,
    TIMEOUT,
    define_signal,
    defined_signals,
    namespace,
    signal,
)
from ._subscribe import ObserverActor, Recorder, Subscription, subscribe

__all__ = [
    "ALL_SIGNALS",
    "BATCH_COMPLETE",
    "BATCH_START",
    "CANCELLED",
    "ERROR",
    "EXECUTED",
    "EXECUTING",
    "FINISHED",
    "IN_DOUBT",
    "KILLED",
    "LATE_RESULT",
    "PARALLEL_COMPLETE",
    "PARALLEL_START",
    "PROGRESS",
    "REJECTED",
    "RETRY_ATTEMPT",
    "RETRY_EXHAUSTED",
    "RETRY_SUCCESS",
    "TIMEOUT",
    "Announcer",
    "BatchComplete",
    "BatchStart",
    "BusPublisher",
    "CallCancelled",
    "CallEvent",
    "CallFinished",
    "CallRejected",
    "Emitter",
    "Event",
    "Executed",
    "Executing",
    "Failed",
    "InDoubt",
    "LateResult",
    "NullPublisher",
    "ObserverActor",
    "ParallelComplete",
    "ParallelStart",
    "Progress",
    "Publisher",
    "Recorder",
    "RetryAttempt",
    "RetryExhausted",
    "RetrySuccess",
    "Subscription",
    "TimedOut",
    "WorkerKilled",
    "define_signal",
    "defined_signals",
    "namespace",
    "signal",
    "subscribe",
]
