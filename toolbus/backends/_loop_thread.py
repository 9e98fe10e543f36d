"""An executor's own event loop, on a daemon thread of its own.

Async tools of sync callers run here (`LoopBackend`), and so does every
coroutine a worker thread waits for (an async hook of a sync tool):
`LoopThread.submit` hands it over and `AsyncTask.wait` blocks the worker
until it ends; `AsyncTask.cancel` cancels it for real, from any thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any

from .._sync import Latch

__all__ = ["AsyncTask", "LoopThread"]


class AsyncTask:
    """A coroutine running on the loop thread; `wait()` blocks a worker until it ends."""

    __slots__ = ("_coro", "_done", "_error", "_loop", "_result", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._done = Latch()
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
            self._done.set()
            return
        self._task.add_done_callback(self._finished)

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
        self._done.set()

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
        """Block until the coroutine ends; return its value or raise what it raised."""
        self._done.wait()
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
        # Its thread's ident once started (0 before): a caller asks "am I
        # on it?" on every blocking call, so this is a field, not a method.
        self.thread_ident = 0
        self._closed = False

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                # Never a fresh loop after close: its thread would never be stopped.
                raise RuntimeError("the executor's event loop is closed")
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
                self.thread_ident = self._thread.ident or 0
                self._loop = loop
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, Any]) -> AsyncTask:
        """Start `coro` on the loop in a copy of the caller's context."""
        try:
            loop = self._ensure()
        except RuntimeError:
            coro.close()
            raise
        task = AsyncTask(loop)
        context = contextvars.copy_context()
        try:
            loop.call_soon_threadsafe(task._start, coro, context)
        except RuntimeError as e:
            coro.close()
            task._error = e
            task._done.set()
        return task

    @property
    def current(self) -> asyncio.AbstractEventLoop:
        """The running loop (started on first use)."""
        return self._ensure()

    def owns_current_thread(self) -> bool:
        """True when called on this loop's own thread."""
        return self.thread_ident == threading.get_ident()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:
                pass
