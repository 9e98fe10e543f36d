"""Where calls are admitted: a submission's runs, their capacity groups, their
backends, and the runs refused before they could start.

`_on_submit` takes a `Submit` (one call, or a batch with its schedule) and
queues what may start; `unstartable` says why a run never can (an unknown
tool, no backend, a quota's refusal, a capacity group missing or defined
with another limit).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import pipeline as _pipeline
from ..backends import Backend, Host
from ..models import ErrorCode, Status
from ..pipeline import BatchRun, Run, caller_cancelled
from ._batches import announce_groups, announce_start, schedule_batch
from ._capacity import Group, ToolGroup
from ._completion import Completion
from ._deadlock import would_deadlock
from ._messages import BudgetSpent, Cancel, Submit
from ._ticket import Ticket

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Admission", "refused_status", "unstartable"]

log = logging.getLogger("toolbus.actors")


def refused_status(code: ErrorCode) -> Status:
    """The status of a call refused before it started with `code`: a halted
    run's calls are `cancelled` (they were not wrong, their run stopped)."""
    return "cancelled" if code is ErrorCode.HALTED else "rejected"


def unstartable(run: Run, groups: Mapping[str, Group]) -> tuple[ErrorCode, str] | None:
    """Why `run` can never start (the code and message it is rejected with),
    or None: refused before submission (`Run.refusal`: an unknown tool, no
    backend, a quota), or a capacity group missing or defined with another limit."""
    if run.refusal is not None:
        # Known before submission (the executor's words: an unknown tool's
        # close matches, why no backend can run it, a quota's refusal).
        code, message = run.refusal
        return code, message
    if run.tool is None:
        return ErrorCode.TOOL_NOT_FOUND, f"Unknown tool '{run.call.name}'"
    if run.backend is None:
        return ErrorCode.TOOL_UNAVAILABLE, f"Tool '{run.call.name}' is unavailable: no backend"
    for name, limit in run.tool.group_limits.items():
        if groups[name].limit != limit:
            return ErrorCode.TOOL_UNAVAILABLE, (
                f"Tool '{run.call.name}' is unavailable: it defines capacity group "
                f"{name!r} with limit {limit}, and the executor has it with limit "
                f"{groups[name].limit}"
            )
    missing = [n for n in run.tool.groups if n not in groups] if run.tool.groups else ()
    if missing:
        return ErrorCode.TOOL_UNAVAILABLE, (
            f"Tool '{run.call.name}' is unavailable: no capacity group named "
            f"{missing[0]!r} (Executor(groups=...) defines them)"
        )
    return None


class Admission(Completion):
    """The scheduler's admission of submitted runs (a part of `Scheduler`)."""

    services: _pipeline.Services
    host: Host
    pools: dict[int, ToolGroup]
    groups: dict[str, Group]

    _pending: deque[Any]

    if TYPE_CHECKING:

        def _dispatch(self, run: Run) -> None: ...

    def _on_submit(self, msg: Submit) -> None:
        b = msg.batch
        if b is not None:
            b.runs = list(msg.runs)
            b.remaining = len(b.runs)
            # Counted once its books begin, no call between (a signal lands
            # where a call returns): see `_submission_interrupted`.
            self.counters["batches"] += 1
            # Its own limit, as a group, only where it can bind: a batch no
            # larger than its limit never waits for it.
            if b.limit < b.remaining:
                b.sv_group = Group(f"batch:{b.batch_id}", b.limit)
        if self.services.halts.active or (b is not None and b.halted is not None):
            self._halted_at_submission(msg.runs, b)
        counters = self.counters
        for run in msg.runs:
            run.ticket = Ticket()
            counters["submitted"] += 1  # with its ticket, no call between (as above)
            if run.parent is not None:
                self._nested_in(run.parent, run)
            if run.due is not None and run.refusal is None:
                # Its whole-call deadline, wherever it is by then.
                run.ticket.due_timer = self.timers.schedule(
                    run.due - time.monotonic(), self._tell, BudgetSpent(run)
                )
            tool = run.tool
            if tool is not None:
                pool = self.pools.get(id(tool))
                if pool is None or pool.tool is not tool:
                    pool = self._pool(run)
                run.ticket.pool = pool
                if tool.groups or tool.group_limits:
                    if tool.group_limits:
                        self._learn_groups(tool)
                    named = tuple(self.groups[n] for n in tool.groups if n in self.groups)
                    run.ticket.groups = (
                        (pool, *named) if b is None or b.sv_group is None
                        else (b.sv_group, pool, *named)
                    )  # fmt: skip
                else:  # (the common tool: no named groups to look up)
                    run.ticket.groups = (
                        (pool,) if b is None or b.sv_group is None else (b.sv_group, pool)
                    )
                    # No quota's refusal and a backend too: nothing for
                    # `unstartable` to find (the common call, without its look).
                    run.ticket.plain = run.refusal is None and run.backend is not None
                backend = run.backend
                if backend is not None and id(backend) not in self.backends:
                    try:
                        self._started(backend)
                    except Exception as e:
                        log.error("backend %r could not start: %s", backend.name, e)
        # Open once each has its ticket: whatever reads the open runs (a
        # status, a cancel, close) reads their tickets too.
        self.runs_open.update(msg.runs)
        if self.closed:
            for run in msg.runs:
                self._finish_here(run, "cancelled", ErrorCode.CANCELLED, "the executor is closed")
            return
        if b is None:
            run = msg.runs[0]
            if run.decided is not None:
                self._end_decided(run)
                return
            if run.ticket.plain:  # it may start
                slots = self.slots
                if (
                    not slots.ready.size
                    and not self._pending
                    and run.parent is None
                    and not slots.listen
                    and not self.budget.waiting.size
                    and slots.has_room_for(run)
                ):
                    # Nothing queued, nothing posted behind it (a higher
                    # priority, its cancel), room for it, nobody told it queued:
                    # the pump would start it first and at once, so it starts here.
                    self._dispatch(run)
                    return
                slots.enqueue(run, front=run.parent is not None)
                return
            refused = unstartable(run, self.groups)
            if refused is None:
                self.slots.enqueue(run, front=run.parent is not None)
            else:
                self._finish_here(run, refused_status(refused[0]), *refused)
            return
        announce_start(b, self.emitter)
        b.schedule = schedule_batch(b, self.services.max_argument_bytes)
        eligible = b.schedule.open()
        b.sv_busy += 1  # every call may be rejected here: the batch ends after this
        try:
            for run in b.runs:
                if run.decided is not None:
                    self._end_decided(run)
                    continue
                if run.ticket.plain:
                    continue  # it may start
                refused = unstartable(run, self.groups)
                if refused is not None:
                    self._finish_here(run, refused_status(refused[0]), *refused)
            announce_groups(b, self.emitter)
            slots = self.slots
            # As a lone call does: while nothing is queued or posted behind
            # them, calls that have room start in the batch's order, here;
            # from the first that has none, they queue (in order) for the pump.
            # (Dispatching inside the batch's books keeps it open meanwhile.)
            calm = not (slots.listen or self._pending or self.budget.waiting.size)
            for k, i in enumerate(eligible):
                run = b.runs[i]
                t = run.ticket
                if (
                    calm
                    and t.plain
                    and not t.closed
                    and not slots.ready.size
                    and run.parent is None
                    and slots.has_room_for(run)  # (the batch's group and the tool's)
                ):
                    try:
                        self._dispatch(run)
                    except BaseException:
                        # What a backend let through (`_dispatch` contains its
                        # Exceptions): the calls after this one still queue
                        # for the pump, as they would have before it.
                        for j in eligible[k + 1 :]:
                            slots.enqueue(b.runs[j])
                        raise
                    calm = not self.budget.waiting.size  # (a sync call parked for a thread)
                    continue
                slots.enqueue(run)
        finally:
            self._done_with(b)

    def _on_cut_short(self, msg: Submit) -> None:
        """`SubmissionCutShort`: of its runs, those never admitted here end as
        a submission interrupted here does. Those admitted are left to their
        caller's give-up (`WaitGivenUp`), as any call handed on is."""
        fresh = tuple(r for r in msg.runs if r.ticket is None)
        if fresh:
            whole = len(fresh) == len(msg.runs)
            self._submission_interrupted(msg if whole else Submit(fresh, msg.batch))

    def _submission_interrupted(self, msg: Submit) -> None:
        """Its submitter was interrupted (Ctrl-C on the main thread) part way
        through admitting or dispatching `msg`: whatever each run got to, it
        ends `cancelled` now (the caller gets the interruption, and would
        otherwise find none of them open to give up). The thread cut short
        may have been handling another thread's submission, queued behind
        its own: those calls end so too, rather than be left half admitted."""
        counters = self.counters
        for run in msg.runs:
            if run.ticket is None:  # not counted either (see `_on_submit`)
                run.ticket = Ticket()
                counters["submitted"] += 1
        self.runs_open.update(r for r in msg.runs if not r.ticket.closed)
        b = msg.batch
        if b is not None and b.remaining == 0 and not any(r.ticket.closed for r in msg.runs):
            b.runs, b.remaining = list(msg.runs), len(msg.runs)  # (its books, not begun)
            counters["batches"] += 1
        for run in msg.runs:
            self._cancel_run(
                run, ErrorCode.CANCELLED, "its submission was interrupted", only_unstarted=False
            )

    def _halted_at_submission(self, runs: tuple[Run, ...], b: BatchRun | None) -> None:
        """Refuse the runs of an agent run (or batch) halted since the
        executor planned them (`HALTED`): a halt that came meanwhile saw none
        of them open."""
        halts = self.services.halts
        for run in runs:
            if run.refusal is None and run.decided is None:
                why = b.halted if b is not None and b.halted is not None else None
                why = why or halts.reason(run.agent_run)
                if why is not None:
                    run.refuse(ErrorCode.HALTED, _pipeline.halted_text(why))

    def _nested_in(self, parent: Run, run: Run) -> None:
        """`run` was made by `parent`'s tool or hooks: it ends when `parent`
        is cancelled (`Completion._closed_run`), or now if it already was
        (its tool, let go, made a call of its own)."""
        pt = parent.ticket
        if pt is None:
            return
        if pt.closed:
            if parent.result is not None and parent.result.status == "cancelled":
                # Behind this submission in the queue: handled as soon as it is.
                self.post(Cancel(None, run, ErrorCode.CANCELLED, caller_cancelled(parent)))
            return
        nested = pt.nested
        if nested is None:
            pt.nested = [run]
            return
        if len(nested) >= 64:  # a long-lived caller: forget those that ended
            nested[:] = [r for r in nested if not r.ticket.closed]
        nested.append(run)

    def _end_decided(self, run: Run) -> None:
        """End a run whose result was decided before it was submitted
        (`Run.decided`: a durable engine's record): with that result, at once.
        It takes no capacity and waits for no call of its batch: it is over."""
        _pipeline.end_decided(run, self.services)
        self._closed_run(run)

    def _learn_groups(self, tool: Tool) -> None:
        """Make the groups a tool registered after the executor defines itself
        (`Tool.group_limits`); a conflicting limit is refused by `unstartable`."""
        for name, limit in tool.group_limits.items():
            if name not in self.groups:
                self.groups[name] = Group(name, limit)

    def _nested_deadlock(self, run: Run, group: Group) -> str | None:
        if not would_deadlock(run, group, self.runs_open):
            return None
        return (
            f"Tool '{run.call.name}' was called from inside another call, and every slot "
            f"of {group.name!r} is held by calls that wait, directly or through calls of "
            "their own, for that call: waiting would deadlock"
        )

    def _pool(self, run: Run) -> ToolGroup:
        """The capacity group of `run`'s tool, made at its first call."""
        tool = run.tool
        assert tool is not None
        pool = self.pools.get(id(tool))
        if pool is None or pool.tool is not tool:
            pool = self.pools[id(tool)] = ToolGroup(tool)
            # A backend with a fixed number of workers (a process pool): calls
            # beyond it wait here, in the queue, not on their deadline's clock.
            capacity = getattr(run.backend, "capacity", None)
            if capacity is not None:
                size = capacity(tool)
                pool.limit = size if pool.limit is None else min(pool.limit, size)
        return pool

    def _started(self, backend: Backend) -> None:
        if id(backend) in self.backends:
            return
        # Raises if the backend serves another executor; the call that
        # brought it gets that as its result (see _dispatch).
        backend.start(self.host)
        self.backends[id(backend)] = backend
        if backend.uses_threads:
            self.budget.backends.append(backend)
