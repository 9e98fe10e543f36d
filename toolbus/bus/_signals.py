"""The lifecycle signals, one blinker signal per step, in toolbus's own namespace.

Signals of your own join them with `define_signal`; subscriptions to "all
signals" (`subscribe(fn)`, `Recorder()`, `ObserverActor.attach(ref)`) also
receive the signals defined after they were made.
"""

from __future__ import annotations

import re
import threading
import weakref
from typing import Protocol

from blinker import NamedSignal, Namespace

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
    "QUEUED",
    "REJECTED",
    "RETRY_ATTEMPT",
    "RETRY_EXHAUSTED",
    "RETRY_SUCCESS",
    "RUN_HALTED",
    "TIMEOUT",
    "define_signal",
    "defined_signals",
    "namespace",
    "signal",
]

# Each signal's doc is in _BUILTIN, and at run time in `signal(name).__doc__`.
QUEUED = "tool:queued"
EXECUTING = "tool:executing"
EXECUTED = "tool:executed"
ERROR = "tool:error"
TIMEOUT = "tool:timeout"
RETRY_ATTEMPT = "tool:retry-attempt"
RETRY_SUCCESS = "tool:retry-success"
RETRY_EXHAUSTED = "tool:retry-exhausted"
BATCH_START = "tool:batch-start"
BATCH_COMPLETE = "tool:batch-complete"
PARALLEL_START = "tool:parallel-start"
PARALLEL_COMPLETE = "tool:parallel-complete"
REJECTED = "tool:rejected"
CANCELLED = "tool:cancelled"
PROGRESS = "tool:progress"
FINISHED = "tool:finished"
LATE_RESULT = "tool:late-result"
KILLED = "tool:killed"
IN_DOUBT = "tool:in-doubt"
RUN_HALTED = "tool:run-halted"

_BUILTIN: dict[str, str] = {
    QUEUED: (
        "A call has to wait for capacity: a slot of max_parallel, a capacity group or a thread "
        "(once per wait; not for a batch's calls held back by its order, nor a policy's delay)."
    ),
    EXECUTING: "An attempt starts. Carries the masked arguments.",
    EXECUTED: "An attempt succeeded.",
    ERROR: "An attempt failed with an error.",
    TIMEOUT: "An attempt did not finish by its deadline.",
    RETRY_ATTEMPT: "A retry attempt starts (never before the first attempt).",
    RETRY_SUCCESS: "A call that needed retries ended ok (once per such call).",
    RETRY_EXHAUSTED: "A call that was retried ended failed (once per such call).",
    BATCH_START: "A batch starts.",
    BATCH_COMPLETE: "Every call of a batch ended.",
    PARALLEL_START: (
        "A group of consecutive read-only calls of a batch is released to run together."
    ),
    PARALLEL_COMPLETE: "Every call of a read-only group ended.",
    REJECTED: "A call was refused before it ran (unknown tool, not allowed, bad arguments).",
    CANCELLED: "A call was cancelled or aborted.",
    PROGRESS: "A running tool reported progress.",
    FINISHED: "A call ended; exactly once per call, whatever happened. Carries the result.",
    LATE_RESULT: (
        "An abandoned attempt finished after its call had moved on; its result was discarded."
    ),
    KILLED: (
        "A process running an attempt was killed (deadline, cancellation), with everything it "
        "started; the call gets its result as usual."
    ),
    IN_DOUBT: (
        "An executor opened on a journal found a mutating call that started under an owner "
        "that is gone and never recorded an outcome: it may or may not have had its effect."
    ),
    RUN_HALTED: (
        "An agent run (or a batch) was halted: by `Executor.halt`, a run limit or a guardrail. "
        "Its unfinished calls end HALTED, each with its own tool:finished."
    ),
}

ALL_SIGNALS: tuple[str, ...] = tuple(_BUILTIN)
"""toolbus's own signals (`defined_signals()` adds those defined with `define_signal`)."""

namespace = Namespace()

_NAME = re.compile(r"[a-z][a-z0-9_.-]*(?::[a-z0-9][a-z0-9_.-]*)+")


class Watcher(Protocol):
    def signal_defined(self, name: str) -> None: ...


RECEIVERS_VERSION = [0]
"""Bumped whenever a receiver connects to or disconnects from a toolbus signal
(blinker tells each signal's `receiver_connected` / `receiver_disconnected`):
announcers keep who receives each signal until it moves (`_delivery.py`)."""


_moved_lock = threading.Lock()


def _receivers_moved(signal: object, **kwargs: object) -> None:
    with _moved_lock:  # rare (a connect, a close): a lost increment could hide a change
        RECEIVERS_VERSION[0] += 1


_lock = threading.Lock()
_docs: dict[str, str] = {}  # every defined signal and its doc, in definition order
# Weak: a subscription that is dropped without close() must not be kept alive here.
_watchers: weakref.WeakSet[Watcher] = weakref.WeakSet()


def define_signal(name: str, doc: str) -> NamedSignal:
    """Define the signal `name`, documented by `doc`, and return it.

    `name` is `scope:event` in lower case (letters, digits, `_ . -`), like
    "tool:finished" or "myapp:deploy-started". Defining a name again with the
    same doc returns the same signal; a different doc, a bad name or an empty
    doc raises ValueError. Subscriptions to all signals receive it from now on.
    Announce its events with `Emitter.announce`.
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ValueError(
            f"bad signal name {name!r}: use 'scope:event' in lower case, e.g. 'myapp:deployed'"
        )
    if not isinstance(doc, str) or not doc.strip():
        raise ValueError(f"signal {name!r} needs a doc string saying when it is sent")
    with _lock:
        known = _docs.get(name)
        if known is not None:
            if known != doc:
                raise ValueError(f"signal {name!r} is already defined with another doc: {known!r}")
            return namespace.signal(name)
        _docs[name] = doc
        sig = namespace.signal(name, doc)
        sig.receiver_connected.connect(_receivers_moved, weak=False)
        sig.receiver_disconnected.connect(_receivers_moved, weak=False)
        watchers = list(_watchers)
    for watcher in watchers:
        watcher.signal_defined(name)
    return sig


def defined_signals() -> tuple[str, ...]:
    """Every signal's name: toolbus's own, then those defined with `define_signal`."""
    with _lock:
        return tuple(_docs)


def watch(watcher: Watcher) -> tuple[str, ...]:
    """Tell `watcher` about signals defined from now on; return those defined so far.

    One step under the lock, so each signal is reported exactly once: in the
    returned names or through `signal_defined`.
    """
    with _lock:
        _watchers.add(watcher)
        return tuple(_docs)


def unwatch(watcher: Watcher) -> None:
    with _lock:
        _watchers.discard(watcher)


def signal(name: str) -> NamedSignal:
    """The toolbus signal called `name` (e.g. "tool:finished"); KeyError if it is not defined."""
    if name not in _docs:
        raise KeyError(
            f"no toolbus signal named {name!r} (define it with bus.define_signal); "
            f"known: {', '.join(defined_signals())}"
        )
    return namespace.signal(name)


for _name, _doc in _BUILTIN.items():
    define_signal(_name, _doc)
