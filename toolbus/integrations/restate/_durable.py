"""`DurableExecutor`: an executor's calls, inside a Restate handler, journaled
through the handler's context.

Restate retries an invocation whose attempt failed (the service died, its
connection broke) by running the handler again from its start, with what the
journal holds: each `ctx.run` already recorded returns its result without
running. Here each toolbus call is such a run (two, for a mutating call that
is not idempotent: its intent, recorded before its tool starts, and its
result), so on a retry a finished call returns its result without running
(`metadata["replayed"]`), and a call that may have run is never run twice
silently (`toolbus.in_doubt`). See `_calls.py` for how.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...calls import CallLike, coerce_call
from ...executor import Executor
from ...in_doubt import InDoubtHandler
from ...models import BatchResult, ToolCall, ToolResult
from .._turns.doubt import adecided
from .._turns.submission import MANY, ONE, check_wrapped, checked, no_loop
from ._calls import run_calls
from ._handler import handler_context

__all__ = ["DurableExecutor", "durable"]

_OWNER = "restate DurableExecutor"


class DurableExecutor:
    """An `Executor` whose calls, made inside a Restate handler, are journaled
    through its context (`ctx.run`).

    Outside a handler each method is the executor's own. Inside one, a call
    the journal holds returns its recorded result without running
    (`metadata["replayed"]`); any other runs on the executor, with its
    events, policies and masking, and its result is journaled before the
    method returns. `on_in_doubt`: the handler of `toolbus.in_doubt` for
    mutating calls found in doubt (none: they end `IN_DOUBT`).

    Handlers are coroutines: inside one, use `aexecute` and `aexecute_batch`
    (the sync methods raise there). Errors of Restate itself (a journal that
    does not match the calls asked for, the invocation cancelled) raise out of
    these methods, as they do out of `ctx.run`: Restate then retries the
    invocation, or ends it."""

    def __init__(self, executor: Executor, *, on_in_doubt: InDoubtHandler | None = None) -> None:
        check_wrapped(executor, on_in_doubt)
        self.executor = executor
        self.on_in_doubt = on_in_doubt

    def execute(self, call: CallLike, **options: Any) -> ToolResult:
        """`Executor.execute`, outside a handler (inside one: `aexecute`)."""
        checked(options, ONE, "execute", _OWNER)
        if handler_context() is not None:
            no_loop("execute", _OWNER)
        return self.executor.execute(call, **options)

    def execute_batch(self, calls: Iterable[CallLike], **options: Any) -> BatchResult:
        """`Executor.execute_batch`, outside a handler (inside one: `aexecute_batch`)."""
        checked(options, MANY, "execute_batch", _OWNER)
        if handler_context() is not None:
            no_loop("execute_batch", _OWNER)
        return self.executor.execute_batch(calls, **options)

    async def aexecute(self, call: CallLike, **options: Any) -> ToolResult:
        """`Executor.aexecute` (same keywords), journaled in the handler it runs in."""
        checked(options, ONE, "aexecute", _OWNER)
        ctx = handler_context()
        if ctx is None:
            return await self.executor.aexecute(call, **options)
        made = [coerce_call(call)]
        result: ToolResult = (
            await run_calls(self.executor, ctx, made, options, None, self._decided)
        )[0]
        return result

    async def aexecute_batch(self, calls: Iterable[CallLike], **options: Any) -> BatchResult:
        """`Executor.aexecute_batch` (same keywords), each call journaled in the
        handler it runs in, in the order given."""
        checked(options, MANY, "aexecute_batch", _OWNER)
        ctx = handler_context()
        if ctx is None:
            return await self.executor.aexecute_batch(calls, **options)
        made = [coerce_call(c) for c in calls]
        if not made:
            return await self.executor.aexecute_batch((), **options)
        options = dict(options)
        stop_on_error = bool(options.pop("stop_on_error", False))
        batch = await run_calls(self.executor, ctx, made, options, stop_on_error, self._decided)
        assert isinstance(batch, BatchResult)
        return batch

    async def _decided(self, call: ToolCall) -> ToolResult | None:
        return await adecided(self.executor, self.on_in_doubt, call)


def durable(executor: Executor, *, on_in_doubt: InDoubtHandler | None = None) -> DurableExecutor:
    """`executor`'s calls made inside a Restate handler, journaled through its
    context: see `DurableExecutor`."""
    return DurableExecutor(executor, on_in_doubt=on_in_doubt)
