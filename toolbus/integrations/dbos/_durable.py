"""`DurableExecutor`: an executor's calls, inside a DBOS workflow, as DBOS steps.

Each call takes two step positions when it is made, in the order given
(`DBOS.reserve_step`): its intent's and its result's. So a batch gets the
same positions on every run of the workflow, whatever finished first before a
crash, and whatever a tool's flags are now. Each step then runs at its
position, from the workflow's own context (a task of its loop, `_steps.py`;
a lone call from a sync workflow, on its thread, `_alone.py`):

- its result recorded already (a finished call, on a run after a recovery):
  DBOS hands the result back without calling toolbus's step function; the
  call goes to the executor with that result decided (`Run.decided`), so it
  is announced (`metadata["replayed"]`) and never runs. A recorded
  `deferred` result (a call that waits for an approval or an answer) is not
  replayed but asked again: its request is bound to the process that made it;
- not recorded: the call joins the batch, which is submitted once every call
  of it is known to be recorded or not, so a batch still runs as one
  (read-only calls in parallel, a mutating one in order, `stop_on_error`).
  Its result is recorded as it ends.

A mutating, not idempotent call records its intent when its tool is about to
run (`Run.gate`: the call waits for the record): a call that never started
leaves no intent. One found recorded with no result after it is in doubt,
and the rule of `toolbus.in_doubt` decides (a handler's `Rerun`, `Skip`, or
by default an `IN_DOUBT` error). Its key, derived from the workflow id and
its result's position, is the same on every run (`ToolContext.idempotency_key`).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from dbos import DBOS

from ...calls import CallLike, coerce_call
from ...executor import Executor
from ...in_doubt import InDoubtHandler
from ...models import BatchResult, ToolResult
from .._turns.doubt import adecided, decided
from .._turns.records import read_result, result_record, step_name
from .._turns.submission import MANY, ONE, check_wrapped, checked, no_loop, submit_one
from ._alone import run_alone
from ._outside import outside_dbos
from ._steps import CallSteps, reserve, run_steps

__all__ = ["DurableExecutor", "durable", "in_workflow"]

T = TypeVar("T")


def in_workflow() -> bool:
    """Whether this code runs in a DBOS workflow, outside its steps: where
    calls become steps of their own."""
    return DBOS.workflow_id is not None and DBOS.step_id is None


_runners = threading.local()


def _on_own_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end on this thread's own loop, in this thread's
    context (the workflow's). One loop per thread, kept: DBOS runs workflows
    on a pool of threads, and a loop made per call costs more than the step."""
    runner: asyncio.Runner | None = getattr(_runners, "runner", None)
    if runner is None:
        runner = _runners.runner = asyncio.Runner()
    try:
        return runner.run(coro, context=contextvars.copy_context())
    except BaseException:
        if not runner.get_loop().is_running():
            # What escaped the loop (a SystemExit, a KeyboardInterrupt raised
            # in it) left the steps' tasks pending on it: closing the loop
            # cancels them, so their calls are stopped, not resumed by the
            # next batch on this thread.
            _runners.runner = None
            runner.close()
        raise


class DurableExecutor:
    """An `Executor` whose calls, made inside a DBOS workflow, are DBOS steps.

    Outside a workflow (or inside a step) each method is the executor's own.
    Inside one, a call whose result the workflow recorded returns that result
    without running (`metadata["replayed"]`); any other runs on the executor,
    with its events, policies and masking, and its result is recorded before
    the method returns. `on_in_doubt`: the handler of `toolbus.in_doubt` for
    mutating calls found in doubt (none: they end `IN_DOUBT`).

    Errors of DBOS itself (its database, a workflow that asks for other calls
    than it did before) raise out of these methods, as they do out of any
    step: DBOS fails the workflow, and recovers it later."""

    def __init__(self, executor: Executor, *, on_in_doubt: InDoubtHandler | None = None) -> None:
        check_wrapped(executor, on_in_doubt)
        self.executor = executor
        self.on_in_doubt = on_in_doubt

    # -- one call ---------------------------------------------------------------

    def execute(self, call: CallLike, **options: Any) -> ToolResult:
        """`Executor.execute` (same keywords), as a step of the workflow it runs in."""
        checked(options, ONE, "execute")
        if not in_workflow():
            return self.executor.execute(call, **options)
        no_loop("execute")
        steps = reserve(self.executor, [coerce_call(call)])[0]
        tools = outside_dbos()  # where its tool runs (see `outside_dbos`)
        if steps.asks:  # its intent recorded as its tool is about to start
            return run_alone(self.executor, steps, options, self._decided_here, tools)
        ran: list[ToolResult] = []
        execute = self.executor.execute

        def step() -> str:
            ran.append(tools.run(execute, steps.call, **options))
            return result_record(ran[0])

        record = steps.result.run({"name": step_name(steps.call.name)}, step)
        if ran:
            return ran[0]
        replay = read_result(record)
        if replay.status == "deferred":  # asked again (see the module's docstring)
            return tools.run(execute, steps.call, **options)
        replayed = tools.run(submit_one, self.executor, steps.call, replay, None, {})
        result: ToolResult = replayed.result()
        return result

    async def aexecute(self, call: CallLike, **options: Any) -> ToolResult:
        """`Executor.aexecute` (same keywords), as a step of the workflow it runs in."""
        checked(options, ONE, "aexecute")
        if not in_workflow():
            return await self.executor.aexecute(call, **options)
        steps = reserve(self.executor, [coerce_call(call)])[0]
        result: ToolResult = (
            await run_steps(self.executor, [steps], options, None, self._decided)
        )[0]
        return result

    # -- a batch ----------------------------------------------------------------

    def execute_batch(self, calls: Iterable[CallLike], **options: Any) -> BatchResult:
        """`Executor.execute_batch` (same keywords), each call a step of the
        workflow it runs in. The steps of one batch run concurrently, on a loop
        of this thread's own (DBOS runs concurrent steps of a workflow as
        tasks): from a coroutine, use `aexecute_batch`."""
        checked(options, MANY, "execute_batch")
        if not in_workflow():
            return self.executor.execute_batch(calls, **options)
        no_loop("execute_batch")
        return _on_own_loop(self.aexecute_batch(calls, **options))

    async def aexecute_batch(self, calls: Iterable[CallLike], **options: Any) -> BatchResult:
        """`Executor.aexecute_batch` (same keywords), each call a step of the
        workflow it runs in."""
        checked(options, MANY, "aexecute_batch")
        if not in_workflow():
            return await self.executor.aexecute_batch(calls, **options)
        made = [coerce_call(c) for c in calls]
        if not made:
            return await self.executor.aexecute_batch((), **options)
        stop_on_error = bool(options.pop("stop_on_error", False))
        batch = await run_steps(
            self.executor, reserve(self.executor, made), options, stop_on_error, self._decided
        )
        assert isinstance(batch, BatchResult)
        return batch

    # -- the steps of calls -----------------------------------------------------

    async def _decided(self, steps: CallSteps) -> ToolResult | None:
        """For a call in doubt: its result if it does not run again, else None."""
        return await adecided(self.executor, self.on_in_doubt, steps.call)

    def _decided_here(self, steps: CallSteps) -> ToolResult | None:
        """`_decided` on this thread (an async handler on a loop of its own)."""
        return decided(self.executor, self.on_in_doubt, steps.call)


def durable(executor: Executor, *, on_in_doubt: InDoubtHandler | None = None) -> DurableExecutor:
    """`executor`'s calls made inside a DBOS workflow, as DBOS steps: see `DurableExecutor`."""
    return DurableExecutor(executor, on_in_doubt=on_in_doubt)
