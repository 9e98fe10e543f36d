"""What a decision on a call's approval does, once its digest names the call.

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

from ..approvals import ApprovalDecision
from ..decisions import must_be_minted, verify
from ..models import ErrorCode, ToolResult
from ..tools import normalize_output
from ..tools._schemas import output_problem
from ._make import make_result

if TYPE_CHECKING:
    from ._run import Run
    from ._services import Services

__all__ = ["judge", "spend", "used_up"]


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
        return _refused(
            run,
            ErrorCode.DECISION_EXPIRED,
            f"Tool '{name}' was not run: its approval expired; ask for a new one",
        )
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
        if not svc.used_decisions.use(decision.decision_id, decision.expires_at):
            return used_up(run)
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


def spend(run: Run, svc: Services) -> bool:
    """Spend the single-use decision `run` runs under, now that it runs:
    False if it was spent already (by another call, thread or process)."""
    decision, run.spend = run.spend, None
    if decision is None or not isinstance(decision.decision_id, str):
        return decision is None
    return svc.used_decisions.use(decision.decision_id, decision.expires_at)


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
