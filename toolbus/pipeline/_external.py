"""An external tool's call: never run here, its result supplied from outside.

Its call ends `deferred` (`INPUT_REQUIRED`) with an `ExternalRequest` (its
tool, its masked arguments, its call id, the digest of its exact arguments
and the executor's MAC), unless it comes with a decision on that request:
an answer (`executor.answer(request, output)`) ends it with that output,
checked against the tool's output schema; a denial refuses it; any other
leaves it waiting. The other way to supply the result,
`executor.complete(request, output)`, needs no resubmission of the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..approvals import (
    ApprovalDecision,
    ExternalRequest,
    digest_matches,
    external_digest,
    request_mac,
)
from ..models import ErrorCode, ToolResult
from ._decisions import judge
from ._make import make_result

if TYPE_CHECKING:
    from ._run import Run
    from ._services import Services

__all__ = ["external_result", "waiting_text"]


def waiting_text(tool: str) -> str:
    """What the model reads for an external call not answered yet."""
    return f"Tool '{tool}' is answered outside toolbus: its result has not been supplied yet"


def external_result(run: Run, svc: Services) -> ToolResult:
    """The end of an external tool's call: its answer, its refusal, or its request."""
    origin = run.origin
    digest = external_digest(origin.name, origin.arguments, secret=svc.key_secret)
    decision = run.approval
    if (
        isinstance(decision, ApprovalDecision)
        and digest_matches(decision.digest, digest)
        and (decision.answered or decision.approved is not True)
    ):
        ended = judge(run, decision, svc)
        if ended is not None:
            return ended
    request = ExternalRequest(
        call_id=run.call.id, tool=run.call.name, arguments_masked=run.masked, digest=digest
    )
    request = request.model_copy(update={"mac": request_mac(request, svc.key_secret)})
    result = make_result(
        run,
        "deferred",
        error=waiting_text(run.call.name),
        code=ErrorCode.INPUT_REQUIRED,
        attempts=0,
    )
    return result.model_copy(update={"approval_request": request})
