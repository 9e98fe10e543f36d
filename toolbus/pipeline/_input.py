"""A tool's question to a person, and the answer handed back to it.

An attempt that raised `InputRequired` ends its call `deferred`
(`INPUT_REQUIRED`) with an `InputRequest`; a call submitted again with that
request's `InputAnswer` hands the answer to the tool (`ToolContext.answer`)
once its digest proves it answers this question of this call: the same tool,
the same arguments as the model sent them, the same state.
"""

from __future__ import annotations

from .._errors import InputRequired
from ..approvals import (
    ApprovalDecision,
    InputAnswer,
    InputRequest,
    arguments_digest,
    digest_matches,
    input_digest,
)
from ..models import ErrorCode, ToolResult
from ._make import log_contained, make_result
from ._run import Run

__all__ = ["answer_for", "deferred_for_input"]


def answer_for(run: Run, secret: bytes) -> InputAnswer | None:
    """The answer `run` was submitted with, if it answers its tool's question."""
    answer = run.approval
    if not isinstance(answer, InputAnswer) or not isinstance(answer.state, str):
        return None
    origin = run.origin
    digest = input_digest(
        origin.name,
        origin.arguments,
        answer.state,
        secret=secret,
        covers_approval=answer.covers_approval is True,
    )
    if not digest_matches(answer.digest, digest):
        return None
    run.judged = answer.digest  # the question is answered: pending no more
    return answer


def _ran_approved(run: Run, secret: bytes) -> bool:
    """Whether `run` got past an approval: a decision for its exact arguments,
    or an answer that carries one on."""
    decision = run.approval
    if isinstance(decision, InputAnswer):
        answer = answer_for(run, secret)
        return answer is not None and answer.covers_approval is True
    if not isinstance(decision, ApprovalDecision) or decision.approved is not True:
        return False
    if decision.kind != "approve":
        # An edit's approval is of other arguments than the call's own (the
        # answer would run the call as the model sent it): the call answered
        # is asked about again. (A single-use or expiring approval carries on:
        # the answer goes on with the call it was spent on.)
        return False
    origin = run.origin
    digest = arguments_digest(origin.name, origin.arguments, secret=secret)
    return digest_matches(decision.digest, digest)


def deferred_for_input(run: Run, asked: InputRequired, attempts: int, secret: bytes) -> ToolResult:
    """The call's result for a tool that stopped to ask: `deferred`, with the
    request to answer; or an `error` saying why it could not be asked."""
    name = run.call.name
    # The question is published and shown to a person: secrets the call's
    # masking knows are scrubbed from it, as from an error's text.
    scrub = run.scrubber.for_model()
    message = scrub.text(asked.message)
    schema = scrub.value(asked.schema) if asked.schema is not None else None
    try:
        origin = run.origin
        covers = _ran_approved(run, secret)
        digest = input_digest(
            origin.name, origin.arguments, asked.state, secret=secret, covers_approval=covers
        )
        request = InputRequest(
            call_id=run.call.id,
            tool=name,
            arguments_masked=run.masked,
            digest=digest,
            source=asked.source,
            message=message,
            requested_schema=schema,
            state=asked.state,
            covers_approval=covers,
        )
    except Exception as e:  # a schema that is not a dict, say
        log_contained(f"call {run.call.id}: its tool's question cannot be asked", e, run.scrubber)
        return make_result(
            run,
            "error",
            error=f"Tool '{name}' asked for input that cannot be put to a person: "
            f"{type(e).__name__}",
            code=ErrorCode.TOOL_ERROR,
            attempts=attempts,
        )
    result = make_result(
        run,
        "deferred",
        error=f"Tool '{name}' needs input before it can finish: {asked.source} asks: {message}",
        code=ErrorCode.INPUT_REQUIRED,
        attempts=attempts,
    )
    return result.model_copy(update={"approval_request": request})
