"""What the built-in limiting policies share: whose budget a call spends.

`rate_limit`, `quota` and `circuit_breaker` keep one budget (or circuit) per
key. By default the key is the tool's name; `key=` is a function of the call
(an argument's value, a caller's context variable) and the calls with the same
key share one budget, whichever tools they call.
"""

from __future__ import annotations

from collections.abc import Callable

from .._json import loads
from ..models import ErrorCode, ToolCall
from ._protocol import Reject
from ._signals import scrub_quote

__all__ = ["KeyFunction", "check_key", "key_of", "parsed_arguments", "seconds_text"]

KeyFunction = Callable[[ToolCall], object]
"""A call -> its key: a `str`, or anything `str()` turns into one."""

# Enough of an exception's text to say what went wrong, not a whole payload.
_MAX_ERROR_TEXT = 200


def check_key(key: object, owner: str) -> KeyFunction | None:
    """`key=` as given, or a TypeError naming `owner` if it is not callable."""
    if key is not None and not callable(key):
        raise TypeError(
            f"{owner}: key must be a function of the call (or None: per tool), got {key!r}"
        )
    return key


def key_of(
    call: ToolCall, key: KeyFunction | None, owner: str, *, detail: bool = True
) -> str | Reject:
    """The budget `call` spends from: its tool's name, or `key(call)` as a str.

    A key function that raises (or returns something `str()` fails on) rejects
    the call with a message naming the policy and the exception (its type and,
    with `detail`, its text): a guard that cannot tell whose budget a call
    spends fails closed, and the call never crashes the executor. Without
    `detail` (asked at submission, before the arguments are masked) the text,
    which may quote an argument, is left out; with it, the text is scrubbed
    before it is cut, and a piece of a secret left in it by a cut (its own,
    or `int()`'s of its argument) masked: the executor scrubs the refusal
    again, but only of secrets it finds whole.
    """
    if key is None:
        return call.name
    if isinstance(call.arguments, str):
        # Asked at submission (a quota), a call still has the model's raw JSON
        # text: the key function sees it parsed, as it does after admission.
        call = _parsed(call, call.arguments)
    try:
        value = key(call)
        return value if isinstance(value, str) else str(value)
    except Exception as e:
        text = scrub_quote(str(e), _MAX_ERROR_TEXT) if detail else ""
        why = f"{type(e).__name__}: {text}" if text else type(e).__name__
        return Reject(
            ErrorCode.TOOL_UNAVAILABLE,
            f"Tool '{call.name}' is unavailable: the key of its policy {owner} failed ({why})",
        )


def _parsed(call: ToolCall, text: str) -> ToolCall:
    arguments = parsed_arguments(text)
    if arguments is text:
        return call  # not a JSON object: the call is rejected for it later
    return call.model_copy(update={"arguments": arguments})


def parsed_arguments(arguments: object) -> object:
    """A call's arguments as admission will see them: the model's raw JSON
    text parsed when it is an object, else `arguments` as they are."""
    if not isinstance(arguments, str):
        return arguments
    try:
        parsed = loads(arguments)
    except ValueError:
        return arguments
    return parsed if isinstance(parsed, dict) else arguments


def seconds_text(seconds: float) -> str:
    """A duration for a message the model reads: "0.75 s", "12 s", "3600 s"."""
    return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"
