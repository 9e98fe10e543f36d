"""Exceptions a tool or a hook may raise to say something precise to the model."""

from __future__ import annotations

from typing import Any

from ..models import ErrorCode
from ._output import normalize_output

__all__ = ["ArgumentError", "ToolError", "ToolFailure", "error_text"]


class ToolError(Exception):
    """Raise from a tool to return `message` to the model as the error text as is.

    `retryable` overrides the retry policy's view of this failure when set.
    """

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


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
        # retryable=False tells a `should_retry` hook the same, should one be asked.
        super().__init__(message, retryable=None if retry else False)
        self.code = ErrorCode(code)
        self.metadata: dict[str, Any] = normalize_output(dict(metadata or {}))[0]
        self.retry = bool(retry)


class ArgumentError(ValueError):
    """The arguments of a call cannot be used (malformed, oversize, schema violation)."""


def error_text(error: BaseException) -> str:
    """Readable one-line text for an exception, as the model will see it."""
    name = type(error).__name__
    try:
        text = str(error)
    except Exception:  # a tool's exception whose __str__ fails is still its error
        return name
    if isinstance(error, ToolError | ArgumentError):
        return text
    return f"{name}: {text}" if text else name
