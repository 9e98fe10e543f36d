"""The two drivers of a step generator: one on a worker thread, one on an event loop.

A step (`_steps.py`) yields each awaitable that user code hands back. The
thread driver runs it on the executor's loop thread and blocks its own thread
until it ends (the thread is held by the call anyway); the loop driver simply
awaits it, so an async tool holds no thread at all. Either way the awaited work
is registered as the run's `task`, so a deadline or a cancellation cancels it.
A step that waits on another thread's work yields `InPlace`: the thread
driver then waits for it where it is, without the hop to the loop and back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Protocol

from ._run import Run
from ._services import LOST, Outcome, Steps
from ._waiters import Cancellable

__all__ = ["AsyncRunner", "InPlace", "Waitable", "drive_async", "drive_sync"]


class Waitable(Cancellable, Protocol):
    def wait(self) -> Any: ...


class AsyncRunner(Protocol):
    """Runs a coroutine on an event loop for a thread that waits for it."""

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Waitable: ...


class InPlace:
    """A `concurrent.futures.Future` for a step to wait on (`Run.gate`): awaited
    on a loop, waited for in place on a worker thread. Cancelling it (a
    deadline, a cancellation) cancels the future, and the wait raises
    `asyncio.CancelledError` as an awaited task's would."""

    __slots__ = ("future",)

    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self.future = future

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self.future).__await__()

    def wait(self) -> Any:
        try:
            return self.future.result()
        except concurrent.futures.CancelledError:
            raise asyncio.CancelledError from None

    def cancel(self) -> None:
        self.future.cancel()


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


def _as_coroutine(aw: Awaitable[Any]) -> Coroutine[Any, Any, Any]:
    return aw if asyncio.iscoroutine(aw) else _awaited(aw)


def drive_sync(steps: Steps, run: Run, runner: AsyncRunner) -> Outcome:
    """Run `steps` to the end on this thread; return its Outcome."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            aw = steps.throw(error) if error is not None else steps.send(send)
        except StopIteration as stop:
            outcome: Outcome = stop.value
            return outcome
        except asyncio.CancelledError:
            if run.settled or run.completed:
                return LOST  # cancelled by whoever settled the call
            raise  # not a cancellation of ours: the backend contains it
        send, error = None, None
        try:
            task = aw if isinstance(aw, InPlace) else runner.submit(_as_coroutine(aw))
            run.task = task
            if run.cancel_event is not None and run.cancel_event.is_set():
                task.cancel()  # interrupted before the task existed
            send = task.wait()
        except BaseException as e:
            error = e
        finally:
            run.task = None


async def drive_async(steps: Steps, run: Run, pending: Awaitable[Any] | None = None) -> Outcome:
    """Run `steps` to the end on the running loop; return its Outcome.

    `pending`: what steps started elsewhere yielded last, to await first."""
    send: Any = None
    error: BaseException | None = None
    if pending is not None:
        try:
            send = await pending
        except BaseException as e:  # as below: the step decides what it means
            error = e
    while True:
        try:
            aw = steps.throw(error) if error is not None else steps.send(send)
        except StopIteration as stop:
            outcome: Outcome = stop.value
            return outcome
        except asyncio.CancelledError:
            if run.settled or run.completed:
                return LOST  # cancelled by whoever settled the call
            raise  # not a cancellation of ours: the backend contains it
        send, error = None, None
        try:
            send = await aw
        except BaseException as e:  # CancelledError too: the step decides what it means
            error = e
