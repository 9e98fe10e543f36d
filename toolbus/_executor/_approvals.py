"""What a person's approval of a call covers: the steps of that call.

A `toolbus.tools.sequence` runs its steps as calls of its own executor. When a
person approved the sequence's call (its exact arguments), they approved what
it does, so a step's own `requires_approval` is not asked again
(toolbus/tools/_sequence.py says why that is safe). The decisions themselves,
their checks and digests are `toolbus.approvals`.
"""

from __future__ import annotations

from ..approvals import ApprovalDecision, arguments_digest, digest_matches
from ..pipeline import Run
from ..policies import requires_approval

__all__ = ["approved_by_caller", "waive_covered_approvals"]


def waive_covered_approvals(step: Run, caller: Run, secret: bytes) -> None:
    """Drop the `requires_approval` policies of `step` (a step of `caller`'s
    tool) when a person's approval of `caller` covers it."""
    if step.policies and approved_by_caller(caller, secret):
        step.waive(requires_approval)


def approved_by_caller(parent: Run, secret: bytes) -> bool:
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
        if isinstance(decision, ApprovalDecision) and decision.approved is True:
            origin = run.origin
            digest = arguments_digest(origin.name, origin.arguments, secret=secret)
            if digest_matches(decision.digest, digest):
                return True
        run = run.parent if run.shares_slot else None  # up through steps only
    return False
