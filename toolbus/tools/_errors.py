"""Exceptions a tool or a hook may raise to say something precise to the model."""

from __future__ import annotations

__all__ = ["ArgumentError", "ToolError", "error_text"]


class ToolError(Exception):
    """Raise from a tool to return `message` to the model as the error text as is.

    `retryable` overrides the retry policy's view of this failure when set.
    """

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


class ArgumentError(ValueError):
    """The arguments of a call cannot be used (malformed, oversize, schema violation)."""


def error_text(error: BaseException) -> str:
    """Readable one-line text for an exception, as the model will see it."""
    if isinstance(error, ToolError | ArgumentError):
        return str(error)
    text = str(error)
    name = type(error).__name__
    return f"{name}: {text}" if text else name
