"""What becomes of a call that may have run before a crash: one rule, chosen per tool.

A call is *in doubt* when a record says it started (its intent) and nothing
says how it ended: the process died in between. Whether its side effect
happened is unknown. The rule, shared by the durable engines
(`toolbus.integrations.dbos`) and toolbus's own journal:

- a read-only or `idempotent=True` tool's call runs again, with the *same*
  idempotency key (`ToolContext.idempotency_key`), so a tool that passes the
  key on (a payment API's) is safe to repeat;
- a mutating call is not run again silently: it ends `error` with
  `ErrorCode.IN_DOUBT`, unless an in-doubt handler decides otherwise.

The handler (`on_in_doubt=`, sync or async) gets an `InDoubtCall` (the call's
masked arguments and its key) and returns what to do: `Rerun()` (run it
again under the same key), `Skip(output)` (do not run it: it did happen, and
`output` is what the model reads), or `Fail(reason)` (end it `IN_DOUBT`).
None is `Fail()`. A handler that raises or returns anything else fails the
call too: never a silent second run.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from .models import ErrorCode, ToolResult

__all__ = [
    "Fail",
    "InDoubtCall",
    "InDoubtDecision",
    "InDoubtHandler",
    "Rerun",
    "Skip",
    "adecide",
    "decide",
    "in_doubt_result",
    "never_rerun",
    "reruns_without_asking",
]

log = logging.getLogger("toolbus")


@dataclass(frozen=True, slots=True)
class InDoubtCall:
    """A call that may have run before a crash, as an in-doubt handler sees it.

    `arguments` are masked as events show them; `idempotency_key` is the key
    its first run was given, and a rerun is given again."""

    call_id: str
    tool: str
    arguments: Any
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class Rerun:
    """Run the call again, with the same idempotency key."""


@dataclass(frozen=True, slots=True)
class Skip:
    """Do not run the call again: it did happen. Its result is `ok` with `output`."""

    output: Any = None


@dataclass(frozen=True, slots=True)
class Fail:
    """Do not run the call again: it ends `error` with `ErrorCode.IN_DOUBT`."""

    reason: str = ""


InDoubtDecision: TypeAlias = Rerun | Skip | Fail
InDoubtHandler: TypeAlias = Callable[
    [InDoubtCall], "InDoubtDecision | Awaitable[InDoubtDecision | None] | None"
]


def never_rerun(call: InDoubtCall) -> Fail:
    """A handler that fails every mutating call in doubt (`IN_DOUBT`): the rule
    with nobody to ask, e.g. `Executor(journal=..., on_in_doubt=never_rerun)`."""
    return Fail()


def reruns_without_asking(read_only: bool, idempotent: bool) -> bool:
    """Whether a call in doubt runs again without a handler's say: a read-only
    or idempotent tool's does."""
    return read_only or idempotent


def as_decision(value: Any, call: InDoubtCall) -> InDoubtDecision:
    """What a handler's answer decides: None is `Fail()`; anything but a
    decision fails the call (logged)."""
    if value is None:
        return Fail()
    if isinstance(value, Rerun | Skip | Fail):
        return value
    log.error(
        "in-doubt handler returned %s for call %s (%s), not Rerun, Skip or Fail: "
        "the call is not run again",
        type(value).__name__,
        call.call_id,
        call.tool,
    )
    return Fail("its in-doubt handler gave no decision")


def failed_decision(call: InDoubtCall, error: BaseException) -> Fail:
    """The decision when the handler raised: fail the call (logged, the
    error's type only)."""
    # The type only: a handler's message may quote the arguments it was given.
    log.error(
        "in-doubt handler failed for call %s (%s): %s; the call is not run again",
        call.call_id,
        call.tool,
        type(error).__name__,
    )
    return Fail("its in-doubt handler failed")


def decide(handler: InDoubtHandler | None, call: InDoubtCall) -> InDoubtDecision:
    """The handler's decision on a mutating call in doubt (no handler: `Fail()`).

    Never raises. An async handler is run to completion here, on a loop of
    its own: from a coroutine, use `adecide`."""
    if handler is None:
        return Fail()
    try:
        value: Any = handler(call)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # a handler's own, whatever its class
        return failed_decision(call, e)
    return as_decision(value, call)


async def adecide(handler: InDoubtHandler | None, call: InDoubtCall) -> InDoubtDecision:
    """Async twin of `decide`: an async handler is awaited; a sync one is called here."""
    if handler is None:
        return Fail()
    try:
        value: Any = handler(call)
        if inspect.isawaitable(value):
            value = await value
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except asyncio.CancelledError as e:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # this task is being cancelled: not the handler's answer
        return failed_decision(call, e)
    except BaseException as e:  # a handler's own, whatever its class
        return failed_decision(call, e)
    return as_decision(value, call)


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def in_doubt_result(call: InDoubtCall, decision: Skip | Fail) -> ToolResult:
    """The result of a call in doubt that is not run again.

    `metadata["in_doubt"]` says which: "skipped" or "failed"."""
    if isinstance(decision, Skip):
        return ToolResult(
            call_id=call.call_id,
            name=call.tool,
            status="ok",
            output=decision.output,
            metadata={"in_doubt": "skipped"},
        )
    why = f" ({decision.reason})" if decision.reason else ""
    return ToolResult(
        call_id=call.call_id,
        name=call.tool,
        status="error",
        error=(
            f"Tool '{call.tool}' was not run again: an earlier attempt of this call may "
            "have run, and its outcome is unknown; check its effect before calling it "
            f"again{why}"
        ),
        error_code=ErrorCode.IN_DOUBT,
        metadata={"in_doubt": "failed"},
    )
