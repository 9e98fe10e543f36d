"""The data that crosses toolbus's public surface: calls in, results out.

All models are frozen pydantic v2 models. A `ToolCall` accepts the model's raw
JSON string as its arguments and never fails to construct on malformed JSON:
the executor is what turns bad arguments into an `INVALID_ARGUMENTS` result, so
that a torn model output becomes something the model can read and fix.
"""

from __future__ import annotations

import itertools
import os
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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

Status = Literal["ok", "error", "timeout", "cancelled", "rejected"]


class ErrorCode(StrEnum):
    """Why a call did not end `ok`. Values are stable strings a model can read."""

    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    TOOL_NOT_ALLOWED = "TOOL_NOT_ALLOWED"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    TOOL_ERROR = "TOOL_ERROR"
    EXECUTION_TIMEOUT = "EXECUTION_TIMEOUT"
    CANCELLED = "CANCELLED"
    ABORTED = "ABORTED"
    TOOL_UNAVAILABLE = "TOOL_UNAVAILABLE"
    TOOL_CRASHED = "TOOL_CRASHED"
    """The process running the tool died (it exited, was killed by a signal or
    by the kernel, or went over `memory_limit_mb` / `cpu_limit_s`)."""


_ids = itertools.count(1)
_prefix = f"call_{os.getpid():x}_"


def _new_call_id() -> str:
    return f"{_prefix}{next(_ids)}"


def generated_id(call_id: str) -> bool:
    """True if toolbus made `call_id` up (the model gave none): such ids are not
    part of a call's idempotency key, since a restart would make another."""
    return call_id.startswith(_prefix) and call_id[len(_prefix) :].isdigit()


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

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class BatchSummary(BaseModel):
    """Counts for one batch. `failed` counts every result that is not `ok`."""

    model_config = ConfigDict(frozen=True)

    total: int
    executed: int
    succeeded: int
    failed: int
    read_only: int
    mutating: int
    duration: float


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
