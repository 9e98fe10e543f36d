"""The exceptions that say how an attempt failed.

A tool or a hook raises `ToolError`, `ToolFailure` or `ArgumentError` to say
something precise to the model. A backend raises `ToolCrashed` or
`WorkerKilled` when the tool's runner itself failed (see below). They sit at
the ground so that every layer may raise or recognise them;
`toolbus.tools` is where users import them from.
"""

from __future__ import annotations

from typing import Any

from ._output import normalize_output
from .models import ErrorCode

__all__ = [
    "ArgumentError",
    "InputRequired",
    "ToolCrashed",
    "ToolError",
    "ToolFailure",
    "WorkerKilled",
    "error_text",
]


class ToolError(Exception):
    """Raise from a tool to return `message` to the model as the error text as is.

    `retryable` overrides the retry policy's view of this failure when set:
    True or False (None: the policy decides). Any other value is taken as
    False: an unclear answer never makes a call run again.
    """

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable: bool | None = (
            retryable if retryable is None or isinstance(retryable, bool) else False
        )


class ToolFailure(ToolError):
    """Raise from a tool to end the attempt `error` with a code, metadata, and
    (by default) no retry.

    - `code` becomes the result's `error_code`: `ErrorCode.TOOL_ERROR` (the
      tool failed) or `ErrorCode.TOOL_CRASHED` (what ran it died: then, as for
      every crash, only a read-only or idempotent tool is ever retried).
    - `metadata` becomes the result's `metadata` (scrubbed of secrets like
      everything else in the result); it must be JSON-able (`OutputError` if not).
    - `retry=False` (the default): the call ends with this attempt, whatever
      the retry policy or a `should_retry` hook would say (the hook is not
      asked). `retry=True`: the policy decides, as for any other failure.
      Any value but True counts as False.

    `message` reaches the model as is, as for `ToolError`.
    """

    _CODES = frozenset({ErrorCode.TOOL_ERROR, ErrorCode.TOOL_CRASHED})

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode = ErrorCode.TOOL_ERROR,
        metadata: dict[str, Any] | None = None,
        retry: bool = False,
    ) -> None:
        if code not in self._CODES:
            raise ValueError(f"ToolFailure code must be TOOL_ERROR or TOOL_CRASHED, not {code!r}")
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"ToolFailure metadata must be a dict, not {type(metadata).__name__}")
        retry = retry is True  # "yes", 1: not a True, so no retry (fails closed)
        # retryable=False tells a `should_retry` hook the same, should one be asked.
        super().__init__(message, retryable=None if retry else False)
        self.code = ErrorCode(code)
        self.metadata: dict[str, Any] = normalize_output(dict(metadata or {}))[0]
        self.retry = retry


class InputRequired(ToolError):
    """Raise from a tool that cannot finish before a person answers (an MCP
    server's question, asked while nobody is there to answer it now).

    The call ends `deferred`, code `INPUT_REQUIRED`, with an `InputRequest`
    (`toolbus.approvals`): `message` is the question, `schema` the JSON Schema
    of the answer's data (None: a bare yes or no), `source` who asks.
    Submitted again with the request's answer, the call runs again and the
    tool finds it in `ToolContext.answer`, with `state`, the string the tool
    needs to go on where it stopped. Never retried. Thread and loop backends
    only: from another process it is an `error` with `message`.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str,
        schema: dict[str, Any] | None = None,
        state: str = "",
    ) -> None:
        if not isinstance(state, str):
            raise TypeError(f"InputRequired state must be a str, got {type(state).__name__}")
        super().__init__(message, retryable=False)
        self.source = source
        self.schema = schema
        self.state = state


class ArgumentError(ValueError):
    """The arguments of a call cannot be used (malformed, oversize, schema violation)."""


def error_text(error: BaseException) -> str:
    """Readable one-line text for an exception, as the model will see it."""
    name = type(error).__name__
    try:
        text = str(error)
    except BaseException:  # one whose __str__ fails (SystemExit too) is still the tool's error
        return name
    if isinstance(error, ToolError | ArgumentError):
        return text
    return f"{name}: {text}" if text else name


# How a backend tells the steps that the tool's runner itself failed.
#
# A tool raising is a tool error. These are different: the process running it
# died (`ToolCrashed`), or toolbus killed it because the call's outcome was no
# longer wanted (`WorkerKilled`). The steps turn the first into `TOOL_CRASHED`,
# which is retried only for read-only or idempotent tools, and drop the second:
# whoever killed it has already settled the call.


class ToolCrashed(ToolFailure):
    """The process running the attempt died; the message says how (exit code,
    signal, or the limit it went over).

    Worth another attempt (by the retry policy, and only for a tool that is
    read-only or idempotent), unless `retry=False`: over a limit it would go
    over again, so that ends the call whatever a hook says."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message, code=ErrorCode.TOOL_CRASHED, retry=retry)
        # A crash is transient: the policy's `retry_on` need not name it.
        self.retryable = self.retry


class WorkerKilled(BaseException):
    """The attempt's process was killed by toolbus (deadline, cancellation).

    A BaseException so that no `except Exception` on the way mistakes it for
    the tool's own failure."""
