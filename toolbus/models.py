"""The data that crosses toolbus's public surface: calls in, results out.

All models are frozen pydantic v2 models. A `ToolCall` accepts the model's raw
JSON string as its arguments and never fails to construct on malformed JSON:
the executor is what turns bad arguments into an `INVALID_ARGUMENTS` result, so
that a torn model output becomes something the model can read and fix.
"""

from __future__ import annotations

import itertools
import os
import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .approvals import ApprovalRequest, InputRequest

__all__ = [
    "Attachment",
    "BatchResult",
    "BatchSummary",
    "ErrorCode",
    "Status",
    "ToolCall",
    "ToolOutput",
    "ToolResult",
]

Status = Literal["ok", "error", "timeout", "cancelled", "rejected", "deferred"]
"""`deferred`: the call did not run and waits for a decision (an approval)."""


class ErrorCode(StrEnum):
    """Why a call did not end `ok`. Values are stable strings a model can read.

    docs/reference.md ("Error codes") gives each one's status, whether toolbus
    retries it, and the text the model reads. Some are reserved: defined
    ahead of the change that first emits them, so that code matching on them
    can be written now.
    """

    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    """No tool of that name (status `rejected`): the error lists close matches."""
    TOOL_NOT_ALLOWED = "TOOL_NOT_ALLOWED"
    """Refused by authorization (`authorize` said anything but True), a pre-call
    hook or a denied approval (status `rejected`)."""
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    """The arguments are not JSON, too large, or not what the tool's schema
    accepts (status `rejected`)."""
    TOOL_ERROR = "TOOL_ERROR"
    """The tool raised, or a post-call hook failed (status `error`)."""
    EXECUTION_TIMEOUT = "EXECUTION_TIMEOUT"
    """An attempt did not finish within its `timeout` (status `timeout`)."""
    CANCELLED = "CANCELLED"
    """The caller, a parent call or `close()` cancelled the call (status `cancelled`)."""
    ABORTED = "ABORTED"
    """Not started: its batch stopped (`stop_on_error`), or it had to wait for a
    call that is deferred (status `cancelled`)."""
    TOOL_UNAVAILABLE = "TOOL_UNAVAILABLE"
    """The tool cannot run now: no backend, no thread left in its budget, an
    injected value missing, or a policy that failed (status `rejected`)."""
    TOOL_CRASHED = "TOOL_CRASHED"
    """The process running the tool died (it exited, was killed by a signal or
    by the kernel, or went over `memory_limit_mb` / `cpu_limit_s`)."""
    RATE_LIMITED = "RATE_LIMITED"
    """A rate limit would have made the call wait longer than it may."""
    CIRCUIT_OPEN = "CIRCUIT_OPEN"
    """The tool's circuit breaker is open after repeated failures: not tried now."""
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    """The tool's budget of calls is spent."""
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    """The call waits for an approval of its exact arguments (status `deferred`)."""
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    """The whole call (queueing, policy waits, every attempt and backoff) ran
    past its `call_timeout` (status `timeout`)."""
    OVERLOADED = "OVERLOADED"
    """Too many calls wait for capacity: the queue is full, or the call was shed
    for a higher-priority one; or for a decision: an executor without a journal
    holds as many requests as it may (status `rejected`)."""
    HALTED = "HALTED"
    """The agent run was stopped by a limit or a guardrail: the call did not run,
    or was stopped (status `cancelled`; reserved: not emitted yet)."""
    IN_DOUBT = "IN_DOUBT"
    """A mutating call whose earlier attempt may have run (a crash left its
    outcome unknown): not run again (status `error`; `toolbus.in_doubt`)."""
    INPUT_REQUIRED = "INPUT_REQUIRED"
    """A server, a person or another system must answer first: an MCP server's
    request for input, an external tool's result (status `deferred`;
    reserved: not emitted yet)."""
    DECISION_EXPIRED = "DECISION_EXPIRED"
    """The approval decision passed with the call was already used or is past
    its time (status `rejected`; reserved: not emitted yet)."""
    TOOL_NOT_OFFERED = "TOOL_NOT_OFFERED"
    """The tool exists but is not offered at this step (status `rejected`;
    reserved: not emitted yet)."""
    JOURNAL_UNAVAILABLE = "JOURNAL_UNAVAILABLE"
    """A mutating call refused because the journal could not record it, when the
    journal is required (status `rejected`; `Executor(journal_required=True)`)."""
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    """The caller's idempotency key was used before, or is in use, with other
    arguments (status `rejected`; with a journal)."""
    IDEMPOTENCY_KEY_IN_USE = "IDEMPOTENCY_KEY_IN_USE"
    """A call under the caller's idempotency key, with the same arguments, is
    still running: not run a second time at once (status `rejected`; with a
    journal)."""
    CONTENT_BLOCKED = "CONTENT_BLOCKED"
    """A content scanner blocked the call for what it carried (status
    `rejected`; reserved: not emitted yet)."""


_ids = itertools.count(1)
_prefix = f"call_{os.getpid():x}_"

# The ids toolbus makes up, in any process: `call_<pid in hex>_<n>` (a
# ToolCall made without an id) and `call_toolbus_<16 hex digits>` (a provider
# message's call that came without one: `providers._common.fallback_call_id`),
# and the ids of their composite tools' steps (`<id>.<step>`, nested too).
_GENERATED = re.compile(r"call_(?:[0-9a-f]{1,8}_[0-9]{1,20}|toolbus_[0-9a-f]{16})(?:\.[0-9]{1,6})*")


def _new_call_id() -> str:
    return f"{_prefix}{next(_ids)}"


def generated_id(call_id: str) -> bool:
    """True if toolbus made `call_id` up (the model gave none), in this process
    or any other: `call_<pid in hex>_<n>` or `call_toolbus_<16 hex digits>`,
    or a composite tool's step of such a call (`<id>.<step index>`).

    Such ids are not part of a call's idempotency key (a restart, or the next
    turn, would make another or the same one for a different call), and a call
    with one is never replayed from the journal unless its caller set a key."""
    return isinstance(call_id, str) and _GENERATED.fullmatch(call_id) is not None


MAX_KEY_LENGTH = 256


def idempotency_key_problem(key: object) -> str | None:
    """Why `key` cannot be a `ToolCall.idempotency_key`, or None if it can:
    a key is a string of 1 to 256 printable characters, not all blank."""
    if not isinstance(key, str):
        return f"idempotency_key must be a string, got {type(key).__name__}"
    if not key.strip():
        return "idempotency_key must not be empty or blank (leave it out to have one derived)"
    if len(key) > MAX_KEY_LENGTH:
        return f"idempotency_key must be at most {MAX_KEY_LENGTH} characters, got {len(key)}"
    if not key.isprintable():
        return "idempotency_key must hold printable characters only (no control characters)"
    return None


class ToolCall(BaseModel):
    """One tool call as the model emitted it.

    `arguments` is either a dict or the model's raw JSON text; raw text is
    parsed by the executor, not here. `idempotency_key`, when set, is what
    `ToolContext.idempotency_key` and the journal use for this call; otherwise
    toolbus derives one from the tool, the arguments and the model's call id.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=_new_call_id)
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    idempotency_key: str | None = None
    """The caller's key for this call (1 to 256 printable characters): one key
    names one operation. With a journal, the same key and arguments replay
    the call that ended ok, and are refused while that call still runs
    (`IDEMPOTENCY_KEY_IN_USE`); other arguments are refused
    (`IDEMPOTENCY_KEY_REUSED`; see docs/journal.md)."""

    @field_validator("idempotency_key")
    @classmethod
    def _check_key(cls, key: str | None) -> str | None:
        if key is not None:
            problem = idempotency_key_problem(key)
            if problem is not None:
                raise ValueError(problem)
        return key

    def with_arguments(self, arguments: dict[str, Any] | str) -> ToolCall:
        """Return a copy of this call with other arguments (for pre-call hooks)."""
        return self.model_copy(update={"arguments": arguments})


class Attachment(BaseModel):
    """A non-text artefact a tool hands back beside its content (an image, a file)."""

    model_config = ConfigDict(frozen=True)

    type: str
    url: str | None = None
    data: str | None = None
    title: str | None = None


class ToolOutput(BaseModel):
    """What a tool may return when it has more to say than a plain value."""

    model_config = ConfigDict(frozen=True)

    content: Any = None
    attachments: tuple[Attachment, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolResult(BaseModel):
    """The one terminal outcome of a call.

    `output` is JSON-able. `error` is readable text meant for the model (secrets
    scrubbed); `error_code` says why in a stable form. `attempts` counts the
    attempts that started; `duration` is seconds from the first attempt's
    dispatch to the result (0.0 for calls that never started).
    `approval_request`: for a `deferred` call, what to approve (see
    `toolbus.policies.requires_approval`), or, for one that ended
    `INPUT_REQUIRED`, the `InputRequest` (what the tool asks).
    """

    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str
    status: Status
    output: Any = None
    error: str | None = None
    error_code: ErrorCode | None = None
    attempts: int = 0
    duration: float = 0.0
    attachments: tuple[Attachment, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    # InputRequest first: a dict with its fields is read back as one.
    approval_request: InputRequest | ApprovalRequest | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class BatchSummary(BaseModel):
    """Counts for one batch. `failed` counts every result that is neither `ok`
    nor `deferred`; `deferred` the calls that wait for a decision."""

    model_config = ConfigDict(frozen=True)

    total: int
    executed: int
    succeeded: int
    failed: int
    read_only: int
    mutating: int
    duration: float
    deferred: int = 0


class BatchResult(BaseModel):
    """Results of a batch, in the order the calls were given."""

    model_config = ConfigDict(frozen=True)

    results: tuple[ToolResult, ...]
    summary: BatchSummary

    def __iter__(self) -> Any:  # iterate results, not model fields
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> ToolResult:
        return self.results[index]
