"""What a decision on a call's approval does: asked for (`approval`), judged
once its digest names the call (`judge`), an edit admitted again (`edited`).

`judge` reads it: one that must be minted (an edit, an answer, one that
expires or is single use) without this executor's MAC is refused
(`TOOL_NOT_ALLOWED`: forged, or another executor's); one past its
`expires_at`, or single use and used already, ends `DECISION_EXPIRED`; a
denial, `TOOL_NOT_ALLOWED` with its reason; an answer ends the call with its
output (the tool not run; checked against the tool's output schema); an
approval lets it go on, and an edit with other arguments, which the policy
step then admits again (`_policies.consult`: validated, authorized, masked
and published as any call's arguments are).

The single-use decisions used are remembered in `_held.py`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..approvals import (
    ApprovalDecision,
    ApprovalRequest,
    InputAnswer,
    arguments_digest,
    digest_matches,
    external_digest,
)
from ..decisions import must_be_minted, verify
from ..models import ErrorCode, ToolResult
from ..tools import normalize_output
from ..tools._schemas import output_problem
from ._admission import admit
from ._input import answer_for
from ._keys import derive_key
from ._make import make_result

if TYPE_CHECKING:
    from ._run import Run
    from ._services import Services, Steps

__all__ = ["EDITED", "approval", "edited", "judge", "spend", "used_up"]


def judge(run: Run, decision: ApprovalDecision, svc: Services) -> ToolResult | None:
    """What `decision` (its digest names `run`'s call) makes of the call: its
    end (refused, expired, denied, answered), or None: it goes on (edited,
    if the decision says so)."""
    name = run.call.name
    if (must_be_minted(decision) or decision.mac is not None) and not verify(
        decision, svc.key_secret
    ):
        return _refused(
            run,
            ErrorCode.TOOL_NOT_ALLOWED,
            f"Tool '{name}' was not run: its decision was not made by this executor "
            "(an edit, an answer, or one that expires or is single use must be)",
        )
    if decision.expires_at is not None and time.time() > decision.expires_at:
        return _expired(run)
    run.judged = decision.digest  # decided, whatever it decides: pending no more
    if decision.approved is not True:
        why = decision.reason or "denied"
        return _refused(run, ErrorCode.TOOL_NOT_ALLOWED, f"Tool '{name}' was not approved: {why}")
    if decision.single_use:
        if not isinstance(decision.decision_id, str):
            return used_up(run)
        if not decision.answered:
            # Spent when the call runs under it (`spend`), not when a later
            # policy, authorization or a replay leaves it unrun.
            run.spend = decision
            return None
        used = svc.used_decisions.use(decision.decision_id, decision.expires_at)
        if used is not True:
            return used_up(run) if used is False else _unrecorded(run)
    elif decision.expires_at is not None and not decision.answered:
        run.spend = decision  # its time checked again when the call runs
    if decision.answered:
        return _answered(run, decision)
    return None


def used_up(run: Run) -> ToolResult:
    """The end of a call that came with a single-use decision used already."""
    return _refused(
        run,
        ErrorCode.DECISION_EXPIRED,
        f"Tool '{run.call.name}' was not run: its approval was already used; ask for a new one",
    )


def spend(run: Run, svc: Services) -> ToolResult | None:
    """Check again the decision `run` runs under (one that expires or is
    single use), now that it runs, and spend it if single use: its refusal if
    it expired since it was judged (a call that waited on a policy or a
    queue) or was spent already (by another call, thread or process); None:
    it runs."""
    decision, run.spend = run.spend, None
    if decision is None:
        return None
    if decision.expires_at is not None and time.time() > decision.expires_at:
        run.judged = None  # (its request waits for a new decision, as when judged expired)
        return _expired(run)
    if not decision.single_use:
        return None
    if not isinstance(decision.decision_id, str):
        return used_up(run)
    used = svc.used_decisions.use(decision.decision_id, decision.expires_at)
    if used is None:
        return _unrecorded(run)
    return None if used else used_up(run)


def _unrecorded(run: Run) -> ToolResult:
    """The journal could not record the single-use decision's use: the call
    does not run, and the decision (and its request) stay as they were."""
    run.judged = None
    return _refused(
        run,
        ErrorCode.TOOL_UNAVAILABLE,
        f"Tool '{run.call.name}' was not run: the journal could not record the use of its "
        "single-use approval; try again",
    )


def _expired(run: Run) -> ToolResult:
    return _refused(
        run,
        ErrorCode.DECISION_EXPIRED,
        f"Tool '{run.call.name}' was not run: its approval expired; ask for a new one",
    )


def _answered(run: Run, decision: ApprovalDecision) -> ToolResult:
    tool = run.tool
    assert tool is not None
    problem = output_problem(tool.output_schema, decision.output)
    if problem is not None:
        return _refused(
            run,
            ErrorCode.INVALID_ARGUMENTS,
            f"Tool '{run.call.name}' was not answered: the answer does not fit its output "
            f"schema ({problem})",
        )
    output, attachments, _ = normalize_output(decision.output)
    meta: dict[str, Any] = {"decision": "answer"}
    if decision.decided_by is not None:
        meta["decided_by"] = decision.decided_by
    return make_result(run, "ok", output=output, attachments=attachments, metadata=meta, attempts=0)


def _refused(run: Run, code: ErrorCode, text: str) -> ToolResult:
    return make_result(run, "rejected", error=text, code=code, attempts=0)


# `approval`'s answer for a call approved with other arguments (an edit).
EDITED: Any = object()


def edited(run: Run, svc: Services) -> Steps:
    """The call approved with the decision's arguments instead: admitted again
    (pre-call hooks, authorization, masking, validation), so what runs is
    checked and published as any call is. Returns its refusal, or None."""
    decision = run.approval
    assert isinstance(decision, ApprovalDecision)
    assert decision.arguments is not None
    edited = decision.arguments
    run.call = run.call.with_arguments(dict(edited) if isinstance(edited, dict) else edited)
    run.admitted = False
    # Another edit is another operation: a derived key is the edited call's,
    # and a caller's key stands for the edit's arguments (the journal refuses
    # it for another edit, as for any key reused with other arguments).
    run.keyed = run.call.arguments
    run.key = derive_key(run.call, svc.key_secret)
    refused: ToolResult | None = yield from admit(run, svc)
    return refused


def approval(run: Run, reason: str, svc: Services) -> ToolResult | None:
    """None if the run carries an approval of exactly its arguments; else the
    denial (`rejected`) or the request (`deferred`)."""
    origin = run.origin
    # Keyed by the executor's secret: the request is published, and a plain
    # hash of its arguments would give away a secret of few possible values.
    digest = arguments_digest(origin.name, origin.arguments, secret=svc.key_secret)
    decision = run.approval
    if isinstance(decision, InputAnswer):
        # An answer to the question the approved call asked carries the approval on.
        answer = answer_for(run, svc.key_secret)
        if answer is not None and answer.covers_approval is True:
            return None
    elif (
        isinstance(decision, ApprovalDecision)
        and run.tool is not None
        and run.tool.external
        and (decision.answered or decision.approved is not True)
        and digest_matches(
            decision.digest, external_digest(origin.name, origin.arguments, secret=svc.key_secret)
        )
    ):
        # An answer (or a refusal) of an external tool's request: the tool is
        # never run, so this is all the approval it needs (`_external.py` judges it).
        return None
    elif isinstance(decision, ApprovalDecision) and digest_matches(decision.digest, digest):
        # (`approved is True` there: a decision made unvalidated, model_construct,
        # with approved="no" or 1 is not an approval.)
        ended = judge(run, decision, svc)
        if ended is not None:
            return ended
        return EDITED if decision.kind == "edit" else None
    request = ApprovalRequest(
        call_id=run.call.id, tool=run.call.name, arguments_masked=run.masked, digest=digest
    )
    text = f"Tool '{run.call.name}' needs approval before it runs"
    result = make_result(
        run,
        "deferred",
        error=f"{text}: {reason}" if reason else text,
        code=ErrorCode.APPROVAL_REQUIRED,
        attempts=0,
    )
    return result.model_copy(update={"approval_request": request})
