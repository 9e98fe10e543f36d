"""A policy's own result (`Respond`, an `on_result` replacement) as toolbus
would have made it: JSON data, a failure with a code and a text, a `deferred`
one with its approval request; or what is wrong with it."""

from __future__ import annotations

from typing import Any

from ..models import ErrorCode, ToolResult
from ..policies._protocol import policy_name
from ..tools import error_text, normalize_output

__all__ = ["well_formed"]


# The code a policy's result without one gets: what toolbus itself gives a
# result of that status when nothing more precise is known.
_DEFAULT_CODES: dict[str, ErrorCode] = {
    "error": ErrorCode.TOOL_ERROR,
    "timeout": ErrorCode.EXECUTION_TIMEOUT,
    "cancelled": ErrorCode.CANCELLED,
    "rejected": ErrorCode.TOOL_UNAVAILABLE,
    "deferred": ErrorCode.APPROVAL_REQUIRED,
}


def well_formed(result: ToolResult, tool: str, policy: Any) -> ToolResult | str:
    """A policy's result (`Respond`, an `on_result` replacement) as toolbus would
    have made it; or what is wrong with it, when it cannot be mended.

    Whoever reads results relies on a failure having a code and a text, and
    on a `deferred` one carrying what to approve: a code or a text left out is
    filled in (naming the policy); a `deferred` result without an approval
    request (which no decision could ever run) is refused. Its output and
    metadata are made JSON data as a tool's output is (`normalize_output`: a
    set a list, a model its dump, each a copy of its own), or, when they cannot
    be (a cycle, an object), it is refused: whoever reads, formats or journals
    the result relies on that."""
    normalized = _normalized(result)
    if isinstance(normalized, str):
        return normalized
    result = normalized
    if result.status == "ok":
        return result
    if result.status == "deferred" and result.approval_request is None:
        return (
            "a `deferred` result without an approval request (only RequireApproval defers a call)"
        )
    update: dict[str, Any] = {}
    if result.error_code is None:
        update["error_code"] = _DEFAULT_CODES[result.status]
    if not result.error:
        update["error"] = (
            f"Tool '{tool}' ended {result.status}: so said its policy {policy_name(policy)}"
        )
    return result.model_copy(update=update) if update else result


def _normalized(result: ToolResult) -> ToolResult | str:
    """`result` with its output and metadata as JSON data; or why they cannot be."""
    try:
        output, attachments, metadata = normalize_output(result.output)
        if result.metadata:
            given, _, _ = normalize_output(result.metadata)
            if not isinstance(given, dict):
                raise TypeError("its metadata is not a dict")
            metadata = {**given, **metadata}
    except Exception as e:  # (OutputError: not JSON, a cycle, ...)
        return f"a result toolbus cannot send ({error_text(e)})"
    return result.model_copy(
        update={
            "output": output,
            "attachments": (*result.attachments, *attachments),
            "metadata": metadata,
        }
    )
