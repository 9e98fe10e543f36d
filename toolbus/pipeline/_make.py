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

__all__ = [
    "OwnExit",
    "awaitable",
    "caller_cancelled",
    "log_contained",
    "make_result",
    "ok_result",
    "parsed_call",
]

_validate_result = ToolResult.__pydantic_validator__.validate_python
_new = object.__new__
_set = object.__setattr__
# The fields `make_result` gives (all but `approval_request`): what a result
# validated from them counts as set (`model_fields_set`).
_GIVEN = frozenset(
    {
        "call_id", "name", "status", "output", "error", "error_code",
        "attempts", "duration", "attachments", "metadata",
    }
)  # fmt: skip
# What `ToolCall.model_construct(id=..., name=..., arguments=...)` counts as set.
_CALL_GIVEN = frozenset({"id", "name", "arguments"})
_PLAIN = frozenset({ToolCall, ToolResult, RetryDecision, bool, type(None), dict, list, str})


def awaitable(value: Any) -> bool:
    """Whether user code handed back something to await (an async hook's coroutine).

    Each step writes `if awaitable(v): v = yield v` where it calls a hook: a
    generator per hook call (`yield from`) would cost more than the hook."""
    return type(value) not in _PLAIN and inspect.isawaitable(value)


class OwnExit(Exception):
    """A `GeneratorExit` that user code a step awaited (an async policy's or
    guardrail's) raised of its own, carried as what it is: the step would
    otherwise take it for its own closing (its loop closed) and drop the call."""

    def __init__(self, error: GeneratorExit) -> None:
        super().__init__(error)
        self.error = error


def own_exit(error: BaseException) -> BaseException:
    """`error` as the user code raised it (an `OwnExit`'s unwrapped)."""
    return error.error if isinstance(error, OwnExit) else error


async def awaited_own(aw: Any) -> Any:
    """`await aw`, a `GeneratorExit` it raised itself as an `OwnExit`.

    One thrown in by this coroutine's closing (`close()`, its loop shutting
    down) is raised here afresh, at the `await` (PEP 380): its traceback ends
    in this frame. One raised by the awaited code reaches here through its
    frames."""
    try:
        return await aw
    except GeneratorExit as e:
        tb = e.__traceback__
        if tb is not None and tb.tb_next is not None:
            raise OwnExit(e) from None
        raise


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


def ok_result(run: Run, output: Any, metadata: dict[str, Any]) -> ToolResult:
    """`make_result(run, "ok", output=output, metadata=metadata)` for a tool's
    value as `normalize_output` made it JSON-able, with no attachments and a
    metadata dict of its own: built as `ToolResult.model_construct` builds
    one, without its frames. Every piece has its field's type already (the id
    and name, text, from the call), so validating them again would find
    nothing, and cost every call about 0.6 µs."""
    call = run.call
    if type(call.id) is not str or type(call.name) is not str:
        # (a call a hook made with `model_construct`: validation makes them text)
        return make_result(run, "ok", output=output, metadata=metadata)
    result: ToolResult = _constructed(
        ToolResult,
        {
            "call_id": call.id,
            "name": call.name,
            "status": "ok",
            "output": output,
            "error": None,
            "error_code": None,
            "attempts": run.attempt,
            "duration": time.monotonic() - run.first_start if run.first_start else 0.0,
            "attachments": (),
            "metadata": metadata,
            "approval_request": None,
        },
        _GIVEN,
    )
    return result


def parsed_call(call: ToolCall, arguments: dict[str, Any]) -> ToolCall:
    """`call` with its text arguments parsed into `arguments`: what
    `ToolCall.model_construct(id=call.id, name=call.name, arguments=arguments)`
    builds (no idempotency key: the run keeps the caller's), without its
    frames, which cost a call of text arguments about 200 bytecodes."""
    new: ToolCall = _constructed(
        ToolCall,
        {"id": call.id, "name": call.name, "arguments": arguments, "idempotency_key": None},
        _CALL_GIVEN,
    )
    return new


def _constructed(cls: type[Any], fields: dict[str, Any], given: frozenset[str]) -> Any:
    """An instance of the model `cls` with `fields` (every field, each of its
    type already), `given` of them counted as set: what `cls.model_construct`
    builds, without its frames."""
    made = _new(cls)
    _set(made, "__dict__", fields)
    _set(made, "__pydantic_fields_set__", set(given))  # (a set of its own, as pydantic's)
    _set(made, "__pydantic_extra__", None)
    _set(made, "__pydantic_private__", None)
    return made


def caller_cancelled(caller: Run) -> str:
    """Why a call made inside `caller` (by its tool or hooks, or a sequence's
    step) ended when `caller` was cancelled: what the model reads."""
    return f"its caller, call {caller.call.id}, was cancelled"


def log_contained(what: str, error: BaseException, scrubber: Scrubber) -> None:
    """Log a contained failure with its traceback, secrets scrubbed from all of it."""
    text = "".join(traceback.format_exception(error))
    log.warning("%s:\n%s", what, scrubber.text(text))
