"""A worker's exception, rebuilt in the agent from its description alone.

The worker sends the exception's type name, the names of its builtin bases and
its text, never the object: unpickling it would run the worker's code in the
agent. The agent rebuilds a stand-in: a class of the same name that derives
from the nearest builtin base, so `RetryPolicy(retry_on=(ConnectionError,))`
and the like still match, and whose text is the original's. A `ToolError`
comes back as a `ToolError`, with its `retryable`; a `ToolFailure` with its
code, metadata and `retry`.
"""

from __future__ import annotations

import builtins
from typing import Any

from ..models import Attachment, ErrorCode, ToolOutput
from ..tools import ToolError, ToolFailure

__all__ = ["RemoteError", "output_of", "remote_error", "value_of"]


class RemoteError(Exception):
    """Raised in a worker process; `text` is what `error_text` made of it there."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        # The text already reads "Type: message" (or "Type", for one with no
        # message, or whose `__str__` failed); error_text adds the name again.
        name = type(self).__name__
        if self.text == name:
            return ""
        prefix = f"{name}: "
        return self.text[len(prefix) :] if self.text.startswith(prefix) else self.text


_classes: dict[tuple[str, type[Exception]], type[Exception]] = {}


def output_of(message: dict[str, Any]) -> ToolOutput:
    """The tool's value from an "ok" reply (normalised where it ran)."""
    return ToolOutput(
        content=message.get("output"),
        attachments=tuple(Attachment(**a) for a in message.get("attachments") or ()),
        metadata=message.get("metadata") or {},
    )


def value_of(message: dict[str, Any]) -> ToolOutput:
    """The tool's value from its last reply: an "ok" one; any other raises the
    error it describes."""
    if message.get("kind") == "ok":
        return output_of(message)
    raise remote_error(message)


def remote_error(message: dict[str, Any]) -> BaseException:
    """The stand-in for the exception a worker described in `message`."""
    text = str(message.get("text") or "")
    retryable = message.get("retryable")
    failure = message.get("failure")
    if isinstance(failure, dict):
        try:
            return ToolFailure(
                text,
                code=ErrorCode(str(failure.get("code"))),
                metadata=failure.get("metadata")
                if isinstance(failure.get("metadata"), dict)
                else None,
                retry=bool(failure.get("retry")),
            )
        except (ValueError, TypeError):
            pass  # not one toolbus could have made: rebuilt as below
    if message.get("tool_error"):
        return ToolError(text, retryable=retryable if isinstance(retryable, bool) else None)
    name = str(message.get("type") or "Exception")
    if not name.isidentifier():
        name = "RemoteError"
    error = _stand_in(name, list(message.get("bases") or ()), text)
    if isinstance(retryable, bool):
        error.retryable = retryable  # type: ignore[attr-defined]
    return error


def _stand_in(name: str, bases: list[Any], text: str) -> Exception:
    """An instance of `name` derived from the first of `bases` (builtin names)
    that can be made from a message alone (UnicodeDecodeError, say, cannot: its
    base UnicodeError then stands in)."""
    for base in _builtin_bases(bases):
        cls = _classes.get((name, base))
        if cls is None:
            cls = type(name, (RemoteError, base), {"__module__": "toolbus.remote"})
        try:
            error = cls(text)
        except Exception:
            continue
        if len(_classes) < 512:  # names come from the worker: bounded
            _classes[(name, base)] = cls
        return error
    return RemoteError(text)


def _builtin_bases(names: list[Any]) -> list[type[Exception]]:
    found: list[type[Exception]] = []
    for n in names:
        cls = getattr(builtins, str(n), None)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls not in found:
            found.append(cls)
    if Exception not in found:
        found.append(Exception)
    return found
