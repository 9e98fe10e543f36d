"""The loop backend: async tools' attempts as tasks on one event loop thread.

No thread is held for an in-flight async call: the supervisor hands the job to
the loop (`call_soon_threadsafe`, the loop's own queue being the tool's
mailbox), the job's steps run as one task, awaiting the tool and any async
hooks, and the task's completion reports the outcome. A deadline or a
cancellation cancels the task for real.

The same loop thread also serves threads that wait for a coroutine (an async
hook of a sync tool): `LoopThread.submit`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .._sync import Latch
from ..pipeline import LOST, Outcome, drive_async
from ._protocol import ContextSpec, Host, Job
from ._thread import contain

if TYPE_CHECKING:
    from ..tools import Tool

log = logging.getLogger("toolbus.backends")

__all__ = ["AsyncTask", "LoopBackend", "LoopThread"]


class AsyncTask:
    """A coroutine running on the loop thread; `wait()` blocks a worker until it ends."""

    __slots__ = ("_coro", "_done", "_error", "_loop", "_on_done", "_result", "_task")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_done: Callable[[AsyncTask], None] | None = None,
    ) -> None:
        self._loop = loop
        self._on_done = on_done
        # Only a waiting thread needs the latch; a done callback replaces it.
        self._done: Latch | None = Latch() if on_done is None else None
        self._task: asyncio.Task[Any] | None = None
        self._coro: Coroutine[Any, Any, Any] | None = None
        self._result: Any = None
        self._error: BaseException | None = None

    def _start(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> None:
        self._coro = coro
        try:
            self._task = self._loop.create_task(_contained(coro), context=context)
        except BaseException as e:  # e.g. the loop is closing
            coro.close()
            self._error = e
            self._set_done()
            return
        self._task.add_done_callback(self._finished)

    def _set_done(self) -> None:
        if self._done is not None:
            self._done.set()
        if self._on_done is not None:
            self._on_done(self)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._error = asyncio.CancelledError("the tool's task was cancelled")
            if self._coro is not None:
                # Cancelled before its first step, the wrapper never started the
                # tool's coroutine: close it, or Python warns it was never awaited.
                self._coro.close()
        else:
            self._error = task.exception()
            if self._error is None:
                result = task.result()
                if isinstance(result, _Raised):
                    self._error = result.error
                else:
                    self._result = result
        self._set_done()

    def cancel(self) -> None:
        """Cancel the task (thread-safe); `wait()` then raises CancelledError."""
        try:
            self._loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:
            pass  # loop closed: the task is gone already

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def wait(self) -> Any:
        """Block until the coroutine ends (tasks made without `on_done` only)."""
        assert self._done is not None
        self._done.wait()
        return self.outcome()

    def outcome(self) -> Any:
        """The coroutine's value once done; raises what it raised."""
        if self._error is not None:
            raise self._error
        return self._result


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


async def _contained(coro: Coroutine[Any, Any, Any]) -> Any:
    """Await a tool's coroutine; hand back SystemExit & co. instead of letting
    asyncio re-raise them out of `run_forever`, which would end the loop."""
    try:
        return await coro
    except asyncio.CancelledError:
        raise
    except BaseException as e:
        return _Raised(e)


def _shut_down(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left (tools of calls abandoned at close), wait a little, close."""
    # Starts queued before the stop create tasks as soon as the loop turns
    # again: repeat until none is left (bounded: a tool that swallows its
    # cancellation must not keep this thread from closing the loop).
    for _ in range(5):
        tasks = asyncio.all_tasks(loop)
        if not tasks:
            break
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


class LoopThread:
    """One asyncio loop on a daemon thread, started on first use."""

    def __init__(self, name: str = "toolbus-async") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    try:
                        loop.run_forever()
                    finally:
                        _shut_down(loop)

                self._thread = threading.Thread(target=run, name=self._name, daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def submit(
        self,
        coro: Coroutine[Any, Any, Any],
        *,
        context: contextvars.Context | None = None,
        on_done: Callable[[AsyncTask], None] | None = None,
    ) -> AsyncTask:
        """Start `coro` on the loop, in `context` (default: a copy of the caller's).

        `on_done(task)` runs on the loop thread when it ends (or here, at once,
        if the loop is closed)."""
        loop = self._ensure()
        task = AsyncTask(loop, on_done)
        if context is None:
            context = contextvars.copy_context()
        try:
            loop.call_soon_threadsafe(task._start, coro, context)
        except RuntimeError as e:
            coro.close()
            task._error = e
            task._set_done()
        return task

    @property
    def current(self) -> asyncio.AbstractEventLoop:
        """The running loop (started on first use)."""
        return self._ensure()

    def call_soon(self, callback: Callable[[], Any]) -> None:
        """Run `callback` on the loop thread soon (from any thread)."""
        loop = self._ensure()
        if self.owns_current_thread():
            loop.call_soon(callback)
        else:
            loop.call_soon_threadsafe(callback)

    def owns_current_thread(self) -> bool:
        """True when called on this loop's own thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:
                pass


class _TaskHandle:
    """A job's task as the run sees it: cancellable from any thread.

    The cancel is always queued on the loop (never direct), so it runs after
    the task's first step: a task is never cancelled before it has started."""

    __slots__ = ("_loop", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self._loop = loop
        self._task = task

    def cancel(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._task.cancel)
        except RuntimeError:
            pass  # the loop is closed: the task is gone already


class LoopBackend:
    """Runs attempts as tasks on an event loop; an in-flight call holds no thread.

    `LoopBackend()` uses the executor's loop thread; pass a `LoopThread` to
    give a set of tools a loop of their own.
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
        # The mailbox: jobs handed over since the loop last drained it. Only
        # the hand-over that finds it empty wakes the loop (one wake-up per
        # burst, however many jobs a batch dispatches at once).
        self._inbox: deque[Job] = deque()
        self._inbox_lock = threading.Lock()
        # Outcomes of this loop turn, reported to the supervisor in one message.
        self._outbox: list[tuple[Job, Outcome, Any]] = []

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
        loop = self._loop
        assert loop is not None, "LoopBackend.start was not called"
        self._busy += 1
        with self._inbox_lock:
            wake = not self._inbox
            self._inbox.append(job)
        if wake:
            loop.call_soon(self._drain)

    def _drain(self) -> None:
        """On the loop: start a task for every job in the mailbox."""
        host, loop = self._host, self._loop
        assert host is not None
        assert loop is not None
        services = host.services
        current = loop.current
        with self._inbox_lock:
            jobs = list(self._inbox)
            self._inbox.clear()
        for job in jobs:
            task = current.create_task(self._run(job, services), context=job.run.context.copy())
            job.run.task = _TaskHandle(current, task)

    async def _run(self, job: Job, services: Any) -> None:
        """One job as one task: its steps, then its report (no other wrapper)."""
        try:
            outcome = await drive_async(job.steps(services))
        except asyncio.CancelledError:
            outcome = LOST  # cancelled while no step held it: whoever cancelled settled it
        except BaseException as e:  # SystemExit & co. must not escape into run_forever
            outcome = contain(job, e, services)
        if not self._outbox and self._loop is not None:
            self._loop.current.call_soon(self._flush)
        self._outbox.append((job, outcome, None))

    def _flush(self) -> None:
        reports, self._outbox = self._outbox, []
        if reports and self._host is not None:
            self._host.report_many(reports)

    def release(self, job: Job, worker: Any) -> None:
        self._busy -= 1

    def cancel(self, job: Job) -> None:
        return None  # run.interrupt() has cancelled the task already

    def kill(self, job: Job) -> bool:
        return False

    def busy(self) -> int:
        return self._busy

    def abandoned(self, tool: Tool | None = None) -> int:
        return 0

    def stop(self) -> None:
        if self._own_loop is not None:
            self._own_loop.close()
