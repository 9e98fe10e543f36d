"""A call's terminal result: made, scrubbed of secrets, told to its policies,
claimed once and announced (`finish`)."""

from __future__ import annotations

from ..approvals import InputRequest
from ..bus import _signals as sig
from ..bus._events import (
    CallCancelled,
    CallFinished,
    CallRejected,
    RetryExhausted,
    RetrySuccess,
)
from ..masking import EMPTY_SCRUBBER, Scrubber, cleaned_result
from ..models import ErrorCode, Status, ToolResult
from ..scanning import ContentScanner, Finding, describe
from ._held import held_limit
from ._make import log_contained, make_result
from ._masked_arguments import mask_decided
from ._policies import tell_results
from ._run import Run
from ._services import (
    DONE,
    LOST,
    Outcome,
    Services,
)


def _scrubbed(scrubber: Scrubber, result: ToolResult) -> ToolResult:
    return cleaned_result(scrubber, result) if scrubber else result


def _scanned(
    run: Run, result: ToolResult, scrubber: Scrubber, scanner: ContentScanner
) -> tuple[ToolResult, ToolResult]:
    """What is published of `result` and what the model gets, both scrubbed
    of known secrets and the first scanned (the model's too if the scanner
    says so); if the scanner blocks something in a result the tool made, a
    `rejected` result (`CONTENT_BLOCKED`) that withholds it, for both."""
    known = _scrubbed(scrubber.known(), result)
    try:
        published, found = scanner.checked(known)
    except Exception:
        # The scanner failed on some part (a structure too deep for it): that
        # part is withheld, or, where something may be blocked, all of it.
        published, found = _scrubbed(scrubber, result), None
        if scanner.blocks:
            found = Finding("scanner-failed", "secret", 0, 0, "block")
    if found is not None and result.attempts == 0 and result.status != "ok":
        # toolbus's own answer about a call that never ran (an unknown tool's
        # name, a denial's reason, a deferral that must stay answerable): the
        # finding is redacted, not withheld, and the answer stands.
        found = None
    if found is not None:
        blocked = make_result(
            run,
            "rejected",
            error=(
                f"Tool '{run.call.name}' ran, but its result holds {describe(found)}, which "
                "this executor's content scanner blocks: the result is withheld"
            ),
            code=ErrorCode.CONTENT_BLOCKED,
            attempts=result.attempts,
        )
        blocked = _scrubbed(scrubber, blocked)
        return blocked, blocked
    return published, published if scanner.to_model else known


def _question_published(result: ToolResult, scrubber: Scrubber) -> ToolResult:
    """A deferred call's question as published: its text, schema and state
    scrubbed and scanned, as the call's error is (a state changed so no longer
    answers it: the caller answers from its own copy, which keeps it)."""
    request = result.approval_request
    assert isinstance(request, InputRequest)
    try:
        shown = request.model_copy(
            update={
                "message": scrubber.text(request.message),
                "requested_schema": scrubber.value(request.requested_schema),
                "state": scrubber.text(request.state),
            }
        )
    except Exception:  # a schema too deep to scan: none of it is shown
        shown = request.model_copy(update={"requested_schema": None, "state": ""})
    return result.model_copy(update={"approval_request": shown})


def finish(run: Run, result: ToolResult, svc: Services) -> bool:
    """Make `result` the call's terminal result if it has none yet; announce it.

    Returns False (and announces nothing) when someone else finished the call.
    """
    # A deferred call waits where its request is held: room is taken for it
    # first, and a call there is none for ends saying so (never deferred
    # with a request nobody holds).
    reserved = False
    request = result.approval_request
    if result.status == "deferred" and request is not None:
        freed = (run.judged, run.call.id) if run.judged is not None else None
        reserved = svc.pending.reserve((request.digest, request.call_id), freed)
        if not reserved:
            result = _unheld(result)
    try:
        if run.completed_late and "completed_late" not in result.metadata:
            # The model must not redo a side effect that did happen, only too late.
            result = result.model_copy(
                update={"metadata": {**result.metadata, "completed_late": True}}
            )
        scrubber = run.scrubber
        # What is published and journaled, where it is not what the model gets (a
        # content scanner that leaves the model's copy alone: `to_model=False`).
        published: ToolResult | None = None
        if scrubber is not EMPTY_SCRUBBER:
            if run.shares_slot:  # a step: its sequence hands the next step what its tool gave
                run.unscrubbed = result
            scanner = scrubber.scanner
            if scanner is None:
                result = _scrubbed(scrubber, result)
            else:
                published, result = _scanned(run, result, scrubber, scanner)
                if published is result:
                    published = None
                scrubber = scrubber.for_model()
        if not run.try_complete(result):
            return False
        if run.remote_record is not None and (taken := run.take_remote_record()) is not None:
            taken[0].restore(taken[1])  # ended before its tool picked the work up
        if run.consulted or run.delayed_by is not None:
            # Ours now: the policies that let the call through see how it ended
            # (and a spill or cache may hand back another result to publish).
            told = tell_results(
                run,
                result,
                svc,
                None if published is None else lambda r: _scrubbed(run.scrubber, r),
            )
            if published is not None and told is not result:
                published = _scrubbed(run.scrubber, told)
            if run.shares_slot and told is not result:
                run.unscrubbed = told
            result = run.result = _scrubbed(scrubber, told)
        if published is not None:
            result = published  # from here on, `result` is what is published
        if isinstance(result.approval_request, InputRequest) and run.scrubber:
            result = _question_published(result, run.scrubber)
        if run.journaled:
            try:
                svc.journal.ended(run, result)  # type: ignore[union-attr]
            except Exception as e:  # the result stands; the journal's failure is logged
                log_contained(f"journal write failed for call {run.call.id}", e, run.scrubber)
        if run.judged is not None:
            svc.pending.release(run.judged, run.call.id)
        if result.status == "deferred" and result.approval_request is not None:
            svc.pending.hold(result.approval_request, run.agent_run, reserved=reserved)
            reserved = False
        em = svc.emitter
        bid = run.batch.batch_id if run.batch is not None else None
        att, name = result.attempts, run.call.name
        pid = run.parent_call_id
        if att > 1:
            if result.status == "ok":
                if em.listening[sig.RETRY_SUCCESS]:
                    em.emit(
                        sig.RETRY_SUCCESS,
                        RetrySuccess(
                            run.call.id, name, bid, att, att, parent_call_id=pid, _run=run.token
                        ),
                    )
            elif result.status in ("error", "timeout") and em.listening[sig.RETRY_EXHAUSTED]:
                em.emit(
                    sig.RETRY_EXHAUSTED,
                    RetryExhausted(
                        run.call.id,
                        name,
                        bid,
                        att,
                        att,
                        result.error or "",
                        parent_call_id=pid,
                        _run=run.token,
                    ),
                )
        if result.status == "rejected" and em.listening[sig.REJECTED]:
            em.emit(
                sig.REJECTED,
                CallRejected(
                    run.call.id,
                    name,
                    bid,
                    att,
                    result.error or "",
                    result.error_code or ErrorCode.TOOL_ERROR,
                    run.masked,
                    parent_call_id=pid,
                    _run=run.token,
                ),
            )
        elif result.status == "cancelled" and em.listening[sig.CANCELLED]:
            em.emit(
                sig.CANCELLED,
                CallCancelled(
                    run.call.id,
                    name,
                    bid,
                    att,
                    result.error_code or ErrorCode.CANCELLED,
                    result.error or "",
                    parent_call_id=pid,
                    _run=run.token,
                ),
            )
        if em.listening[sig.FINISHED]:
            em.emit_later(  # built on a delivery thread: the caller waits for this one
                sig.FINISHED,
                CallFinished,
                (run.call.id, name, bid, att, result, run.masked),
                pid,
                run.token,
            )
        # The caller is woken by whoever closes the run's books (the scheduler),
        # so its stats already count the call when `execute` returns.
        return True
    finally:
        if reserved:  # (not held after all: ended otherwise, or by someone else)
            svc.pending.unreserve()


def _unheld(result: ToolResult) -> ToolResult:
    """A deferred `result` no room is left to hold the request of: `rejected`,
    `OVERLOADED`, saying why (see `_held.py`)."""
    text = (
        f"Tool '{result.name}' cannot wait for a decision: {held_limit()} requests already "
        "wait for one on this executor, the most it holds without a journal (decide some "
        "of executor.pending(), or give the executor a journal)"
    )
    asked = result.error
    return result.model_copy(
        update={
            "status": "rejected",
            "error": f"{text}. It needs one: {asked}" if asked else text,
            "error_code": ErrorCode.OVERLOADED,
            "approval_request": None,
        }
    )


def end_decided(run: Run, svc: Services) -> Outcome:
    """End the call with the result decided before it was submitted
    (`Run.decided`, its tool not run, its arguments masked by default for its
    events): DONE, or LOST if it had a result. Runs no user code."""
    decided = run.decided
    assert decided is not None
    mask_decided(run, svc)
    if decided.call_id != run.call.id:
        decided = decided.model_copy(update={"call_id": run.call.id})
    return DONE if finish(run, decided, svc) else LOST


def end_call(run: Run, svc: Services, status: Status, code: ErrorCode, message: str) -> Outcome:
    """End the call with a result made here, no user code involved (a timeout,
    a cancellation, an internal error): DONE, or LOST if it had a result."""
    result = make_result(run, status, error=message, code=code)
    return DONE if finish(run, result, svc) else LOST
