"""Submission: calls checked, planned into runs, shown to the submission hooks,
and handed to the scheduler, on the caller's thread.

`Submitting` is the part of `Executor` that does it (a mixin, as
`toolbus.hooks.ExecutorHooks` is: it names what of the executor it reads).
Every `execute*` submits through it, as does a composite tool's step
(`_nested.py`). The planning itself is `_plan.py`'s.

Submission hooks (`Executor.on_submit`, kept by `SubmitHooks`) see a
`Submission`: they run on the submitting thread, in the caller's
contextvars, before the calls are handed on, so an observer can capture what
the caller's context holds (a trace's span) and find it again by call id
when the calls' events reach it on a delivery thread. What a hook raises is
logged, rate-limited, and the calls go on.

One piece, a little over 400 lines: making a submission's runs and handing
them on share what undoes a submission cut short between the two
(`_cut_short`).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._interrupts import interrupts_caller
from .._options import check_priority, own_bound, timeout_seconds
from ..actors import Scheduler
from ..actors._messages import SubmissionCutShort, Submit
from ..agent_runs import AGENT_RUN, check_agent_run
from ..approvals import ApprovalDecision, check_approval, check_approvals
from ..backends import Backends
from ..bus._failures import FailureLog
from ..calls import CallLike, coerce_call, coerce_calls
from ..masking import EMPTY_SCRUBBER, SecretKeys
from ..models import ToolCall, ToolResult
from ..pipeline import BatchRun, Run, Services, Waiter
from ..policies._set import PolicySet
from ..retry import RetryPolicy
from ..tools import Tool, ToolRegistry
from ._backpressure import submit_when_room
from ._nested import caller_run, refuse_blocking
from ._options import call_budget
from ._plan import ToolPlan, ToolPlans, plan_batch, plan_run

__all__ = ["Submission", "SubmitHook", "SubmitHooks", "Submitting"]


@dataclass(frozen=True, slots=True)
class Submission:
    """Calls handed to an executor, as its submission hooks see them (`Executor.on_submit`).

    `call_ids` in the order given; `batch_id` as in the calls' events (None for
    a single call); `timestamp` in epoch seconds, like events' timestamps.
    `context` is the copy of the caller's `contextvars` the calls' tools and
    hooks run in: read it (`context.get(var)`, `context.run(fn)`), but set
    nothing in it. `priority` is the calls' (`execute*(..., priority=N)`; a
    nested call given none has its caller's).
    """

    call_ids: tuple[str, ...]
    batch_id: str | None
    timestamp: float
    context: contextvars.Context
    priority: int = 0
    # toolbus's own: the calls' `_run` tokens, as their events carry them.
    _runs: tuple[int, ...] = field(default=(), repr=False, compare=False)


SubmitHook = Callable[[Submission], None]


class SubmitHooks:
    """An executor's submission hooks: `hooks` is swapped whole under the
    lock and read without it (test it before `tell`: the common executor has none)."""

    __slots__ = ("_failures", "_lock", "hooks")

    def __init__(self) -> None:
        self.hooks: tuple[SubmitHook, ...] = ()
        self._lock = threading.Lock()
        self._failures: FailureLog | None = None  # made at the first failure

    def add(self, hook: SubmitHook) -> Callable[[], None]:
        """Add `hook`; return what removes it."""
        if not callable(hook):
            raise TypeError(f"on_submit: hook must be callable, got {type(hook).__name__}")
        with self._lock:
            self.hooks = (*self.hooks, hook)

        def remove() -> None:
            with self._lock:
                hooks = list(self.hooks)
                if hook in hooks:
                    hooks.remove(hook)
                    self.hooks = tuple(hooks)

        return remove

    def tell(self, runs: Sequence[Run], batch: BatchRun | None) -> None:
        """Tell the hooks of `runs` (on the caller's thread, in its context)."""
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
        for hook in self.hooks:
            try:
                hook(submission)
            except BaseException as e:  # (any: the calls go on, see `Executor.on_submit`)
                if interrupts_caller(e):
                    raise  # Ctrl-C, on the caller's thread: before any call is handed on
                if self._failures is None:
                    self._failures = FailureLog()
                self._failures.failed(hook, "submission", e)

    def flush(self) -> None:
        """Log the failures not yet reported (the executor closes)."""
        if self._failures is not None:
            self._failures.flush()


# (timeout, call_timeout) given with a call: none.
_NO_CLOCKS: tuple[float | None, float | None] = (None, None)


def check_clocks(clocks: tuple[object, object], owner: str) -> tuple[float | None, float | None]:
    """A call's own `timeout` (None, `math.inf` or seconds > 0, kept as given)
    and `call_timeout` (None or `math.inf`: none), checked: `TypeError` or
    `ValueError` naming `owner` and the option, as for `priority`."""
    timeout, budget = clocks
    return (
        timeout_seconds(timeout, "timeout", owner, "the tool's timeout"),
        call_budget(
            budget, owner, hint=own_bound("the tool's and the executor's call_timeouts still apply")
        ),
    )


class Submitting:
    """How an executor submits calls (a part of `Executor`)."""

    registry: ToolRegistry
    timeout: float | None
    call_timeout: float | None
    retry_policy: RetryPolicy
    parallel_limit: int
    _policies: PolicySet
    _backends: Backends
    _secret_keys: SecretKeys
    _services: Services
    _scheduler: Scheduler
    _submission: SubmitHooks
    _plans: ToolPlans
    # on_full="wait": execute and execute_batch wait for room (`_backpressure.py`).
    _waits_for_room: bool

    if TYPE_CHECKING:  # the executor's hook (toolbus.hooks.ExecutorHooks)

        def max_parallel(self, calls: Sequence[ToolCall]) -> int: ...

    def on_submit(self, hook: Callable[[Submission], None]) -> Callable[[], None]:
        """Call `hook(submission)` whenever calls are submitted; return what removes it.

        It runs on the submitting thread, in the caller's `contextvars` context,
        before the calls are handed on and any of their events is announced
        (every `execute*`). So an observer can capture what the caller's context
        holds (a trace's span) and find it again by call id when the calls'
        events reach it on a delivery thread (`observe.instrument_otel` does).
        It gets call ids, not arguments. Keep it short: the caller waits for
        it. Whatever it raises is logged (rate-limited) and the calls go on;
        but a KeyboardInterrupt or SystemExit on the main thread, Ctrl-C's,
        which reaches the caller before any of its calls is handed on.
        """
        return self._submission.add(hook)

    @property
    def _submit_hooks(self) -> tuple[Callable[[Submission], None], ...]:
        """The submission hooks now (as `on_submit` added them)."""
        return self._submission.hooks

    def _make_run(
        self,
        call: CallLike,
        # Positional or keyword: a call's and a batch's submission pass them
        # in this order (a keyword each costs a call about 30 ns).
        context: contextvars.Context,
        waiter: Waiter | None = None,
        approval: ApprovalDecision | None = None,
        priority: int | None = None,
        clocks: tuple[float | None, float | None] = _NO_CLOCKS,
        decided: ToolResult | None = None,
        gate: Any = None,
        index: int = 0,
        batch: BatchRun | None = None,
        step_of: Run | None = None,
        step_tool: Tool | None = None,
    ) -> Run:
        """A run for `call`, its tool looked up in the registry; for a step of
        a composite tool (`step_of`), `step_tool` whether registered or not;
        `decided`: its result, known before (see `plan_run`)."""
        c = (  # (`coerce_calls`'s look: a ToolCall whose id and name are text, as it is)
            call
            if type(call) is ToolCall and type(call.id) is type(call.__dict__.get("name")) is str
            else coerce_call(call)
        )
        if step_of is None:
            plan = self._plans.plan(
                c.name,
                self.registry,
                self.timeout,
                self.retry_policy,
                self._policies,
                self._backends,
                self.call_timeout,
            )
        else:  # a step's tool, registered or not: planned afresh
            plan = (
                ToolPlan(
                    step_tool,
                    timeout=self.timeout,
                    retry=self.retry_policy,
                    policies=self._policies,
                    backends=self._backends,
                    call_timeout=self.call_timeout,
                )
                if step_tool is not None
                else None
            )
        services = self._services
        parent = caller_run(services, step_of)
        # (In `plan_run`'s order: positionally, as it is cheaper.)
        run = plan_run(
            c, plan, self.registry, self._secret_keys, context, index, batch, waiter, parent,
            step_of is not None, priority, approval, *clocks, decided, gate, services.halts,
        )  # fmt: skip
        if services.scrubber is not EMPTY_SCRUBBER:  # the executor's content scanner
            run.scrubber = run.scrubber.merged(services.scrubber)
        if parent is not None and parent.scrubber.values:
            # Its caller's secrets too: a tool may pass one on under a plain name.
            run.scrubber = run.scrubber.merged(parent.scrubber.known())
        return run

    def _submit_one(
        self,
        call: CallLike,
        waiter: Waiter,
        # Positional or keyword (`execute` passes them in this order).
        refuse: bool = False,
        approval: ApprovalDecision | None = None,
        priority: int | None = None,
        wait: bool = False,
        clocks: tuple[float | None, float | None] = _NO_CLOCKS,
        decided: ToolResult | None = None,
        gate: Any = None,
        agent_run: str | None = None,
    ) -> Run:
        if priority is not None:  # (the common call gives none: no check to pay for)
            priority = check_priority(priority)
        if clocks != _NO_CLOCKS:
            clocks = check_clocks(clocks, "execute, aexecute or submit")
        if approval is not None:
            approval = check_approval(approval)
        token = None
        if agent_run is not None:
            # Set while it is made and handed on: its run, its policies at
            # submission and its tool (through the context) see it.
            token = AGENT_RUN.set(check_agent_run(agent_run, "execute, aexecute or submit"))
        run = None
        try:
            run = self._make_run(
                call, contextvars.copy_context(), waiter, approval, priority, clocks, decided, gate
            )
            self._hand_on((run,), None, refuse, wait)
        except BaseException:  # interrupted (Ctrl-C), as it was handed on or before
            if run is not None:
                self._cut_short((run,), None)
            raise
        finally:
            if token is not None:
                AGENT_RUN.reset(token)
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
        waiters: Sequence[Waiter] | None = None,
        made: Callable[[BatchRun, tuple[Run, ...]], None] | None = None,
        wait: bool = False,
        clocks: tuple[float | None, float | None] = _NO_CLOCKS,
        known: Mapping[int, ToolResult] | None = None,
        gates: Mapping[int, Any] | None = None,
        contexts: Sequence[contextvars.Context] | None = None,
        agent_run: str | None = None,
    ) -> BatchRun | None:
        if agent_run is None:
            return self._submit_calls(
                calls, stop_on_error, waiter, refuse, approvals, priority, waiters, made, wait,
                clocks, known, gates, contexts,
            )  # fmt: skip
        where = "execute_batch, aexecute_batch or submit_batch"
        token = AGENT_RUN.set(check_agent_run(agent_run, where))
        try:
            return self._submit_calls(
                calls, stop_on_error, waiter, refuse, approvals, priority, waiters, made, wait,
                clocks, known, gates, contexts,
            )  # fmt: skip
        finally:
            AGENT_RUN.reset(token)

    def _submit_calls(
        self,
        calls: Iterable[CallLike],
        stop_on_error: bool,
        waiter: Waiter,
        refuse: bool,
        approvals: Mapping[str, ApprovalDecision | None] | None,
        priority: int | None,
        waiters: Sequence[Waiter] | None,
        made: Callable[[BatchRun, tuple[Run, ...]], None] | None,
        wait: bool,
        clocks: tuple[float | None, float | None],
        known: Mapping[int, ToolResult] | None,
        gates: Mapping[int, Any] | None,
        contexts: Sequence[contextvars.Context] | None,
    ) -> BatchRun | None:
        if priority is not None:
            priority = check_priority(priority)
        if clocks != _NO_CLOCKS:
            clocks = check_clocks(clocks, "execute_batch, aexecute_batch or submit_batch")
        decided = check_approvals(approvals)
        coerced = coerce_calls(calls)
        if not coerced:
            return None
        batch = plan_batch(coerced, self.max_parallel, self.parallel_limit, stop_on_error, waiter)
        context = contextvars.copy_context()
        made_runs: list[Run] = []  # a loop, not a generator: no Python call per item
        try:
            for i, c in enumerate(coerced):
                made_runs.append(
                    self._make_run(
                        c,
                        # Its context (a durable engine's: each call's tool in one of its own).
                        contexts[i] if contexts is not None else context,
                        # Its waiter: a call's own handle, besides the batch's (submit_batch).
                        waiters[i] if waiters is not None else None,
                        decided.get(c.id),  # its approval
                        priority,
                        clocks,
                        known.get(i) if known else None,  # its decided result
                        gates.get(i) if gates else None,  # its gate
                        i,
                        batch,
                    )
                )
            runs = tuple(made_runs)
            batch.runs = made_runs
            if made is not None:  # before the scheduler has them: they may end at once
                made(batch, runs)
            self._hand_on(runs, batch, refuse, wait)
        except BaseException:  # interrupted (Ctrl-C) with some of them made
            self._cut_short(tuple(made_runs), batch)
            raise
        return batch

    def _cut_short(self, runs: tuple[Run, ...], batch: BatchRun | None) -> None:
        """The submission of `runs` was interrupted (the caller's Ctrl-C) once
        they were made, maybe as they were handed on: those the scheduler
        never admitted end `cancelled` (they never run), so that a quota that
        counted one gives its unit back. A call whose making was cut short
        tells its own policies (`toolbus.policies._set.never_submitted`)."""
        if runs:
            self._scheduler.post(SubmissionCutShort(Submit(runs, batch)))

    def _hand_on(
        self,
        runs: tuple[Run, ...],
        batch: BatchRun | None,
        refuse: bool = False,
        wait: bool = False,
    ) -> None:
        """Show the runs to the submission hooks, then hand them to the scheduler
        (`refuse`: to end them `rejected` at once, see `refuse_blocking`;
        `wait`: once they fit in their bounded queues, see `submit_when_room`)."""
        try:
            if self._submission.hooks:
                self._submission.tell(runs, batch)
            if refuse:
                refuse_blocking(self._scheduler, Submit(runs, batch))
            elif wait:
                # Within the calls' whole-call budget; without one, the attempt's.
                dues = [r.due for r in runs if r.due is not None]
                bound = min(dues) - time.monotonic() if dues else self.timeout
                submit_when_room(self._scheduler, Submit(runs, batch), bound)
            else:
                # Admission and dispatch happen here, on the caller's thread, under the
                # scheduler's lock; after close the scheduler ends the calls `cancelled`.
                self._scheduler.post(Submit(runs, batch))
        except BaseException:  # the caller's interrupt: a hook's own failure is contained
            self._cut_short(runs, batch)
            raise
