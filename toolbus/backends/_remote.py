"""A worker's exception, rebuilt in the agent from its description alone.

The worker sends the exception's type name, the names of its builtin bases and
its text, never the object: unpickling it would run the worker's code in the
agent. The agent rebuilds a stand-in: a class of the same name that derives
from the nearest builtin base, so `RetryPolicy(retry_on=(ConnectionError,))`
and the like still match, and whose text is the original's. A `ToolError`
comes back as a `ToolError`, with its `retryable`.
"""

from __future__ import annotations

import builtins
from typing import Any

from ..tools import ToolError

__all__ = ["RemoteError", "remote_error"]


class RemoteError(Exception):
    """Raised in a worker process; `text` is what `error_text` made of it there."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        # The text already reads "Type: message"; error_text adds the name again.
        prefix = f"{type(self).__name__}: "
        return self.text[len(prefix) :] if self.text.startswith(prefix) else self.text


_classes: dict[tuple[str, type[BaseException]], type[Exception]] = {}


def _builtin_base(names: list[Any]) -> type[BaseException]:
    for name in names:
        cls = getattr(builtins, str(name), None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls
    return Exception


def remote_error(message: dict[str, Any]) -> BaseException:
    """The stand-in for the exception a worker described in `message`."""
    text = str(message.get("text") or "")
    retryable = message.get("retryable")
    if message.get("tool_error"):
        return ToolError(text, retryable=retryable if isinstance(retryable, bool) else None)
    name = str(message.get("type") or "Exception")
    if not name.isidentifier():
        name = "RemoteError"
    base = _builtin_base(list(message.get("bases") or ()))
    cls = _classes.get((name, base))
    if cls is None:
        cls = _classes[(name, base)] = type(
            name, (RemoteError, base), {"__module__": "toolbus.remote"}
        )
    error = cls(text)
    if isinstance(retryable, bool):
        error.retryable = retryable  # type: ignore[attr-defined]
    return error
