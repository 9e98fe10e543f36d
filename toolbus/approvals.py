"""Approvals: a call that waits for a person's decision, bound to its exact arguments.

A tool guarded by `toolbus.policies.requires_approval` does not run at first:
its call ends `deferred` (code `APPROVAL_REQUIRED`) with an `ApprovalRequest`.
Whoever decides answers with `request.approve()` or `request.deny(reason)`, and
the caller submits the same call again with that `ApprovalDecision`. The
decision names the SHA-256 digest of the arguments the model sent, so it
approves exactly those: a decision for other arguments, a missing one or None
never runs the call (the pydantic-ai#8060 case).

Pure data, no threads: the models are frozen and serialisable, so a request can
be shown in a UI, stored, and answered from another process.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict

from . import _json

__all__ = ["ApprovalDecision", "ApprovalRequest", "arguments_digest"]


class ApprovalDecision(BaseModel):
    """A decision on one request: pass it back with `execute(call, approval=...)`
    or `execute_batch(calls, approvals={call_id: ...})`."""

    model_config = ConfigDict(frozen=True)

    digest: str
    approved: bool
    reason: str | None = None


class ApprovalRequest(BaseModel):
    """What a deferred call asks for: `arguments_masked` is what a person
    reviews (secrets masked); `digest` binds the decision to the arguments."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    arguments_masked: Any = None
    digest: str

    def approve(self) -> ApprovalDecision:
        """Approve these arguments: the call runs when submitted with this decision."""
        return ApprovalDecision(digest=self.digest, approved=True)

    def deny(self, reason: str = "denied") -> ApprovalDecision:
        """Deny it: the call ends `rejected` (`TOOL_NOT_ALLOWED`) with `reason`."""
        return ApprovalDecision(digest=self.digest, approved=False, reason=reason)


def arguments_digest(tool: str, arguments: dict[str, Any] | str) -> str:
    """SHA-256 (hex) of the tool's name and its canonical arguments, as the
    model sent them: a JSON text is parsed first, so spacing and key order do
    not matter."""
    data = tool.encode("utf-8", "surrogatepass") + b"\0" + _json.canonical(arguments)
    return hashlib.sha256(data).hexdigest()
