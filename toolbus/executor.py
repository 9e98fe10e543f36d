"""The Executor: the public face of toolbus.

    with Executor(registry, max_parallel=4, timeout=10) as ex:
        result = ex.execute(ToolCall(name="get_weather", arguments='{"city": "Oslo"}'))
        batch = ex.execute_batch(calls)

Hooks come in both styles of the designs toolbus grew from: pass callables
(`pre_call=[...]`, `post_call=[...]`, `authorize=`, `masker=`, `concurrency=`), or
subclass and override `pre_execute`, `is_allowed`, `mask_arguments`,
`should_retry`, `max_parallel`, `post_execute`; the defaults apply the options.
Hooks run on worker threads, in the caller's captured `contextvars`.
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import itertools
import logging
import threading
import time
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pykka
from pydantic import BaseModel, ConfigDict

from .actors import (
    BatchRun,
    LoopThread,
    LoopWaiter,
    Run,
    Supervisor,
    ThreadWaiter,
    TimerService,
    Waiter,
)
from .actors._messages import Cancel, Close, StatusQuery, Submit
from .bus import Announcer, BusPublisher, Emitter, Publisher
from .masking import mask_arguments
from .models import BatchResult, BatchSummary, ErrorCode, ToolCall, ToolResult
from .pipeline import Services, finish, make_result
from .retry import AttemptFailure, RetryDecision, RetryPolicy
from .tools import ToolRegistry

__all__ = ["Executor", "ExecutorStats"]

log = logging.getLogger("toolbus")

PreCallHook = Callable[[ToolCall], ToolCall]
PostCallHook = Callable[[ToolCall, ToolResult], ToolResult]
CallLike = ToolCall | Mapping[str, Any]

_batch_ids = itertools.count(1)


class ExecutorStats(BaseModel):
    """A snapshot of an executor's counters (no arguments, no outputs)."""

    model_config = ConfigDict(frozen=True)

    submitted: int
    batches: int
    ok: int
    error: int
    timeout: int
    cancelled: int
    rejected: int
    retries: int
    timeouts: int
    late_results: int
    in_flight: int
    peak_in_flight: int
    queued: int
    abandoned_workers: int
    abandoned_total: int
    live_workers: int
    workers_started: int
    timers: int
    pools: dict[str, dict[str, int]]
    events_dropped: int = 0
    """Events never delivered to a subscription (close's budget ran out; each one logged)."""


class Executor:
    """Runs tool calls from a registry with timeouts, retries, limits, hooks and events.

    Every call submitted gets exactly one terminal result; nothing a tool, hook
    or subscriber does raises out of `execute*`. Close it (or use `with`) to
    stop its actors; its threads are daemons and never keep a process alive.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        max_parallel: int = 8,
        timeout: float | None = 30.0,
        retry: RetryPolicy | None = None,
        pre_call: Sequence[PreCallHook] = (),
        post_call: Sequence[PostCallHook] = (),
        authorize: Callable[[ToolCall], bool] | None = None,
        masker: Callable[[ToolCall], Any] | None = None,
        concurrency: Callable[[Sequence[ToolCall]], int] | None = None,
        publisher: Publisher | None = None,
        max_argument_bytes: int = 1_000_000,
        max_abandoned_workers: int = 1000,
        hook_grace: float = 5.0,
    ) -> None:
        if max_parallel < 1:
            raise ValueError("max_parallel must be >= 1")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be > 0 (or None for no timeout)")
        if hook_grace <= 0 or max_argument_bytes <= 0 or max_abandoned_workers < 0:
            raise ValueError(
                "hook_grace and max_argument_bytes must be > 0, max_abandoned_workers >= 0"
            )
        self.registry = registry
        self.parallel_limit = max_parallel
        self.timeout = timeout
        self.retry_policy = retry or RetryPolicy()
        self._pre_call = tuple(pre_call)
        self._post_call = tuple(post_call)
        self._authorize = authorize
        self._masker = masker
        self._concurrency = concurrency
        self.publisher: Publisher = publisher if publisher is not None else BusPublisher(self)
        self._closed = False
        self._close_lock = threading.Lock()
        self._announcer = Announcer(self.publisher)
        # Public so that your own code can announce events of signals it defined.
        self.emitter = self._emitter = Emitter(self.publisher, self._announcer)
        self._timers = TimerService()
        self._loop = LoopThread()
        self._services = Services(
            emitter=self._emitter,
            hooks=self,
            loop=self._loop,
            max_argument_bytes=max_argument_bytes,
        )
        self._supervisor = Supervisor.start(
            self._services,
            self._timers,
            max_parallel=max_parallel,
            max_abandoned=max_abandoned_workers,
            hook_grace=hook_grace,
        )

    # -- hooks: override in a subclass, or pass the options ----------------------

    def pre_execute(self, call: ToolCall) -> ToolCall:
        """Before a call runs: may return a changed call; raising rejects it."""
        for hook in self._pre_call:
            call = hook(call)
        return call

    def is_allowed(self, call: ToolCall) -> bool:
        """Whether the call may run (after pre-call hooks)."""
        return self._authorize(call) if self._authorize is not None else True

    def mask_arguments(self, call: ToolCall) -> Any:
        """The arguments as they may be published (events, logs); secrets hidden.

        Whatever this hides is also scrubbed from error texts and outputs.
        """
        if self._masker is not None:
            return self._masker(call)
        return mask_arguments(call.arguments)[0]

    def should_retry(self, call: ToolCall, failure: AttemptFailure) -> RetryDecision:
        """After a failed attempt: retry, and after how long?"""
        return failure.policy.decide(
            failure.state,
            read_only=failure.read_only,
            timed_out=failure.timed_out,
            retryable=failure.retryable,
        )

    def max_parallel(self, calls: Sequence[ToolCall]) -> int:
        """How many calls of this batch may run at once (never above `parallel_limit`)."""
        if self._concurrency is not None:
            return self._concurrency(calls)
        return self.parallel_limit

    def post_execute(self, call: ToolCall, result: ToolResult) -> ToolResult:
        """After a call ran (ok, error or timeout): may return a changed result."""
        for hook in self._post_call:
            result = hook(call, result)
        return result

    # -- sync API ---------------------------------------------------------------

    def execute(self, call: CallLike) -> ToolResult:
        """Run one call and return its result; blocks until it is final."""
        waiter = ThreadWaiter()
        run = self._submit_one(call, waiter)
        if run.result is None:
            try:
                waiter.wait()
            except BaseException:
                self._cancel(Cancel(None, run, ErrorCode.CANCELLED, "the caller was interrupted"))
                raise
        assert run.result is not None
        return run.result

    def execute_batch(
        self, calls: Iterable[CallLike], *, stop_on_error: bool = False
    ) -> BatchResult:
        """Run calls as one batch; results come back in the order given.

        Read-only calls run in parallel; a mutating call waits for every earlier
        call and holds back every later one. With `stop_on_error`, the first
        call that does not end `ok` ends the calls not yet started (`ABORTED`).
        """
        waiter = ThreadWaiter()
        batch = self._submit_batch(calls, stop_on_error, waiter)
        if batch is None:
            return _empty_batch()
        try:
            waiter.wait()
        except BaseException:
            self._cancel(Cancel(batch, None, ErrorCode.CANCELLED, "the caller was interrupted"))
            raise
        return _batch_result(batch)

    # -- async API ----------------------------------------------------------------

    async def aexecute(self, call: CallLike) -> ToolResult:
        """Async twin of `execute`; never blocks the event loop.

        Cancelling the awaiting task cancels the call (it ends `cancelled`).
        """
        waiter = LoopWaiter(asyncio.get_running_loop())
        run = self._submit_one(call, waiter)
        try:
            result: ToolResult = await waiter.future
        except asyncio.CancelledError:
            self._cancel(Cancel(None, run, ErrorCode.CANCELLED, "the awaiting task was cancelled"))
            raise
        return result

    async def aexecute_batch(
        self, calls: Iterable[CallLike], *, stop_on_error: bool = False
    ) -> BatchResult:
        """Async twin of `execute_batch`; never blocks the event loop.

        Cancelling the awaiting task cancels every call not yet finished,
        including calls waiting out a retry backoff.
        """
        waiter = LoopWaiter(asyncio.get_running_loop())
        batch = self._submit_batch(calls, stop_on_error, waiter)
        if batch is None:
            return _empty_batch()
        try:
            await waiter.future
        except asyncio.CancelledError:
            self._cancel(
                Cancel(batch, None, ErrorCode.CANCELLED, "the awaiting task was cancelled")
            )
            raise
        return _batch_result(batch)

    # -- observation and lifetime ---------------------------------------------------

    def stats(self, timeout: float = 5.0) -> ExecutorStats:
        """A snapshot of the supervisor's counters (answered even while tools hang).

        For speed, a single call's caller is woken before its worker reports to
        the supervisor, so right after `execute()` returns the call may still
        count as in flight for a moment; batches are counted before they return.
        """
        data: dict[str, Any] | None
        try:
            data = typing.cast(dict[str, Any], self._supervisor.ask(StatusQuery(), timeout=timeout))
        except (pykka.ActorDeadError, pykka.Timeout):
            data = None
        if not data:
            data = {name: 0 for name in ExecutorStats.model_fields if name != "pools"}
            data["pools"] = {}
        return ExecutorStats(**{**data, "events_dropped": self._announcer.dropped})

    def drain_events(self, timeout: float | None = 10.0) -> bool:
        """Wait until every event announced before this call was delivered to every
        subscription (or dropped and counted); False if `timeout` passed first.

        Results never wait for observers; call this when you need both. From a
        receiver (a delivery thread) it returns False at once: waiting there
        would stall the bus.
        """
        return self._emitter.flush(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 5.0) -> None:
        """Cancel what is unfinished, stop the actors, deliver pending events; all
        within `timeout` seconds in total.

        Events not delivered by then are counted (`stats().events_dropped`) and
        logged per receiver. Stuck tool threads are daemons and are left behind;
        they never keep the process alive.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        try:
            self._supervisor.ask(Close("the executor was closed"), timeout=left())
            self._supervisor.stop(timeout=left())
        except (pykka.ActorDeadError, pykka.Timeout):
            pass
        self._announcer.close(left(), why=f"close(timeout={timeout:g}) ran out of time")
        self._timers.close()
        self._loop.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Executor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # -- submission -------------------------------------------------------------------

    def _make_run(
        self,
        call: CallLike,
        *,
        context: contextvars.Context,
        index: int = 0,
        batch: BatchRun | None = None,
        waiter: Waiter | None = None,
    ) -> Run:
        c = _coerce(call)
        tool = self.registry.get(c.name)
        if tool is None:
            timeout, policy = self.timeout, self.retry_policy
            hint = _unknown_tool_message(c.name, self.registry.names())
        else:
            timeout = tool.timeout if tool.timeout is not None else self.timeout
            policy = tool.retry or self.retry_policy
        run = Run(
            c,
            tool,
            index=index,
            batch=batch,
            context=context,
            timeout=timeout,
            policy=policy,
            waiter=waiter,
        )
        if tool is None:
            run.last_error = hint
        return run

    def _submit_one(self, call: CallLike, waiter: Waiter) -> Run:
        run = self._make_run(call, context=contextvars.copy_context(), waiter=waiter)
        self._tell(Submit((run,), None), (run,))
        return run

    def _submit_batch(
        self, calls: Iterable[CallLike], stop_on_error: bool, waiter: Waiter
    ) -> BatchRun | None:
        coerced = [_coerce(c) for c in calls]
        if not coerced:
            return None
        try:
            limit = int(self.max_parallel(coerced))
        except Exception:
            log.exception("max_parallel hook failed; using %d", self.parallel_limit)
            limit = self.parallel_limit
        batch = BatchRun(
            f"batch_{next(_batch_ids)}",
            limit=max(1, min(limit, self.parallel_limit)),
            stop_on_error=stop_on_error,
            waiter=waiter,
        )
        context = contextvars.copy_context()
        runs = tuple(
            self._make_run(c, context=context, index=i, batch=batch) for i, c in enumerate(coerced)
        )
        batch.runs = list(runs)
        self._tell(Submit(runs, batch), runs)
        return batch

    def _tell(self, message: Submit, runs: Sequence[Run]) -> None:
        try:
            # Under the lock close() takes to set `_closed`: every Submit told
            # here is in the mailbox ahead of Close, so none can be dropped.
            with self._close_lock:
                if self._closed:
                    raise pykka.ActorDeadError("closed")
                self._supervisor.tell(message)
        except pykka.ActorDeadError:
            # Closed executor: still exactly one result, and one tool:finished, per call.
            for run in runs:
                result = make_result(
                    run, "cancelled", error="the executor is closed", code=ErrorCode.CANCELLED
                )
                finish(run, result, self._services)
            if message.batch is not None and message.batch.waiter is not None:
                message.batch.waiter.release(message.batch)

    def _cancel(self, message: Cancel) -> None:
        try:
            self._supervisor.tell(message)
        except pykka.ActorDeadError:
            pass


def _unknown_tool_message(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        return f"Unknown tool '{name}'. Did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    return f"Unknown tool '{name}'"


def _coerce(call: CallLike) -> ToolCall:
    """A ToolCall from a ToolCall or a plain mapping; never raises."""
    if isinstance(call, ToolCall):
        return call
    try:
        if isinstance(call, Mapping):
            data = dict(call)
            if "function" in data and isinstance(data["function"], Mapping):  # OpenAI shape
                fn = data["function"]
                data = {
                    "id": data.get("id"),
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments"),
                }
            data = {
                k: v for k, v in data.items() if k in ("id", "name", "arguments") and v is not None
            }
            return ToolCall(**data)
    except Exception as e:
        log.debug("could not read a tool call: %s", e)
    name = str(call.get("name", "")) if isinstance(call, Mapping) else ""
    return ToolCall(name=name or "<unreadable call>", arguments="")


def _batch_result(batch: BatchRun) -> BatchResult:
    results = tuple(r.result for r in batch.runs if r.result is not None)
    ok = sum(1 for r in results if r.status == "ok")
    return BatchResult(
        results=results,
        summary=BatchSummary(
            total=len(batch.runs),
            executed=sum(1 for r in results if r.attempts > 0),
            succeeded=ok,
            failed=len(results) - ok,
            read_only=sum(1 for r in batch.runs if r.tool is not None and r.read_only),
            mutating=sum(1 for r in batch.runs if r.tool is not None and not r.read_only),
            duration=time.monotonic() - batch.started,
        ),
    )


def _empty_batch() -> BatchResult:
    return BatchResult(
        results=(),
        summary=BatchSummary(
            total=0, executed=0, succeeded=0, failed=0, read_only=0, mutating=0, duration=0.0
        ),
    )
