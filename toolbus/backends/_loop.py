"""The loop backend: async tools' attempts as tasks on an event loop.

No thread is held for an in-flight async call. Each job runs as one task that
drives its steps, awaiting the tool and any async hooks, and reports when it
ends; a deadline or a cancellation cancels the task for real.

Which loop: the loop of the caller awaiting the call (`aexecute`,
`aexecute_batch`), when it runs, so an async caller's calls cost no hop between
loops; otherwise the executor's own loop thread (`LoopThread`). Each loop has a
*lane*: a mailbox of jobs, drained on that loop (only the hand-over that finds
it empty wakes the loop: one wake-up per burst), and an outbox whose outcomes
are reported to the supervisor in one message per loop turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import weakref
from collections import deque
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from .._interrupts import interrupts_caller
from ..models import ErrorCode
from ..pipeline import (
    LOST,
    Invoke,
    LoopWaiter,
    Outcome,
    Services,
    Steps,
    WorkerKilled,
    attempt,
    drive_async,
    end_call,
)
from ._loop_thread import LoopThread
from ._protocol import BackendUnavailable, ContextSpec, Host, Job
from ._thread import contain

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Lane", "LoopBackend"]


class _TaskHandle(tuple[asyncio.AbstractEventLoop, "asyncio.Task[Any]"]):
    """A job's task as the run sees it, `(loop, task)`: cancellable from any
    thread. A tuple, made by tuple's own constructor: every async call makes
    one, without an `__init__` frame.

    The cancel is always queued on the loop (never direct), so it runs after
    the task's first step: a task is never cancelled before it has started."""

    __slots__ = ()

    def cancel(self) -> None:
        loop, task = self
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:
            pass  # the loop is closed: the task is gone already


# A job handed to a lane: its steps and what they await first, when they
# started elsewhere (`Lane.resume`), and the context they run in.
_Entry = tuple[Job, Steps | None, Awaitable[Any] | None, contextvars.Context | None]


class Lane:
    """One loop's mailbox and outbox."""

    __slots__ = ("_loop", "host", "inbox", "invoke", "lock", "outbox", "services")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, host: Host, invoke: Invoke | None = None
    ) -> None:
        # Weak: the backend's lanes are keyed weakly by loop, and a lane that
        # held its loop would keep every loop that ever called alive.
        self._loop = weakref.ref(loop)
        self.host = host
        self.services: Services = host.services
        self.inbox: deque[_Entry] = deque()
        self.lock = threading.Lock()
        self.outbox: list[tuple[Job, Outcome, Any]] = []
        self.invoke = invoke  # how its jobs run the tool (None: right here)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """Its loop (None once that is gone)."""
        return self._loop()

    def submit(self, job: Job) -> bool:
        """Hand `job` over; False if this loop is closed (the job was not taken)."""
        return self._hand((job, None, None, None))

    def resume(
        self, job: Job, steps: Steps, pending: Awaitable[Any], context: contextvars.Context
    ) -> None:
        """Any thread: run the rest of `job`'s steps, begun elsewhere in
        `context`, as a task here, awaiting `pending` (what they yielded) first.
        If this loop is closed, the job ends here (`abandon`)."""
        if not self._hand((job, steps, pending, context)):
            if asyncio.iscoroutine(pending):
                pending.close()
            self.abandon(job, steps, context)

    def abandon(self, job: Job, steps: Steps, context: contextvars.Context) -> None:
        """Any thread: this loop is closed, and `job`'s steps, begun elsewhere,
        will never be resumed. End the call (if it has no result yet), claim
        the attempt and close the steps without running any more of their
        hooks (`WorkerKilled` is dropped by whoever claimed the attempt), and
        report."""
        outcome = _abandoned(job, self.services)
        job.run.try_settle(job.attempt)
        try:
            context.run(steps.throw, WorkerKilled())
        except BaseException:
            pass  # WorkerKilled, or what became of it: the call has its result
        self.host.report(job, outcome)

    def _hand(self, entry: _Entry) -> bool:
        loop = self._loop()
        if loop is not None and asyncio._get_running_loop() is loop:
            # Handed over on its own loop (an async caller's call): its task
            # now, not a loop turn later through the mailbox.
            self._start(loop, entry)
            return True
        try:
            with self.lock:
                wake = not self.inbox
                self.inbox.append(entry)
            if not wake:
                return True
            if loop is None:
                raise RuntimeError("the loop is gone")
            loop.call_soon_threadsafe(self.drain)
        except RuntimeError:  # closed
            with self.lock:
                self.inbox.clear()  # nothing else can be in it: the loop never drained
            return False
        except BaseException:
            # A signal's (Ctrl-C), anywhere from the job's queueing to asking
            # the loop to drain: maybe before it asked. Asked again (a drain
            # that finds nothing does nothing), or the mailbox, never empty
            # again, would never be drained.
            if loop is not None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self.drain)
            raise
        return True

    def drain(self) -> None:
        """On the loop: start a task for every job in the mailbox."""
        with self.lock:
            jobs = list(self.inbox)
            self.inbox.clear()
        loop = asyncio.get_running_loop()  # ours: drain runs on it
        for entry in jobs:
            self._start(loop, entry)

    def _start(self, loop: asyncio.AbstractEventLoop, entry: _Entry) -> None:
        job, steps, pending, context = entry
        task = loop.create_task(
            self.run(job, steps, pending), context=context or job.run.context.copy()
        )
        job.run.task = _TaskHandle((loop, task))

    async def run(
        self, job: Job, steps: Steps | None = None, pending: Awaitable[Any] | None = None
    ) -> None:
        """One job as one task: its steps, then its report (no other wrapper)."""
        services = self.services
        run = job.run
        try:
            if steps is None:
                # `job.steps(...)`, without its frame for an attempt (every call's).
                steps = (
                    attempt(run, job.attempt, services, self.invoke)
                    if job.timed_out_in is None
                    else job.steps(services, self.invoke)
                )
            outcome = await drive_async(steps, run, pending)
        except asyncio.CancelledError as e:
            # Cancelled while no step held it: by whoever settled the call, or
            # (an executor closing, a caller's loop shutting down) by nobody.
            outcome = LOST if run.settled or run.completed else contain(job, e, services)
        except GeneratorExit:
            # The loop was closed with this task pending, and the coroutine is
            # being thrown away: end the call and report from here, now.
            self.host.report(job, _abandoned(job, services))
            raise
        except BaseException as e:  # SystemExit & co. must not escape into run_forever
            if interrupts_caller(e):
                # Ctrl-C, raised in user code run on the caller's loop (on the
                # main thread: a sync guardrail of an async tool, say). The call
                # ends now, and the interrupt goes on to whoever runs the loop,
                # as asyncio lets it (`run_until_complete` raises it).
                self.host.report(job, _interrupted(job, services, e))
                raise
            outcome = contain(job, e, services)
        if run.attempt == job.attempt:
            # Its task is done: the run lets go of it. (The task's context
            # holds the run, as `current_run`: kept, the pair would be a
            # cycle, left for the garbage collector to find.)
            run.task = None
        self.report(job, outcome)

    def report(self, job: Job, outcome: Outcome) -> None:
        """On the loop: report `job`'s outcome with the others of this loop turn."""
        if not self.outbox:
            asyncio.get_running_loop().call_soon(self.flush)
        self.outbox.append((job, outcome, None))

    def flush(self) -> None:
        reports, self.outbox = self.outbox, []
        if reports:
            self.host.report_many(reports)


def _abandoned(job: Job, services: Services) -> Outcome:
    return end_call(
        job.run, services, "cancelled", ErrorCode.CANCELLED, "the event loop running it was closed"
    )


def _interrupted(job: Job, services: Services, error: BaseException) -> Outcome:
    return end_call(
        job.run, services, "cancelled", ErrorCode.CANCELLED, f"interrupted ({type(error).__name__})"
    )


class LoopBackend:
    """Runs attempts as tasks on an event loop; an in-flight call holds no thread.

    `LoopBackend()` runs an async caller's calls on the caller's own loop and
    the others on the executor's loop thread; `LoopBackend(loop_thread)` runs
    every call of its tools on that `LoopThread`.
    """

    name = "loop"
    can_kill = False
    uses_threads = False
    carries_context: ContextSpec = "all"

    def __init__(self, loop: LoopThread | None = None) -> None:
        self._own_loop = loop
        self._loop: LoopThread | None = loop
        self._host: Host | None = None
        self._busy = 0
        self._home: Lane | None = None
        self._last: Lane | None = None  # the lane last used for a caller's loop
        self._lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Lane] = (
            weakref.WeakKeyDictionary()
        )

    def check(self, tool: Tool) -> None:
        if not tool.is_async:
            raise ValueError(
                f"tool {tool.name!r} is sync: the loop backend would block its event loop "
                "(use backend='thread' or 'auto')"
            )

    def start(self, host: Host) -> None:
        if self._host is not None and self._host is not host:
            raise RuntimeError("this LoopBackend already serves another executor")
        self._host = host
        if self._loop is None:
            self._loop = host.loop  # type: ignore[assignment]

    def submit(self, job: Job) -> None:
        self._busy += 1
        caller = None
        if self._own_loop is None:
            # `run.caller_loop()`, inlined: this runs for every async call.
            run = job.run
            waiter = run.waiter if run.batch is None else run.batch.waiter
            if isinstance(waiter, LoopWaiter):
                caller = waiter.loop
        if caller is not None:
            lane = self._last
            if (
                lane is not None
                and lane._loop() is caller
                and asyncio._get_running_loop() is caller
            ):
                # Submitted on the caller's loop itself, as the last one was (a
                # burst of `aexecute`, a batch): its task now, found without a
                # lookup. What `lane.submit` would do, without its two frames.
                lane._start(caller, (job, None, None, None))
                return
            if caller.is_running():
                lane = self._lanes.get(caller)
                if lane is None:
                    assert self._host is not None, "LoopBackend.start was not called"
                    lane = self._lanes[caller] = Lane(caller, self._host)
                self._last = lane
                if lane.submit(job):
                    return
        if not self._home_lane().submit(job):
            self._busy -= 1
            raise BackendUnavailable("the executor's event loop is closed")

    def _home_lane(self) -> Lane:
        if self._home is None:
            assert self._host is not None, "LoopBackend.start was not called"
            assert self._loop is not None
            self._home = Lane(self._loop.current, self._host)
        return self._home

    def release(self, job: Job, worker: Any) -> None:
        self._busy -= 1

    def cancel(self, job: Job) -> None:
        return None  # run.interrupt() has cancelled the task already

    def kill(self, job: Job) -> bool:
        return False

    def busy(self, tool: Tool | None = None) -> int:
        return self._busy if tool is None else 0  # no threads held: counted in all only

    def abandoned(self, tool: Tool | None = None) -> int:
        return 0

    def stop(self) -> None:
        if self._own_loop is not None:
            self._own_loop.close()
