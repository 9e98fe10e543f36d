"""The Executor: the public face of toolbus.

    with Executor(registry, max_parallel=4, timeout=10) as ex:
        result = ex.execute(ToolCall(name="get_weather", arguments='{"city": "Oslo"}'))
        batch = ex.execute_batch(calls)

Hooks come in both styles of the designs toolbus grew from: pass callables
(`pre_call=[...]`, `post_call=[...]`, `authorize=`, `masker=`, `concurrency=`), or
subclass and override `pre_execute`, `is_allowed`, `mask_arguments`,
`should_retry`, `max_parallel`, `post_execute`; the defaults apply the options.
Hooks may be sync or async (`async def`): they run where the call runs (a
worker thread for sync tools, the event loop for async ones), in the caller's
captured `contextvars`; an async hook is awaited on the executor's loop.

One piece: it is the facade, the public API with the docstrings users read
and the order things happen in; every job it orders is done in
`toolbus/_executor/`, a module each (its `__init__` lists them).
"""

from __future__ import annotations

import asyncio
import os
import threading
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Self

from ._executor import _journal as jrn  # opened, closed, its calls in doubt
from ._executor import _machinery
from ._executor._batch_result import batch_result, empty_batch
from ._executor._closing import Closing
from ._executor._deciding import Completions, Deciding
from ._executor._from_config import executor_from_config
from ._executor._handles import BatchHandle, CallHandle, batch_handle, call_handle
from ._executor._names import take_name
from ._executor._nested import NestedGateway, would_block_its_tools
from ._executor._offering import Offering, Prepare, check_prepare
from ._executor._options import (
    GroupsOption,
    check_hooks,
    check_options,
    check_wiring,
)
from ._executor._plan import MAX_LISTED_TOOLS, ToolPlans
from ._executor._stats import ExecutorStats, stats_from
from ._executor._stopping import Stopping
from ._executor._submission import Submission, SubmitHooks, Submitting
from ._executor._waiting import Waiting
from ._options import wait_seconds
from .actors._messages import StatusQuery
from .backends import Backend
from .bus import Announcer, BusPublisher, Emitter, Publisher, Subscription
from .calls import CallLike
from .hooks import ExecutorHooks, PostCallHook, PreCallHook
from .in_doubt import InDoubtHandler
from .journal import Journal, JournalRecord, Retention
from .models import BatchResult, ToolCall, ToolResult
from .pipeline import LoopWaiter, ThreadWaiter
from .policies import ApprovalDecision, Policy
from .retry import RetryPolicy
from .scanning import ContentScanner
from .tools import Tool, ToolRegistry

__all__ = ["MAX_LISTED_TOOLS", "Executor", "ExecutorStats", "Submission"]


class Executor(ExecutorHooks, Submitting, Stopping, Offering, Deciding, Closing):
    """Runs tool calls from a registry with timeouts, retries, limits, hooks and events.

    Every call submitted gets exactly one terminal result; nothing a tool, hook
    or subscriber does raises out of `execute*`. Close it (or use `with`) to
    stop its actors; its threads are daemons and never keep a process alive.

    Options are checked here, with `TypeError`/`ValueError` naming the option:
    `max_parallel`, `max_argument_bytes`, `max_abandoned_workers` and
    `max_abandoned_per_tool` are integers >= 1, `hook_grace` and
    `worker_idle_timeout` finite numbers > 0,
    `timeout` a number > 0 or None (`math.inf` is taken as None: no deadline).

    `call_timeout` (None: no bound) bounds each whole call, waits and
    retries included; the tightest of the executor's, the tool's and the
    call's applies (docs/reference.md#deadlines-two-clocks).
    `secret_keys` adds names to the default secret-looking keys for this
    executor's default masking (so it cannot be combined with `masker=`).
    `scanner`: a `toolbus.scanning.ContentScanner`, which then scans all it
    publishes and stores for secrets and personal data (docs/policies.md).

    Backpressure (docs/reference.md#backpressure): `max_queued` (None, or an
    integer >= 1) bounds the calls waiting for a slot of `max_parallel`, and
    `groups` maps a name to a limit (`{"db": 4}`) or to
    `{"limit": 4, "max_queued": 100}`. Beyond a bound the call that would
    start last (lowest priority, newest; never a nested call) ends
    `rejected`, `OVERLOADED`. `on_full="wait"` (default "reject") makes a
    blocking `execute`/`execute_batch` wait for room first, within the
    calls' whole-call budget (`call_timeout`; without one, at most `timeout`
    seconds).

    `journal`: a path (the file is made if missing; its directory must exist)
    or a `toolbus.Journal`. Every mutating call is then recorded before its
    tool runs, calls left in doubt by a dead process are announced as
    `tool:in-doubt` events now (and listed by `in_doubt()`), and a call whose
    idempotency key already ended ok is answered from the journal without
    running. `journal_retention` (with a path): a `toolbus.journal.Retention`
    or `{"days": ..., "rows": ...}`. `journal_timeout` (default 5 s) bounds
    every wait for its disk: opening it and recording this executor's session
    (`TimeoutError`), each mutating call's intent; `journal_required=True`
    refuses a call whose intent is not on disk by then, and `on_in_doubt`
    decides calls in doubt that come again (`toolbus.in_doubt`; docs/journal.md).
    `inject` supplies the values of injected parameters (`toolbus.Injected`):
    `{"api_key": fn, "tool_name.param": fn}`, the tool's own key first; `fn(call)`
    may be sync or async and runs with the caller's contextvars, before the
    pre-call hooks.
    `policies` guard every tool (before the tools' own); a tool a policy
    brings along (a spill's `read_artifact`) is registered into `registry`
    itself, which then has it for everyone holding it (docs/policies.md).
    `prepare(step, tools)` keeps the tools to offer at a step (`offered`).
    `name` tells this executor apart in metrics, traces and logs (the `executor`
    label of `toolbus.observe`); by default `executor-1`, `executor-2`, ... in
    the order made, skipping names of executors still alive (closed or not,
    until collected). A name given is taken as it is, even if in use.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        max_parallel: int = 8,
        timeout: float | None = 30.0,
        call_timeout: float | None = None,
        retry: RetryPolicy | None = None,
        pre_call: Sequence[PreCallHook] = (),
        post_call: Sequence[PostCallHook] = (),
        authorize: Callable[[ToolCall], bool | Awaitable[bool]] | None = None,
        masker: Callable[[ToolCall], Any] | None = None,
        concurrency: Callable[[Sequence[ToolCall]], int] | None = None,
        publisher: Publisher | None = None,
        max_argument_bytes: int = 1_000_000,
        max_abandoned_workers: int = 1000,
        max_abandoned_per_tool: int | None = None,
        hook_grace: float = 5.0,
        worker_idle_timeout: float = 60.0,
        backend: str | Backend | None = "auto",
        backends: Mapping[str, Backend] | None = None,
        secret_keys: Iterable[str] = (),
        groups: GroupsOption | None = None,
        max_queued: int | None = None,
        on_full: str = "reject",
        journal: str | os.PathLike[str] | Journal | None = None,
        journal_retention: Retention | Mapping[str, Any] | None = None,
        journal_timeout: float | None = None,
        journal_required: bool = False,
        on_in_doubt: InDoubtHandler | None = None,
        inject: Mapping[str, Callable[[ToolCall], Any]] | None = None,
        name: str | None = None,
        policies: Sequence[Policy] = (),
        scanner: ContentScanner | None = None,
        prepare: Prepare | None = None,
    ) -> None:
        opts = check_options(
            name=name,
            max_parallel=max_parallel,
            timeout=timeout,
            retry=retry,
            masker=masker,
            max_argument_bytes=max_argument_bytes,
            max_abandoned_workers=max_abandoned_workers,
            max_abandoned_per_tool=max_abandoned_per_tool,
            hook_grace=hook_grace,
            worker_idle_timeout=worker_idle_timeout,
            secret_keys=secret_keys,
            max_queued=max_queued,
            on_full=on_full,
            call_timeout=call_timeout,
            scanner=scanner,
        )
        self._secret_keys = opts.secret_keys
        self._prepare = check_prepare(prepare)
        self.registry = registry
        # Tools that ran as steps of a composite tool, registered or not (by
        # name, the first kept): observers name those calls by them.
        self._step_tools: dict[str, Tool] = {}
        self.name: str = take_name(self, name)  # (set under the names' lock too)
        self._submission = SubmitHooks()  # on_submit's hooks
        self._plans = ToolPlans()  # what every call of a tool shares, by tool name
        self.parallel_limit = opts.max_parallel
        self.timeout = opts.timeout
        self.call_timeout = opts.call_timeout
        self._waits_for_room = opts.on_full == "wait"
        self.retry_policy = retry or RetryPolicy()
        self._pre_call, self._post_call = check_hooks(
            pre_call, post_call, authorize, masker, concurrency, publisher
        )
        self._authorize, self._masker, self._concurrency = authorize, masker, concurrency
        self.publisher: Publisher = publisher if publisher is not None else BusPublisher(self)
        self._groups, self._group_queues, self._policies, self._inject, self._backends = (
            check_wiring(
                registry,
                groups=groups,
                policies=policies,
                inject=inject,
                backend=backend,
                backends=backends,
                worker_idle_timeout=opts.worker_idle_timeout,
            )
        )
        # Opened last among the checks, and before any thread of the executor
        # starts: a bad option, or a journal that cannot be used (a bad path, a
        # disk that does not answer, a malformed record), leaves nothing behind.
        self._journal, self._journal_owned, self._journal_session, in_doubt = jrn.open_journal(
            journal, journal_retention, journal_timeout, journal_required, on_in_doubt
        )
        self._closed = self._closing = False
        self._close_step = 0
        self._final_stats: ExecutorStats | None = None
        self._close_lock = threading.Lock()
        self._completions = Completions()
        self._announcer = Announcer(self.publisher)
        # Public so that your own code can announce events of signals it defined.
        self.emitter = self._emitter = Emitter(self.publisher, self._announcer)
        try:
            started = _machinery.start(
                self,
                NestedGateway(self),
                opts,
                emitter=self._emitter,
                journal=self._journal,
                session=self._journal_session,
                journal_required=journal_required,
                in_doubt=jrn.calls_in_doubt(self._journal, in_doubt, on_in_doubt),
                inject=self._inject,
                backends=self._backends,
                groups=self._groups,
                group_queues=self._group_queues,
                scanner=opts.scanner,
            )
        except BaseException:  # release the journal: nothing is left behind
            jrn.close_journal(self._journal, self._journal_owned, self._journal_session, 1.0)
            raise
        self._timers, self._loop, self._services, self._scheduler, self._supervisor = started
        self._waiting = Waiting(self._scheduler)
        if self._journal is not None:
            jrn.announce_in_doubt(self._journal, self._emitter, in_doubt)

    @classmethod
    def from_config(
        cls,
        registry: ToolRegistry,
        path: str | os.PathLike[str] | None = None,
        **overrides: Any,
    ) -> Self:
        """An executor with the options of a configuration file (docs/config.md).

        `path`: a `toolbus.toml`, a `pyproject.toml` (its `[tool.toolbus]`
        table) or a directory to look in; None looks for `./toolbus.toml`, then
        `./pyproject.toml` with that table, and with neither the executor is
        `Executor(registry, **overrides)`. The file's values win over the
        tools' own (their decorators'); `overrides`, any keyword options of
        `Executor`, win over the file's, and give what a file cannot express
        (hooks, a publisher, `inject`, policies).

        `registry` is not changed: with `[tools."<name>"]` tables the executor
        runs a snapshot of its own (`executor.registry`, the one to export and
        to register later tools on), each configured tool a copy with the
        file's values, a disabled one absent (`TOOL_NOT_FOUND`, also as a
        composite tool's step). A `journal` the file names is closed with the
        executor. A file that cannot be used is a `toolbus.ConfigError` naming
        the file, the key and the reason.
        """
        # The config layer sits above this one: reached through a seam
        # (toolbus/_seams.py, config_reader).
        return executor_from_config(cls, registry, path, overrides)

    # -- sync API ---------------------------------------------------------------

    def execute(
        self,
        call: CallLike,
        *,
        approval: ApprovalDecision | None = None,
        priority: int | None = None,
        timeout: float | None = None,
        call_timeout: float | None = None,
        agent_run: str | None = None,
    ) -> ToolResult:
        """Run one call and return its result; blocks until it is final.

        `approval`: the decision on this call's `ApprovalRequest`, for a tool
        that requires one (see `toolbus.policies.requires_approval`).
        `priority` (an integer, default 0; a nested call's default is its
        caller's): when capacity is short, higher priorities start first.
        `timeout`: its attempts' own, instead of the tool's (`math.inf`: none);
        `call_timeout`: a whole-call budget, applied if the tightest.
        `agent_run`: the agent run it belongs to (`toolbus.agent_runs`: run
        limits count by it, a halt ends it), instead of the context's.

        From an async tool or hook of this executor, use `aexecute`: blocking
        the loop its async tools run on would deadlock, so `execute` there
        returns a `rejected` result (`TOOL_UNAVAILABLE`) at once."""
        waiter = ThreadWaiter()
        refuse = would_block_its_tools(self._loop, self._scheduler, self._services)
        clocks = (timeout, call_timeout)
        wait = self._waits_for_room
        try:
            # (In `_submit_one`'s order: positionally, as it is cheaper.)
            run = self._submit_one(
                call, waiter, refuse, approval, priority, wait, clocks, None, None, agent_run
            )
            if refuse:
                assert run.result is not None  # decided at once, never waited for
                return run.result
            if not waiter.flag:  # released once counted, which may lag the result
                self._waiting.block(waiter, (run,))
        except BaseException:  # interrupted in the wait, or before it, once handed on
            self._waiting.given_up(waiter)
            raise
        assert run.result is not None
        return run.result

    def execute_batch(
        self,
        calls: Iterable[CallLike],
        *,
        stop_on_error: bool = False,
        approvals: Mapping[str, ApprovalDecision | None] | None = None,
        priority: int | None = None,
        timeout: float | None = None,
        call_timeout: float | None = None,
        agent_run: str | None = None,
    ) -> BatchResult:
        """Run calls as one batch; results come back in the order given.

        Read-only calls run in parallel; a mutating call waits for every earlier
        call and holds back every later one. With `stop_on_error`, the first
        call that does not end `ok` (or `deferred`) ends the calls not yet
        started (`ABORTED`). `approvals`: decisions by call id, for calls that
        ended `deferred` before. `priority` as for `execute`: it orders the
        batch's eligible calls among other calls waiting for capacity, never
        the batch's own barrier order.
        """
        waiter = ThreadWaiter()
        refuse = would_block_its_tools(self._loop, self._scheduler, self._services)
        try:
            batch = self._submit_batch(
                calls,
                stop_on_error,
                waiter,
                refuse=refuse,
                approvals=approvals,
                priority=priority,
                wait=self._waits_for_room,
                clocks=(timeout, call_timeout),
                agent_run=agent_run,
            )
            if batch is None:
                return empty_batch()
            if refuse:
                return batch_result(batch)
            self._waiting.block(waiter, batch.runs)
        except BaseException:  # (as `execute`'s)
            self._waiting.given_up(waiter)
            raise
        return batch_result(batch)

    # -- handles: submit now, wait (or cancel) later --------------------------------

    def submit(
        self,
        call: CallLike,
        *,
        approval: ApprovalDecision | None = None,
        priority: int | None = None,
        timeout: float | None = None,
        call_timeout: float | None = None,
        agent_run: str | None = None,
    ) -> CallHandle:
        """Submit one call and return at once with its handle, a
        `concurrent.futures.Future` of its `ToolResult`.

        `handle.cancel()` stops the call whatever state it is in (queued,
        waiting on a policy or for capacity, backing off, running: a thread
        tool is abandoned, a process or Ray one killed, an async one's task
        cancelled) and returns True if it had not finished; the handle then
        resolves with its `cancelled` result. `result()` never raises for
        what became of the call."""
        return call_handle(
            self._submit_one,
            self._stop,
            self._blocks_its_loop,
            call,
            approval=approval,
            priority=priority,
            clocks=(timeout, call_timeout),
            agent_run=agent_run,
        )

    def submit_batch(
        self,
        calls: Iterable[CallLike],
        *,
        stop_on_error: bool = False,
        approvals: Mapping[str, ApprovalDecision | None] | None = None,
        priority: int | None = None,
        timeout: float | None = None,
        call_timeout: float | None = None,
        agent_run: str | None = None,
    ) -> BatchHandle:
        """Submit a batch (as `execute_batch` runs one) and return at once with
        its handle: a `Future` of its `BatchResult`, with a handle per call in
        `handle.calls`. `handle.cancel()` stops the calls not finished yet."""
        return batch_handle(
            self._submit_batch,
            self._stop,
            self._blocks_its_loop,
            list(calls),
            stop_on_error,
            approvals=approvals,
            priority=priority,
            clocks=(timeout, call_timeout),
            agent_run=agent_run,
        )

    def _blocks_its_loop(self) -> bool:
        """Whether waiting here would block the loop this executor's async tools
        run on (a handle's `result()` from inside one of them)."""
        return would_block_its_tools(self._loop, self._scheduler, self._services)

    # -- async API ----------------------------------------------------------------

    async def aexecute(
        self,
        call: CallLike,
        *,
        approval: ApprovalDecision | None = None,
        priority: int | None = None,
        timeout: float | None = None,
        call_timeout: float | None = None,
        agent_run: str | None = None,
    ) -> ToolResult:
        """Async twin of `execute`; never blocks the event loop.

        Cancelling the awaiting task cancels the call (it ends `cancelled`).
        """
        waiter = LoopWaiter(asyncio.get_running_loop())
        clocks = (timeout, call_timeout)
        # (In `_submit_one`'s order: positionally, as it is cheaper.)
        run = self._submit_one(
            call, waiter, False, approval, priority, False, clocks, None, None, agent_run
        )
        result: ToolResult = await self._waiting.result(
            waiter, (run,), None, run, "the awaiting task was cancelled"
        )
        return result

    async def aexecute_batch(
        self,
        calls: Iterable[CallLike],
        *,
        stop_on_error: bool = False,
        approvals: Mapping[str, ApprovalDecision | None] | None = None,
        priority: int | None = None,
        timeout: float | None = None,
        call_timeout: float | None = None,
        agent_run: str | None = None,
    ) -> BatchResult:
        """Async twin of `execute_batch`; never blocks the event loop.

        Cancelling the awaiting task cancels every call not yet finished,
        including calls waiting out a retry backoff (or a policy's delay).
        """
        waiter = LoopWaiter(asyncio.get_running_loop())
        clocks = (timeout, call_timeout)
        batch = self._submit_batch(
            calls,
            stop_on_error,
            waiter,
            approvals=approvals,
            priority=priority,
            clocks=clocks,
            agent_run=agent_run,
        )
        if batch is None:
            return empty_batch()
        await self._waiting.result(
            waiter, batch.runs, batch, None, "the awaiting task was cancelled"
        )
        return batch_result(batch)

    # -- observation and lifetime ---------------------------------------------------

    def stats(self, timeout: float = 5.0) -> ExecutorStats:
        """A snapshot of the supervisor's counters (answered even while tools hang).

        Exact: a caller is woken only after its call is counted, so right after
        `execute()` returns its call is in `ok`/`error`/..., not in flight.
        After `close()`, the final counters. (`timeout`: kept for compatibility.)
        """
        if self._final_stats is not None:
            return self._final_stats.model_copy(update={"events_dropped": self._announcer.dropped})
        data = typing.cast(dict[str, Any], self._scheduler.ask(StatusQuery()))
        return stats_from(data, self._announcer.dropped)

    def drain_events(
        self, timeout: float | None = 10.0, *, subscription: Subscription | None = None
    ) -> bool:
        """Wait until every event announced before this call was delivered to every
        subscription (or dropped and counted); False if `timeout` passed first.
        With `subscription`, wait for that one only (not for a slow neighbour).

        Results never wait for observers; call this when you need both. From a
        receiver (a delivery thread) it returns False at once (it would stall the bus).
        `timeout`: seconds (None or `math.inf`: no bound); anything else is a
        `TypeError`/`ValueError`, whether or not something is pending.
        """
        timeout = wait_seconds(timeout, "timeout", "drain_events")
        if subscription is not None and not isinstance(subscription, Subscription):
            # Anything else matches no queue: it would claim delivery at once.
            raise TypeError(
                "drain_events: subscription must be a toolbus.bus.Subscription, got "
                f"{type(subscription).__name__}"
            )
        return self._emitter.flush(timeout, subscription)

    def _tool_named(self, name: str) -> Tool | None:
        """The tool a call of this name ran: registered, or a composite tool's
        step (so observers label a step's calls by its tool, not `<unknown>`)."""
        found = self.registry.get(name)
        return found if found is not None else self._step_tools.get(name)

    @property
    def journal(self) -> Journal | None:
        """The journal this executor records its mutating calls in, if any."""
        return self._journal

    @property
    def scanner(self) -> ContentScanner | None:
        """The content scanner it was given (`scanner=`), hashing under its secret."""
        return self._services.scrubber.scanner

    def in_doubt(self) -> list[JournalRecord]:
        """The journal's calls in doubt (`Journal.in_doubt()`): mutating calls
        that started under an owner that is gone and never recorded an outcome.
        Empty without a journal. Clear one with `journal.acknowledge(call_id)`
        (with `on_in_doubt`, the decisions made so far are acknowledged first)."""
        return jrn.in_doubt_now(self._journal, self._services.in_doubt)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        # A hook set on a started executor (`ex.is_allowed = ...`) is called
        # from the next call on: the pipeline skips only hooks it knows unset.
        if name in _machinery.HOOK_ATTRIBUTES and "_services" in self.__dict__:
            _machinery.refresh_plain(self._services, self)

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Executor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)
