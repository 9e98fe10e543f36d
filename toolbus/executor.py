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
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hmac
import itertools
import logging
import math
import os
import threading
import time
import typing
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Self

import pykka

from ._options import check_priority, positive_int, positive_number, timeout_seconds
from ._records import ExecutorStats, Submission, SubmitHook, batch_result, empty_batch
from ._setup import (
    MAX_LISTED_TOOLS,
    add_policy_tools,
    check_groups,
    check_inject,
    close_journal,
    learn_groups,
    open_journal,
    unknown_tool_message,
)
from .actors import Scheduler, Supervisor, SupervisorHost, TimerService
from .actors._backstop import overdue
from .actors._loopwatch import LoopWatch
from .actors._messages import Cancel, Close, Expired, StatusQuery, Submit
from .approvals import check_approval, check_approvals
from .backends import Backend, Backends, LoopThread
from .bus import Announcer, BusPublisher, Emitter, Publisher, Subscription
from .bus import _signals as sig
from .bus._delivery import describe
from .bus._events import InDoubt
from .bus._failures import FailureLog
from .calls import CallLike, coerce_call
from .hooks import ExecutorHooks, PostCallHook, PreCallHook
from .journal import Journal, JournalRecord, Retention
from .masking import DEFAULT_SECRET_KEYS, SecretKeys
from .models import BatchResult, ErrorCode, ToolCall, ToolResult
from .pipeline import (
    BatchRun,
    LoopWaiter,
    Run,
    Services,
    ThreadWaiter,
    Waiter,
    current_run,
)
from .policies import ApprovalDecision, Policy, arguments_digest, requires_approval
from .policies._set import (
    Guard,
    PolicySet,
    admit_at_submission,
    submission_scrubber,
    timeout_for,
)
from .retry import RetryPolicy
from .tools import Tool, ToolRegistry, error_text

__all__ = ["MAX_LISTED_TOOLS", "Executor", "ExecutorStats", "Submission"]

log = logging.getLogger("toolbus")


_batch_ids = itertools.count(1)
_executor_numbers = itertools.count(1)
# Every executor alive in this process (not yet garbage collected), for the
# names a default name must not repeat; added to under the lock.
_named_executors: weakref.WeakSet[Executor] = weakref.WeakSet()
_names_lock = threading.Lock()


class Executor(ExecutorHooks):
    """Runs tool calls from a registry with timeouts, retries, limits, hooks and events.

    Every call submitted gets exactly one terminal result; nothing a tool, hook
    or subscriber does raises out of `execute*`. Close it (or use `with`) to
    stop its actors; its threads are daemons and never keep a process alive.

    Options are checked here, with `TypeError`/`ValueError` naming the option:
    `max_parallel`, `max_argument_bytes`, `max_abandoned_workers` and
    `max_abandoned_per_tool` are integers >= 1, `hook_grace` a finite number > 0,
    `timeout` a number > 0 or None (`math.inf` is taken as None: no deadline).
    `secret_keys` adds names to the default secret-looking keys for this
    executor's default masking (so it cannot be combined with `masker=`).

    `journal`: a path (the file is made if missing; its directory must exist)
    or a `toolbus.Journal`. Every mutating call is then recorded before its
    tool runs, calls left in doubt by a dead process are announced as
    `tool:in-doubt` events now (and listed by `in_doubt()`), and a call whose
    idempotency key already ended ok is answered from the journal without
    running. `journal_retention` (with a path): a `toolbus.journal.Retention`
    or `{"days": ..., "rows": ...}`. `journal_timeout` (default 5 s) bounds
    every wait for the journal's disk: opening it and recording this
    executor's session (a `TimeoutError` here), and each mutating call's
    intent (the call then runs unjournaled, logged as an error: see
    docs/journal.md).
    `inject` supplies the values of injected parameters (`toolbus.Injected`):
    `{"api_key": fn, "tool_name.param": fn}`, the tool's own key first; `fn(call)`
    may be sync or async and runs with the caller's contextvars, before the
    pre-call hooks.
    `policies` guard every tool (before the tools' own); a tool a policy
    brings along (a spill's `read_artifact`) is registered into `registry`
    itself, which then has it for everyone holding it (docs/policies.md).
    `name` tells this executor apart in metrics, traces and logs (the `executor`
    label of `toolbus.observe`); by default `executor-1`, `executor-2`, ... in
    the order executors are made in this process, skipping a name an executor
    still alive (closed or not, until it is garbage collected) was given: a
    default name never repeats one in use. A name given explicitly is taken
    as it is, even if another executor has it.
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
        authorize: Callable[[ToolCall], bool | Awaitable[bool]] | None = None,
        masker: Callable[[ToolCall], Any] | None = None,
        concurrency: Callable[[Sequence[ToolCall]], int] | None = None,
        publisher: Publisher | None = None,
        max_argument_bytes: int = 1_000_000,
        max_abandoned_workers: int = 1000,
        max_abandoned_per_tool: int | None = None,
        hook_grace: float = 5.0,
        backend: str | Backend | None = "auto",
        backends: Mapping[str, Backend] | None = None,
        secret_keys: Iterable[str] = (),
        groups: Mapping[str, int] | None = None,
        journal: str | os.PathLike[str] | Journal | None = None,
        journal_retention: Retention | Mapping[str, Any] | None = None,
        journal_timeout: float | None = None,
        inject: Mapping[str, Callable[[ToolCall], Any]] | None = None,
        name: str | None = None,
        policies: Sequence[Policy] = (),
    ) -> None:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise TypeError(f"Executor: name must be a non-empty string, got {name!r}")
        max_parallel = positive_int(max_parallel, "max_parallel", "Executor")
        timeout = timeout_seconds(timeout, "timeout", "Executor")
        timeout = None if timeout == math.inf else timeout
        hook_grace = positive_number(hook_grace, "hook_grace", "Executor")
        max_argument_bytes = positive_int(max_argument_bytes, "max_argument_bytes", "Executor")
        max_abandoned_workers = positive_int(
            max_abandoned_workers, "max_abandoned_workers", "Executor"
        )
        if max_abandoned_per_tool is not None:
            max_abandoned_per_tool = positive_int(
                max_abandoned_per_tool, "max_abandoned_per_tool", "Executor"
            )
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"Executor: retry must be a RetryPolicy, got {type(retry).__name__}")
        keys = SecretKeys(secret_keys)
        # Without extra names, share the default matcher and its warm cache.
        self._secret_keys = keys if keys.extra else DEFAULT_SECRET_KEYS
        if keys.extra and masker is not None:
            raise ValueError(
                "Executor: secret_keys extends the default masking, which masker= replaces; "
                "mask those keys in your masker (masking.mask_arguments(args, SecretKeys([...])))"
            )
        if max_abandoned_per_tool is None:
            # One stuck tool may take half the budget: the rest stays for the others.
            max_abandoned_per_tool = max(1, max_abandoned_workers // 2)
        self.registry = registry
        # Tools that ran as steps of a composite tool, registered or not (by
        # name, the first kept): observers name those calls by them.
        self._step_tools: dict[str, Tool] = {}
        self.name: str = self._take_name(name)  # (set under the names' lock too)
        # Submission hooks (on_submit): swapped whole under the lock, read without it.
        self._submit_hooks: tuple[SubmitHook, ...] = ()
        self._submit_lock = threading.Lock()
        self._submit_failures: FailureLog | None = None
        self.parallel_limit = max_parallel
        self.timeout = timeout
        self.retry_policy = retry or RetryPolicy()
        self._pre_call = tuple(pre_call)
        self._post_call = tuple(post_call)
        self._authorize = authorize
        self._masker = masker
        self._concurrency = concurrency
        self.publisher: Publisher = publisher if publisher is not None else BusPublisher(self)
        self._groups = check_groups(groups)
        self._policies = PolicySet(policies)
        add_policy_tools(registry, self._policies)
        self._inject = check_inject(inject, registry)
        # Every tool's backend and groups are resolved now, so a pairing that
        # cannot work fails here; tools registered later are checked on their
        # first call (and refused with a result).
        self._backends = Backends(backend, backends)
        tools = registry.list()
        learn_groups(self._groups, tools)
        for t in tools:
            self._backends.for_tool(t)
            for group in t.groups:
                if group not in self._groups:
                    raise ValueError(
                        f"tool {t.name!r}: no capacity group named {group!r} "
                        f"(known: {', '.join(sorted(self._groups)) or 'none'})"
                    )
        # Opened last among the checks, and before any thread of the executor
        # starts: a bad option, or a journal that cannot be used (a bad path,
        # a disk that does not answer, a malformed record), leaves nothing
        # behind.
        self._journal, self._journal_owned, self._journal_session, in_doubt = open_journal(
            journal, journal_retention, journal_timeout
        )
        self._closed = False
        self._final_stats: ExecutorStats | None = None
        # The deadline backstop of each event loop that awaits calls.
        self._watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatch] = (
            weakref.WeakKeyDictionary()
        )
        self._close_lock = threading.Lock()
        self._announcer = Announcer(self.publisher)
        # Public so that your own code can announce events of signals it defined.
        self.emitter = self._emitter = Emitter(self.publisher, self._announcer)
        try:
            self._start(
                max_parallel,
                max_argument_bytes,
                max_abandoned_workers,
                max_abandoned_per_tool,
                hook_grace,
            )
        except BaseException:
            self._abandon()
            raise
        if self._journal is not None:
            try:
                self._announce_in_doubt(in_doubt)
            except Exception:  # the executor works all the same
                log.exception("announcing the journal's calls in doubt failed")

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

        `registry` is not changed. When the file has `[tools."<name>"]`
        tables, the executor runs a registry of its own (`executor.registry`,
        the one to export to a model): each configured tool a copy with the
        file's values, a disabled tool absent (its calls end `TOOL_NOT_FOUND`).
        That registry is a snapshot: register later tools on it, not on
        `registry`. A composite tool's steps run as that registry's versions
        of their tools (a disabled one ends `TOOL_NOT_FOUND`). A `journal`
        the file names is opened here and closed with the executor. A file
        that cannot be used is a `toolbus.ConfigError` naming the file, the
        key and the reason.
        """
        from .config import apply_config, load_config
        from .config._apply import open_file_journal

        config = load_config(path)
        view, options = apply_config(config, registry, overrides)
        # Opened here, so that a path that cannot hold one names the file and the key.
        journal = open_file_journal(config, options, overrides)
        try:
            executor = cls(view, **options)
        except BaseException:
            if journal is not None:
                journal.close(1.0)
            raise
        if journal is not None:
            executor._journal_owned = True  # made from the file's path: it closes with the executor
        return executor

    def _plain_admission(self) -> bool:
        """No user code admits a call: no pre-call hook, authorizer or masker,
        and none of those hooks overridden (see `Services.plain_admission`)."""
        if self._pre_call or self._authorize is not None or self._masker is not None:
            return False
        cls = type(self)
        return all(
            getattr(cls, name) is getattr(ExecutorHooks, name)
            for name in ("pre_execute", "is_allowed", "mask_arguments")
        )

    def _start(
        self,
        max_parallel: int,
        max_argument_bytes: int,
        max_abandoned_workers: int,
        max_abandoned_per_tool: int,
        hook_grace: float,
    ) -> None:
        """Start the executor's threads and actors (the constructor's last part)."""
        self._timers = TimerService()
        self._loop = LoopThread()
        self._services = Services(
            emitter=self._emitter,
            hooks=self,
            max_argument_bytes=max_argument_bytes,
            # With a journal, its secret: keys stay the same across restarts.
            key_secret=(self._journal._key_secret if self._journal is not None else os.urandom(32)),
            journal=self._journal_session,
            inject=self._inject,
            nested=_NestedCalls(self),
            plain_admission=self._plain_admission(),
        )
        host = SupervisorHost(self._services, self._loop)
        self._scheduler = host.scheduler = Scheduler(
            self._services,
            self._timers,
            host,
            max_parallel=max_parallel,
            max_abandoned=max_abandoned_workers,
            max_abandoned_per_tool=max_abandoned_per_tool,
            hook_grace=hook_grace,
            backends=self._backends.all(),
            groups=self._groups,
        )
        self._supervisor = Supervisor.start(self._scheduler)

    def _abandon(self) -> None:
        """A constructor that failed: stop what it started, release the journal."""
        supervisor = getattr(self, "_supervisor", None)
        if supervisor is not None:
            with contextlib.suppress(Exception):
                supervisor.stop(timeout=1.0)
        for part in ("_timers", "_loop"):
            thing = getattr(self, part, None)
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close()
        close_journal(self._journal, self._journal_owned, self._journal_session, 1.0)

    # -- sync API ---------------------------------------------------------------

    def execute(
        self,
        call: CallLike,
        *,
        approval: ApprovalDecision | None = None,
        priority: int | None = None,
    ) -> ToolResult:
        """Run one call and return its result; blocks until it is final.

        `approval`: the decision on this call's `ApprovalRequest`, for a tool
        that requires one (see `toolbus.policies.requires_approval`).
        `priority` (an integer, default 0; a nested call's default is its
        caller's): when capacity is short, higher priorities start first.

        From an async tool or hook of this executor, use `aexecute`: blocking
        the loop its async tools run on would deadlock, so `execute` there
        returns a `rejected` result (`TOOL_UNAVAILABLE`) at once."""
        waiter = ThreadWaiter()
        refuse = self._would_block_its_tools()
        run = self._submit_one(call, waiter, refuse=refuse, approval=approval, priority=priority)
        if refuse:
            assert run.result is not None  # decided at once, never waited for
            return run.result
        if not waiter.released:  # released once counted, which may lag the result
            try:
                self._wait(waiter, (run,))
            except BaseException:
                self._cancel(Cancel(None, run, ErrorCode.CANCELLED, "the caller was interrupted"))
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
        refuse = self._would_block_its_tools()
        batch = self._submit_batch(
            calls, stop_on_error, waiter, refuse=refuse, approvals=approvals, priority=priority
        )
        if batch is None:
            return empty_batch()
        if refuse:
            return batch_result(batch)
        try:
            self._wait(waiter, batch.runs)
        except BaseException:
            self._cancel(Cancel(batch, None, ErrorCode.CANCELLED, "the caller was interrupted"))
            raise
        return batch_result(batch)

    # -- async API ----------------------------------------------------------------

    async def aexecute(
        self,
        call: CallLike,
        *,
        approval: ApprovalDecision | None = None,
        priority: int | None = None,
    ) -> ToolResult:
        """Async twin of `execute`; never blocks the event loop.

        Cancelling the awaiting task cancels the call (it ends `cancelled`).
        """
        waiter = LoopWaiter(asyncio.get_running_loop())
        run = self._submit_one(call, waiter, approval=approval, priority=priority)
        return await self._await_one(run, waiter, "the awaiting task was cancelled")

    async def _await_one(self, run: Run, waiter: LoopWaiter, why: str) -> ToolResult:
        """Await a submitted call's result; a cancelled wait cancels the call."""
        self._watch(waiter, (run,))
        try:
            result: ToolResult = await waiter.future
        except asyncio.CancelledError:
            self._cancel(Cancel(None, run, ErrorCode.CANCELLED, why))
            raise
        return result

    async def aexecute_batch(
        self,
        calls: Iterable[CallLike],
        *,
        stop_on_error: bool = False,
        approvals: Mapping[str, ApprovalDecision | None] | None = None,
        priority: int | None = None,
    ) -> BatchResult:
        """Async twin of `execute_batch`; never blocks the event loop.

        Cancelling the awaiting task cancels every call not yet finished,
        including calls waiting out a retry backoff (or a policy's delay).
        """
        waiter = LoopWaiter(asyncio.get_running_loop())
        batch = self._submit_batch(
            calls, stop_on_error, waiter, approvals=approvals, priority=priority
        )
        if batch is None:
            return empty_batch()
        self._watch(waiter, batch.runs)
        try:
            await waiter.future
        except asyncio.CancelledError:
            self._cancel(
                Cancel(batch, None, ErrorCode.CANCELLED, "the awaiting task was cancelled")
            )
            raise
        return batch_result(batch)

    # -- observation and lifetime ---------------------------------------------------

    def stats(self, timeout: float = 5.0) -> ExecutorStats:
        """A snapshot of the supervisor's counters (answered even while tools hang).

        Exact: a caller is woken only after its call is counted, so right after
        `execute()` returns its call is in `ok`/`error`/... and no longer in
        flight. After `close()`, the final counters. (`timeout` is kept for
        compatibility: the answer never waits for a thread.)
        """
        if self._final_stats is not None:
            return self._final_stats.model_copy(update={"events_dropped": self._announcer.dropped})
        data = typing.cast(dict[str, Any], self._scheduler.ask(StatusQuery()))
        if not data:  # the scheduler failed to answer (logged there)
            data = {name: 0 for name in ExecutorStats.model_fields if name != "pools"}
            data["pools"] = {}
        return ExecutorStats(**{**data, "events_dropped": self._announcer.dropped})

    def drain_events(
        self, timeout: float | None = 10.0, *, subscription: Subscription | None = None
    ) -> bool:
        """Wait until every event announced before this call was delivered to every
        subscription (or dropped and counted); False if `timeout` passed first.
        With `subscription`, wait for that one only: closing an observer need not
        wait for a slow neighbour.

        Results never wait for observers; call this when you need both. From a
        receiver (a delivery thread) it returns False at once: waiting there
        would stall the bus.
        """
        if subscription is not None and not isinstance(subscription, Subscription):
            # Anything else matches no queue: it would claim delivery at once.
            raise TypeError(
                "drain_events: subscription must be a toolbus.bus.Subscription, got "
                f"{type(subscription).__name__}"
            )
        return self._emitter.flush(timeout, subscription)

    def on_submit(self, hook: Callable[[Submission], None]) -> Callable[[], None]:
        """Call `hook(submission)` whenever calls are submitted; return what removes it.

        It runs on the submitting thread, in the caller's `contextvars` context
        (an async caller's task's), before the calls are handed on: before any
        of their events is announced, for `execute`, `execute_batch`,
        `aexecute` and `aexecute_batch` alike. So an observer can capture what
        the caller's context holds (a trace's current span, say) and find it
        again by call id when the calls' events reach it later, on a delivery
        thread (`toolbus.observe.instrument_otel` does). It gets call ids, not
        arguments. Keep it short: the caller waits for it. Whatever it raises
        is logged (rate-limited) and the calls go on.
        """
        if not callable(hook):
            raise TypeError(f"on_submit: hook must be callable, got {type(hook).__name__}")
        with self._submit_lock:
            self._submit_hooks = (*self._submit_hooks, hook)

        def remove() -> None:
            with self._submit_lock:
                hooks = list(self._submit_hooks)
                if hook in hooks:
                    hooks.remove(hook)
                    self._submit_hooks = tuple(hooks)

        return remove

    def _submitted(self, runs: Sequence[Run], batch: BatchRun | None) -> None:
        """Tell the submission hooks (on the caller's thread, in its context)."""
        first = runs[0]
        call_ids: tuple[str, ...]
        tokens: tuple[int, ...]
        if batch is None:  # a single call: no generators (this is on the caller's path)
            call_ids, tokens, batch_id = (first.call.id,), (first.token,), None
        else:
            call_ids = tuple(r.call.id for r in runs)
            tokens, batch_id = tuple(r.token for r in runs), batch.batch_id
        submission = Submission(
            call_ids, batch_id, time.time(), first.context, first.priority, tokens
        )
        for hook in self._submit_hooks:
            try:
                hook(submission)
            except Exception as e:
                if self._submit_failures is None:
                    self._submit_failures = FailureLog()
                self._submit_failures.failed(describe(hook), "submission", e)

    def _take_name(self, name: str | None) -> str:
        """`name`, or the next `executor-N` no live executor has; either is
        then in use until this executor is garbage collected."""
        with _names_lock:
            if name is None:
                taken = {ex.name for ex in _named_executors}
                name = f"executor-{next(_executor_numbers)}"
                while name in taken:
                    name = f"executor-{next(_executor_numbers)}"
            self.name = name
            _named_executors.add(self)
        return name

    def _tool_named(self, name: str) -> Tool | None:
        """The tool a call of this name ran: registered, or a composite tool's
        step (so observers label a step's calls by its tool, not `<unknown>`)."""
        found = self.registry.get(name)
        return found if found is not None else self._step_tools.get(name)

    @property
    def journal(self) -> Journal | None:
        """The journal this executor records its mutating calls in, if any."""
        return self._journal

    def in_doubt(self) -> list[JournalRecord]:
        """The journal's calls in doubt (`Journal.in_doubt()`): mutating calls
        that started under an owner that is gone and never recorded an outcome.
        Empty without a journal. Clear one with `journal.acknowledge(call_id)`."""
        if self._journal is None:
            return []
        return self._journal.in_doubt()

    def _announce_in_doubt(self, found: list[JournalRecord]) -> None:
        """One `tool:in-doubt` event per call in doubt, as the executor starts
        (subscribers connected later see `in_doubt()` instead)."""
        assert self._journal is not None
        if not found:
            return
        log.warning(
            "journal %s: %d call(s) in doubt (started, no outcome, owner gone): %s",
            self._journal.path,
            len(found),
            ", ".join(f"{r.call_id} ({r.tool})" for r in found[:20])
            + (" ..." if len(found) > 20 else ""),
        )
        em = self._emitter
        if em.wants(sig.IN_DOUBT):
            for record in found:
                em.emit(sig.IN_DOUBT, InDoubt(record.call_id, record.tool, record))

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

        self._scheduler.ask(Close("the executor was closed"))
        self._final_stats = self.stats()
        try:
            self._supervisor.stop(timeout=left())
        except (pykka.ActorDeadError, pykka.Timeout):
            pass
        # Every call has its outcome queued now: mark the session closed, wait
        # for the disk, let go of the owner lock.
        close_journal(self._journal, self._journal_owned, self._journal_session, left())
        self._announcer.close(left(), why=f"close(timeout={timeout:g}) ran out of time")
        if self._submit_failures is not None:
            self._submit_failures.flush()
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
        approval: ApprovalDecision | None = None,
        step_of: Run | None = None,
        step_tool: Tool | None = None,
        priority: int | None = None,
    ) -> Run:
        """A run for `call`, its tool looked up in the registry; for a step of
        a composite tool (`step_of`), `step_tool` whether registered or not."""
        c = coerce_call(call)
        guard: Guard | None = None
        tool = self.registry.get(c.name) if step_of is None else step_tool
        backend: Backend | None = None
        if tool is None:
            timeout, policy = self.timeout, self.retry_policy
            hint = unknown_tool_message(c.name, self.registry.names())
        else:
            timeout = tool.timeout if tool.timeout is not None else self.timeout
            policy = tool.retry or self.retry_policy
            guard = self._policies.guard(tool)
            if guard is not None and guard.refusal is None:
                timed = timeout_for(guard, timeout)
                if isinstance(timed, tuple):  # a policy's timeout() failed: refused below
                    guard = replace(guard, refusal=timed)
                else:
                    timeout = timed
            try:
                backend = self._backends.for_tool(tool)
            except Exception as e:  # a custom backend's check() may raise anything
                hint = f"Tool '{c.name}' is unavailable: {error_text(e)}"
        parent = current_run.get()
        if step_of is not None:
            nested: Run | None = step_of
        elif parent is not None and parent[0] is self._services:
            nested = parent[1]  # made by a tool (or hook) of a call of this executor
        else:
            nested = None
        run = Run(
            c,
            tool,
            index=index,
            batch=batch,
            context=context,
            timeout=timeout,
            policy=policy,
            waiter=waiter,
            backend=backend,
            parent=nested,
            shares_slot=step_of is not None,
            priority=priority,  # None: 0, or a nested call's caller's (see Run)
        )
        if tool is None or backend is None:
            run.last_error = hint
        elif guard is not None and guard.refusal is not None:
            # A policy's own code (applies_to, timeout) failed for this tool:
            # none of its calls may run, and the caller gets a result, not the error.
            run.refusal = guard.refusal
        elif guard is not None:
            run.policies = guard.chain
            if guard.at_submission:
                # In the batch's order, before it fans out: a quota's first calls run.
                # Before admission masks the arguments: what the default masking
                # hides of them is scrubbed from a refusal (it may quote a key).
                scrubber = submission_scrubber(c, guard.tool, self._secret_keys)
                run.refusal = admit_at_submission(
                    guard, c, time.monotonic(), scrubber, run.batch_id
                )
                if run.refusal is None:  # they admitted it: they are told how it ends
                    run.consulted.extend(guard.at_submission)
                else:  # its result is scrubbed as it ends, like any call's
                    run.scrubber = scrubber
        if approval is not None:
            run.approval = approval
        return run

    def _submit_one(
        self,
        call: CallLike,
        waiter: Waiter,
        *,
        refuse: bool = False,
        approval: ApprovalDecision | None = None,
        priority: int | None = None,
    ) -> Run:
        if priority is not None:  # (the common call gives none: no check to pay for)
            priority = check_priority(priority)
        if approval is not None:
            approval = check_approval(approval)
        run = self._make_run(
            call,
            context=contextvars.copy_context(),
            waiter=waiter,
            approval=approval,
            priority=priority,
        )
        if self._submit_hooks:
            self._submitted((run,), None)
        if refuse:
            self._refuse(Submit((run,), None))
        else:
            self._tell(Submit((run,), None), (run,))
        return run

    def _submit_batch(
        self,
        calls: Iterable[CallLike],
        stop_on_error: bool,
        waiter: Waiter,
        *,
        refuse: bool = False,
        approvals: Mapping[str, ApprovalDecision | None] | None = None,
        priority: int | None = None,
    ) -> BatchRun | None:
        if priority is not None:
            priority = check_priority(priority)
        decided = check_approvals(approvals)
        coerced = [coerce_call(c) for c in calls]
        if not coerced:
            return None
        try:
            limit = int(self.max_parallel(coerced))
        except KeyboardInterrupt:
            raise  # the caller's own interrupt
        except BaseException as e:
            # No traceback or message: either may quote the calls' arguments.
            log.warning(
                "max_parallel hook failed (%s); using %d", type(e).__name__, self.parallel_limit
            )
            limit = self.parallel_limit
        batch = BatchRun(
            f"batch_{next(_batch_ids)}",
            limit=max(1, min(limit, self.parallel_limit)),
            stop_on_error=stop_on_error,
            waiter=waiter,
        )
        context = contextvars.copy_context()
        runs = tuple(
            self._make_run(
                c,
                context=context,
                index=i,
                batch=batch,
                approval=decided.get(c.id),
                priority=priority,
            )
            for i, c in enumerate(coerced)
        )
        batch.runs = list(runs)
        if self._submit_hooks:
            self._submitted(runs, batch)
        if refuse:
            self._refuse(Submit(runs, batch))
        else:
            self._tell(Submit(runs, batch), runs)
        return batch

    def _tell(self, message: Submit, runs: Sequence[Run]) -> None:
        # Admission and dispatch happen here, on the caller's thread, under the
        # scheduler's lock; after close the scheduler ends the calls `cancelled`.
        self._scheduler.post(message)

    # -- the waiting side's deadline backstop (see actors/_backstop.py) --------------

    def _look(self, runs: Sequence[Run], noticed: set[tuple[Run, int]]) -> float | None:
        """Tell the supervisor of overdue attempts; return when to look again."""
        late, wake = overdue(runs, time.monotonic(), noticed)
        for run, n in late:
            self._scheduler.post(Expired(run, n))
        return wake

    def _wait(self, waiter: ThreadWaiter, runs: Sequence[Run]) -> None:
        noticed: set[tuple[Run, int]] = set()
        while not waiter.wait(self._look(runs, noticed)):
            pass

    def _watch(self, waiter: LoopWaiter, runs: Sequence[Run]) -> None:
        loop = waiter.loop
        watch = self._watches.get(loop)
        if watch is None:
            watch = self._watches[loop] = LoopWatch(
                loop, lambda run, n: self._scheduler.post(Expired(run, n))
            )
        watch.watch(runs, waiter.future)

    def _would_block_its_tools(self) -> bool:
        """A blocking call here would stall the loop this executor's async tools
        run on: its own loop thread, or a caller's loop that one of its async
        tools or hooks (a nested call) is running on."""
        if self._loop.owns_current_thread() or self._scheduler.held_here():
            return True  # (the scheduler's lock: a backend running a job inside submit)
        if asyncio._get_running_loop() is None:
            return False
        parent = current_run.get()
        return parent is not None and parent[0] is self._services

    def _refuse(self, message: Submit) -> None:
        """A blocking call on the loop its async tools run on would deadlock: end
        its calls `rejected` at once, through the scheduler (counted, announced)."""
        for run in message.runs:
            if run.tool is not None:
                run.backend = None
                run.last_error = (
                    f"Tool '{run.call.name}' is unavailable here: a blocking execute() was "
                    "called on an event loop this executor's async tools run on, which it "
                    "would block; use `await executor.aexecute(...)`"
                )
        self._scheduler.ask(message)  # handled before it returns: never waits on a tool

    def _cancel(self, message: Cancel) -> None:
        self._scheduler.post(message)


class _NestedCalls:
    """The executor's way in for a tool's calls of its own (`Services.nested`):
    a `toolbus.tools.sequence` runs its steps through it.

    A step is submitted like `aexecute` submits a call (hooks, events, its own
    timeout and retries, `on_submit`), with two differences: its tool is the
    one given, so a step need not be registered, and it shares its caller's
    slot of `max_parallel` (the caller only waits for it): a sequence takes
    one slot however many steps it has, and works at `max_parallel=1`.
    """

    __slots__ = ("_executor",)

    def __init__(self, executor: Executor) -> None:
        # Strong: the executor's Services hold its hooks (the executor) anyway.
        self._executor = executor

    def tool(self, name: str) -> Tool | None:
        return self._executor.registry.get(name)

    async def call(self, tool: Tool, call: ToolCall, parent: Run) -> ToolResult:
        ex = self._executor
        # The executor's version of the step's tool: a step is a call of this
        # executor, so its configuration (Executor.from_config) applies to it
        # as to any call: a tool it set a timeout, a rate limit, a cache for
        # runs as its copy with those, and one it disabled does not run.
        mine = ex.registry._version_of(tool)
        if mine is not None:
            ex._step_tools.setdefault(mine.name, mine)
        waiter = LoopWaiter(asyncio.get_running_loop())
        run = ex._make_run(
            call,
            context=contextvars.copy_context(),
            waiter=waiter,
            step_of=parent,
            step_tool=mine,
        )
        if mine is None:  # ended `rejected` (TOOL_NOT_FOUND) as a call of it would be
            run.last_error = (
                f"Tool '{call.name}' is not available: this executor's configuration disables it"
            )
        elif run.policies and _approved_by_caller(parent, ex._services.key_secret):
            # A person approved the sequence's call, which covers its steps
            # (see toolbus/tools/_sequence.py): their approval is not asked again.
            run.policies = tuple(p for p in run.policies if not isinstance(p, requires_approval))
        if ex._submit_hooks:
            ex._submitted((run,), None)
        ex._tell(Submit((run,), None), (run,))
        return await ex._await_one(run, waiter, f"its caller, call {parent.call.id}, was cancelled")


def _approved_by_caller(parent: Run, secret: bytes) -> bool:
    """Whether `parent` (a step's caller) runs by a person's approval of its
    exact arguments, or is itself a step of a call that does.

    Approved: it got past a `requires_approval` without `when` (which admits
    nothing unapproved), or it carries an approving decision for exactly its
    own arguments (as the caller passed one for a conditional policy)."""
    run: Run | None = parent
    while run is not None:
        if any(isinstance(p, requires_approval) and p.when is None for p in run.policies):
            return True
        decision = run.approval
        if isinstance(decision, ApprovalDecision) and decision.approved:
            origin = run.origin
            digest = arguments_digest(origin.name, origin.arguments, secret=secret)
            if hmac.compare_digest(decision.digest, digest):
                return True
        run = run.parent if run.shares_slot else None  # up through steps only
    return False
