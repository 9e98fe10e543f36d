"""Handles for calls submitted without waiting: `Executor.submit` and `submit_batch`.

A handle is a `concurrent.futures.Future` of the call's `ToolResult` (or the
batch's `BatchResult`), so `wait`, `as_completed` and `add_done_callback` work
as they do for a pool's futures. What differs is cancellation: a toolbus call
is never dropped, it ends. `cancel()` asks the scheduler to stop the call in
whatever state it is (queued, waiting on a policy or for capacity, backing off
before a retry, or running) and the handle then resolves with the call's
`cancelled` result; `result()` never raises for what became of a call.

A handle resolves on the scheduler's side, under its lock, where no user code
may run: a done-callback added before then runs on the handles' callback
thread (one for the process, started when first needed). In a coroutine,
`await handle`: `asyncio.wrap_future` would read a `cancelled` result as the
future's own cancellation and raise `CancelledError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any

from ..actors._messages import CancelWhere
from ..models import BatchResult, ToolResult
from ..pipeline import BatchRun, Run, Waiter
from ._batch_result import batch_result, empty_batch

__all__ = [
    "BatchHandle",
    "CallHandle",
    "FutureWaiter",
    "batch_handle",
    "call_handle",
    "cancel_where",
]

log = logging.getLogger("toolbus")

# Stops a run (or a batch's unfinished runs): the executor's, posting `Cancel`.
Stop = Callable[[BatchRun | None, Run | None], None]


class FutureWaiter(Waiter):
    """Releases a handle: sets its result (no user code runs here: see `_Handle`)."""

    __slots__ = ("convert", "future")

    def __init__(
        self, future: concurrent.futures.Future[Any], convert: Callable[[Any], Any] | None = None
    ) -> None:
        self.future: concurrent.futures.Future[Any] | None = future
        self.convert = convert

    def release(self, value: Any) -> None:
        # Let go of the handle: it holds the call, which holds this waiter (a
        # cycle for the garbage collector to find, every call).
        future, self.future = self.future, None
        if future is None:
            return  # released once already: the first result stands
        if self.convert is not None:
            value = self.convert(value)
        future._resolving = True  # type: ignore[attr-defined]  # (a `_Handle`)
        try:
            future.set_result(value)
        except concurrent.futures.InvalidStateError:
            pass  # released once already: the first result stands
        finally:
            future._resolving = False  # type: ignore[attr-defined]


class _Handle(concurrent.futures.Future[Any]):
    """What both handles share: cancellation that ends the call, callbacks
    kept off the scheduler's lock, and a wait that refuses to block the loop
    the executor's async tools run on."""

    def __init__(self, stop: Stop, blocks: Callable[[], bool]) -> None:
        super().__init__()
        self._stop = stop
        self._blocks = blocks  # True where a wait would stall the executor's loop
        self._resolving = False  # set while the scheduler resolves it

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """As a `Future`'s; one added before the handle resolves runs on the
        handles' callback thread, never where it is resolved."""

        def call(future: Any) -> None:
            if future._resolving:
                _callbacks().put((fn, future))
            else:  # added once done: right here, as a Future does
                _run_callback(fn, future)

        super().add_done_callback(call)

    def result(self, timeout: float | None = None) -> Any:
        self._no_block()
        return super().result(timeout)

    def _no_block(self) -> None:
        if not self.done() and self._blocks():
            raise RuntimeError(
                "waiting for a handle here would block the event loop this executor's "
                "async tools run on: await the handle instead"
            )

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._no_block()
        return super().exception(timeout)

    def __await__(self) -> Generator[Any, None, Any]:
        """`await handle`: its result, without blocking the event loop."""
        loop = asyncio.get_running_loop()
        waiting: asyncio.Future[Any] = loop.create_future()

        # Given the handle, not holding it: a `Future` keeps its callbacks,
        # and one that held the handle would be a cycle for the garbage collector.
        def done(handle: Any) -> None:
            loop.call_soon_threadsafe(_settle, waiting, handle)

        concurrent.futures.Future.add_done_callback(self, done)
        return (yield from waiting.__await__())

    def running(self) -> bool:
        """Whether it is submitted and not finished (a call may be queued or
        running: toolbus does not tell the two apart here)."""
        return not self.done()

    def set_running_or_notify_cancel(self) -> bool:
        return True  # (for executors that run futures: a handle is never pending there)


class CallHandle(_Handle):
    """One submitted call: a `Future` of its `ToolResult`."""

    def __init__(self, stop: Stop, blocks: Callable[[], bool]) -> None:
        super().__init__(stop, blocks)
        self.run: Run | None = None  # set once it is made, before it is submitted

    @property
    def call_id(self) -> str | None:
        return self.run.call.id if self.run is not None else None

    def cancel(self) -> bool:
        """Stop the call in whatever state it is; True if it had not finished.

        The handle then resolves with the call's `cancelled` result (or, if
        the call finished meanwhile, with that result)."""
        run = self.run
        if self.done() or run is None or run.completed:
            return False
        self._stop(None, run)
        return True

    def cancelled(self) -> bool:
        """Whether the call ended `cancelled`."""
        return self.done() and _status(self) == "cancelled"

    def result(self, timeout: float | None = None) -> ToolResult:
        """The call's result, waiting up to `timeout` seconds (TimeoutError
        past it); never raises for what became of the call."""
        value: ToolResult = super().result(timeout)
        return value


class BatchHandle(_Handle):
    """One submitted batch: a `Future` of its `BatchResult`, with a handle per call."""

    def __init__(
        self, stop: Stop, blocks: Callable[[], bool], calls: tuple[CallHandle, ...]
    ) -> None:
        super().__init__(stop, blocks)
        self.calls = calls  # in the order given
        self.batch: BatchRun | None = None

    @property
    def batch_id(self) -> str | None:
        return self.batch.batch_id if self.batch is not None else None

    def cancel(self) -> bool:
        """Stop every call of the batch not finished yet; True if any was."""
        batch = self.batch
        if self.done() or batch is None:
            return False
        if all(c.done() for c in self.calls):
            return False
        self._stop(batch, None)
        return True

    def cancelled(self) -> bool:
        """Whether every call of the batch ended `cancelled` (a batch that ran
        some of its calls before it was cancelled is not)."""
        return self.done() and bool(self.calls) and all(c.cancelled() for c in self.calls)

    def result(self, timeout: float | None = None) -> BatchResult:
        """The batch's result, waiting up to `timeout` seconds."""
        value: BatchResult = super().result(timeout)
        return value

    def waiter(self) -> FutureWaiter:
        """The batch's waiter: resolves this handle with its `BatchResult`."""
        return FutureWaiter(self, _as_batch_result)


# `Submitting._submit_one` and `_submit_batch`, as the handles' makers call them.
SubmitOne = Callable[..., Run]
SubmitBatch = Callable[..., BatchRun | None]


def call_handle(
    submit: SubmitOne, stop: Stop, blocks: Callable[[], bool], call: Any, **options: Any
) -> CallHandle:
    """Submit `call` with `submit` and return its handle (`Executor.submit`;
    `options` go to `submit`)."""
    handle = CallHandle(stop, blocks)
    handle.run = submit(call, FutureWaiter(handle), **options)
    return handle


def batch_handle(
    submit: SubmitBatch,
    stop: Stop,
    blocks: Callable[[], bool],
    calls: Sequence[Any],
    stop_on_error: bool,
    **options: Any,
) -> BatchHandle:
    """Submit `calls` as one batch with `submit` and return its handle, with a
    handle per call (`Executor.submit_batch`; `options` go to `submit`)."""
    members = tuple(CallHandle(stop, blocks) for _ in calls)
    handle = BatchHandle(stop, blocks, members)

    def made(batch: BatchRun, runs: tuple[Run, ...]) -> None:
        handle.batch = batch
        for member, run in zip(members, runs, strict=True):
            member.run = run

    batch = submit(
        calls,
        stop_on_error,
        handle.waiter(),
        waiters=[FutureWaiter(m) for m in members],
        made=made,
        **options,
    )
    if batch is None:
        handle.set_result(empty_batch())
    return handle


def _as_batch_result(value: Any) -> BatchResult:
    assert isinstance(value, BatchRun)
    return batch_result(value)


def _status(handle: CallHandle) -> str:
    value = concurrent.futures.Future.result(handle, 0)
    return value.status if isinstance(value, ToolResult) else ""


def _settle(waiting: asyncio.Future[Any], handle: _Handle) -> None:
    if not waiting.done():
        waiting.set_result(concurrent.futures.Future.result(handle, 0))


_queue: queue.SimpleQueue[tuple[Callable[[Any], object], Any]] | None = None
_queue_lock = threading.Lock()


def _callbacks() -> queue.SimpleQueue[tuple[Callable[[Any], object], Any]]:
    """The handles' callback thread's queue (the thread started on first use)."""
    global _queue
    if _queue is None:
        with _queue_lock:
            if _queue is None:
                q: queue.SimpleQueue[tuple[Callable[[Any], object], Any]] = queue.SimpleQueue()
                threading.Thread(
                    target=_serve, args=(q,), name="toolbus-handle-callbacks", daemon=True
                ).start()
                _queue = q
    return _queue


def _serve(q: queue.SimpleQueue[tuple[Callable[[Any], object], Any]]) -> None:
    while True:
        fn, future = q.get()
        _run_callback(fn, future)


def _run_callback(fn: Callable[[Any], object], future: Any) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("exception calling callback for %r", future)


def cancel_where(call_id: str | None, batch_id: str | None) -> CancelWhere:
    """`Executor.cancel`'s arguments checked (`TypeError`), as its message."""
    if call_id is None and batch_id is None:
        raise TypeError("Executor.cancel() needs call_id=, batch_id= or both")
    for name, value in (("call_id", call_id), ("batch_id", batch_id)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"Executor.cancel(): {name} must be a string, got {value!r}")
    where = ", ".join(
        f"{n}={v!r}" for n, v in (("call_id", call_id), ("batch_id", batch_id)) if v is not None
    )
    return CancelWhere(call_id, batch_id, f"cancelled by Executor.cancel({where})")
