"""The pieces every step uses: making a call's result, telling user code's
awaitables from its values, and logging what user code raised, scrubbed.

Below `_results.py` and `_policies.py`, which both need them (the one
finishes a call, the other ends one a policy refused) and one of which calls
the other.
"""

from __future__ import annotations

import inspect
import time
import traceback
from typing import TYPE_CHECKING, Any

from ..models import ErrorCode, Status, ToolCall, ToolResult
from ..retry import RetryDecision
from ._services import log

if TYPE_CHECKING:
    from ..masking import Scrubber
    from ._run import Run

__all__ = ["awaitable", "log_contained", "make_result"]

_validate_result = ToolResult.__pydantic_validator__.validate_python
_PLAIN = frozenset({ToolCall, ToolResult, RetryDecision, bool, type(None), dict, list, str})


def awaitable(value: Any) -> bool:
    """Whether user code handed back something to await (an async hook's coroutine).

    Each step writes `if awaitable(v): v = yield v` where it calls a hook: a
    generator per hook call (`yield from`) would cost more than the hook."""
    return type(value) not in _PLAIN and inspect.isawaitable(value)


def make_result(
    run: Run,
    status: Status,
    *,
    output: Any = None,
    error: str | None = None,
    code: ErrorCode | None = None,
    attempts: int | None = None,
    attachments: tuple[Any, ...] = (),
    metadata: dict[str, Any] | None = None,
) -> ToolResult:
    # Validated, as `ToolResult(...)` would be, by pydantic-core (faster than
    # `model_construct`), without `BaseModel.__init__`'s frame.
    result: ToolResult = _validate_result(
        {
            "call_id": run.call.id,
            "name": run.call.name,
            "status": status,
            "output": output,
            "error": error,
            "error_code": code,
            "attempts": run.attempt if attempts is None else attempts,
            "duration": time.monotonic() - run.first_start if run.first_start else 0.0,
            "attachments": attachments,
            "metadata": metadata if metadata is not None else {},
        }
    )
    return result


def log_contained(what: str, error: BaseException, scrubber: Scrubber) -> None:
    """Log a contained failure with its traceback, secrets scrubbed from all of it."""
    text = "".join(traceback.format_exception(error))
    log.warning("%s:\n%s", what, scrubber.text(text))
