"""How a run ends, and what its end changes in its batch.

Every run the supervisor closes goes through `_closed_run`: its slot and timer
go, its caller is woken, and its batch's books move on: the calls its end lets
start are queued (the batch's schedule: where a batch's calls are ordered),
the calls that waited for a deferred one end, a stop on error cancels the rest.
Also here: a result the supervisor makes itself (`_finish_here`), letting go
of a job given up (`_detach`), cancelling a call or a batch (`Cancel`), and
cancelling everything when the executor closes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import pipeline as _pipeline
from ..backends import Job
from ..bus import _signals as sig
from ..bus._events import RunHalted
from ..models import ErrorCode, Status, ToolResult
from ..pipeline import SUPERVISOR, BatchRun, Run, caller_cancelled
from ._batches import announce_groups, finish_batch
from ._deadlines import Deadlines
from ._messages import Cancel, CancelWhere, Close, HaltRun, WaitGivenUp
from ._ticket import PARKED

if TYPE_CHECKING:
    from ..backends import Backend

__all__ = ["Completion"]

log = logging.getLogger("toolbus.actors")


def _submitted(run: Run) -> int:
    return run.token  # (unique, and rising with each run made)


class Completion(Deadlines):
    """The scheduler's handling of runs that end (a part of `Scheduler`)."""

    closed: bool
    stopped_backends: set[int]
    runs_open: set[Run]
    backends: dict[int, Backend]
    given_up: int
    blocked: int  # (Backpressure's: producers waiting for room)
    room_seen: tuple[int, ...] | None

    def _finish_here(self, run: Run, status: Status, code: ErrorCode, message: str) -> None:
        """Finish a run with a result made by the supervisor itself (no user code)."""
        _pipeline.end_call(run, self.services, status, code, message)
        self._closed_run(run)

    def _closed_run(self, run: Run) -> None:
        t = run.ticket
        if t.closed:
            return
        # Closed, counted and taken off its batch's count with no call in
        # between, where a signal's exception could land: what follows may be
        # done again (`_mend.py`), these may not. It leaves `runs_open` last:
        # one closed but still there was cut short, and is mended.
        t.closed = True
        result = run.result
        if result is not None:
            self.counters[result.status] += 1
        b = run.batch
        if b is not None:
            b.remaining -= 1
        if t.timer is not None:  # (closed: a timer message still queued is stale)
            self.timers.cancel(t.timer)
            t.timer = None
        if t.due_timer is not None:
            self.timers.cancel(t.due_timer)
            t.due_timer = None
        if t.queued:
            # Still in a queue (counted dead there); from the ready queue, it may
            # have been let out for room it now leaves.
            self.slots.closed(run)
            if t.queued == PARKED and t.waiting_on is None:
                self.budget.waiting.dead += 1  # (the thread budget's: out at its next look)
            elif self.blocked:
                # Leaving the ready queue, it may make room in a bounded group
                # it was bound for, which the pump's look does not see (see
                # `Backpressure._bounded`): the producers look again.
                self.room_seen = None
        else:
            self.slots.release(run)
        if result is not None and run.waiter is not None:
            # Woken last, after the books: stats() agrees with the result.
            run.waiter.release(result)
        if t.nested is not None:
            self._end_nested(run)
        if b is None:
            self.runs_open.discard(run)
            return
        # Closing this run may close others of the batch (the calls a deferred
        # one holds back, the rest after a stop_on_error): the last of those
        # must not end the batch, and so release its caller, while this frame
        # still reads the batch. `_done_with` ends it once the outermost is done.
        b.sv_busy += 1
        try:
            self._batch_books(b, run, result)
        except BaseException:  # (a signal's: mended, see `_mend.py`)
            t.books_cut = True
            raise
        finally:
            b.sv_busy -= 1  # `_done_with`, inlined: this runs for every call of a batch
            if b.remaining == 0 and b.sv_busy == 0:
                finish_batch(b, self.emitter)
        self.runs_open.discard(run)

    def _end_nested(self, run: Run) -> None:
        """`run` ended: if it was cancelled, so are the calls its tool or
        hooks made that are still open (a sync tool let go, say, still
        waiting for one). Queued, each is handled once this message is.
        Another end needs nothing: its deadline bounds them already."""
        nested, run.ticket.nested = run.ticket.nested, None
        result = run.result
        if nested is None or result is None or result.status != "cancelled":
            return
        why = caller_cancelled(run)
        for r in nested:
            if not r.ticket.closed:
                self.post(Cancel(None, r, ErrorCode.CANCELLED, why))

    def _done_with(self, b: BatchRun) -> None:
        """The supervisor is done with a part of `b`'s books: if that was the
        last part and every call has its result, the batch ends."""
        b.sv_busy -= 1
        if b.remaining == 0 and b.sv_busy == 0:
            finish_batch(b, self.emitter)

    def _batch_books(self, b: BatchRun, run: Run, result: ToolResult | None) -> None:
        """What a closed run changes in its batch: its schedule, the calls
        that wait for it, a stop on error."""
        if b.schedule is not None:
            if result is not None and result.status == "deferred":
                self._abort_waiters(b, run)
            if result is not None and result.status not in ("ok", "deferred"):
                g = b.schedule.group_of(run.index).index
                b.group_failures[g] = b.group_failures.get(g, 0) + 1
            for i in b.schedule.finish(run.index):
                self.slots.enqueue(b.runs[i])
            if b.schedule.transitions:  # (most calls open or close no group)
                announce_groups(b, self.emitter)
            if (
                b.stop_on_error
                and not b.stopped
                and result is not None
                and result.status not in ("ok", "deferred")
            ):
                b.stopped = True
                reason = (
                    f"batch stopped: call {run.call.id} ('{run.call.name}') ended {result.status}"
                )
                code = ErrorCode.ABORTED
                if b.halted is not None:  # its run was halted: what ends the rest is the halt
                    code, reason = ErrorCode.HALTED, _pipeline.halted_text(b.halted)
                for other in b.runs:
                    if other.decided is None:  # (a decided one ends as it was decided)
                        self._cancel_run(
                            other, code, reason, only_unstarted=code is ErrorCode.ABORTED
                        )

    def _abort_waiters(self, b: BatchRun, run: Run) -> None:
        """A deferred call never finished, as far as order goes: the later calls
        of its batch that would have waited for it end now, naming it."""
        assert b.schedule is not None
        reason = (
            f"not run: it had to wait for call {run.call.id} ('{run.call.name}'), "
            "which is deferred until approved"
        )
        for i in b.schedule.waiters_of(run.index):
            if b.runs[i].decided is None:  # (a decided one ends as it was decided)
                self._cancel_run(b.runs[i], ErrorCode.ABORTED, reason, only_unstarted=True)

    def _detach(self, run: Run) -> None:
        """`run`'s current job is given up: its backend lets it go (a stuck thread
        counts as abandoned until it returns)."""
        backend = run.backend
        if backend is None or not run.ticket.slot:
            return
        self.given_up += 1
        try:
            before = backend.abandoned()
            backend.cancel(Job(run, run.attempt))
            if backend.abandoned() > before:
                self.counters["abandoned_total"] += 1
        except Exception as e:  # a custom backend's bug must not lose calls
            log.error("backend %r failed to let a job go: %s", backend.name, e)

    # -- cancellation ----------------------------------------------------------------

    def _on_cancel(self, msg: Cancel) -> None:
        runs = msg.batch.runs if msg.batch is not None else [msg.run] if msg.run else []
        for run in runs:
            self._cancel_run(run, msg.code, msg.reason, only_unstarted=False)

    def _on_cancel_where(self, msg: CancelWhere) -> int:
        """End every unfinished run that matches; how many there were (a
        model may repeat a call id: each call of it is cancelled)."""
        matched = [
            run
            for run in self.runs_open
            if (msg.call_id is None or run.call.id == msg.call_id)
            and (msg.batch_id is None or run.batch_id == msg.batch_id)
            and not run.completed
        ]
        for run in matched:
            self._cancel_run(run, ErrorCode.CANCELLED, msg.reason, only_unstarted=False)
        return len(matched)

    def _on_wait_given_up(self, msg: WaitGivenUp) -> None:
        """End the unfinished runs its caller waited for (see `WaitGivenUp`)."""
        w = msg.waiter
        waited = [
            r
            for r in self.runs_open
            if r.waiter is w or (r.batch is not None and r.batch.waiter is w)
        ]
        waited.sort(key=_submitted)  # in the order they were submitted, as a batch's are
        for run in waited:
            self._cancel_run(run, ErrorCode.CANCELLED, msg.reason, only_unstarted=False)

    def _on_halt(self, msg: HaltRun) -> int:
        """End every unfinished run of the halted agent run or batch but the
        one that halted it; announce the halt (once per run); how many ended."""
        b = msg.batch
        if b is not None and b.halted is None:
            b.halted = msg.reason  # (its calls not yet submitted end so too)
        matched = [
            run
            for run in self.runs_open
            if run is not msg.by
            and not run.completed
            and (
                (msg.agent_run is not None and run.agent_run == msg.agent_run)
                or (b is not None and run.batch is b)
            )
        ]
        for run in matched:  # first: a stop_on_error set off by one of them halts the rest
            if run.batch is not None and run.batch.halted is None:
                run.batch.halted = msg.reason
        text = _pipeline.halted_text(msg.reason)
        for run in matched:
            self._cancel_run(run, ErrorCode.HALTED, text, only_unstarted=False)
        if msg.fresh and self.emitter.wants(sig.RUN_HALTED):
            by = msg.by
            self.emitter.emit(
                sig.RUN_HALTED,
                RunHalted(
                    msg.agent_run,
                    b.batch_id if b is not None else None,
                    msg.reason,  # (scrubbed by whoever decided it, with its call's secrets)
                    by.call.id if by is not None else None,
                    len(matched),
                ),
            )
        return len(matched)

    def _cancel_run(self, run: Run, code: ErrorCode, reason: str, *, only_unstarted: bool) -> None:
        if run.ticket.closed or run.completed:
            return
        if run.ticket.slot:  # an attempt, or what follows its timeout, is under way
            if only_unstarted:
                return
            if not run.try_settle(run.attempt, SUPERVISOR):
                # A worker holds the outcome (in its hooks): honour the cancel
                # when it reports, instead of retrying.
                run.ticket.cancel = (code, reason)
                return
            run.interrupt("closed" if self.closed else "cancelled")
            self._detach(run)
        elif only_unstarted and run.attempt > 0:
            return  # started, now backing off before a retry: let it go on
        self._finish_here(run, "cancelled", code, reason)

    # -- shutdown ----------------------------------------------------------------------

    def _on_close(self, msg: Close) -> bool:
        # Again and again if need be (the supervisor's stop asks too): nothing
        # is left to do once it is done, and one cut short (Ctrl-C on the
        # closing thread) goes on, as `Executor.close` resumes, where it stopped.
        self.closed = True
        for run in list(self.runs_open):
            self._cancel_run(run, ErrorCode.CANCELLED, msg.reason, only_unstarted=False)
        for run in list(self.runs_open):
            # A worker holds the outcome but is still in its hooks: do not wait.
            self._detach(run)
            self._finish_here(run, "cancelled", ErrorCode.CANCELLED, msg.reason)
        for key, backend in self.backends.items():
            if key in self.stopped_backends:
                continue
            try:
                backend.stop()
            except Exception as e:
                log.error("backend %r failed to stop: %s", backend.name, e)
            self.stopped_backends.add(key)  # (after: one cut short is stopped again)
        return True
