"""`DurableExecutor`: an executor's calls, inside a DBOS workflow, as DBOS steps.

Each call takes its step positions when it is made, in the order given
(`DBOS.reserve_step`), so a batch gets the same positions on every run of
the workflow, whatever finished first before a crash. Then each call's
step is run at its position, from the workflow's own context:

- recorded already (a finished call, on a run after a recovery): DBOS hands
  back its result without calling toolbus's step function; the call goes to
  the executor with that result decided (`Run.decided`), so it is announced
  (its `tool:finished` marked `metadata["replayed"]`) and never runs;
- not recorded: the step function joins the batch, which is submitted once
  every call of it is known to be recorded or not, and records the call's
  result as it ends. So a batch still runs as one (read-only calls in
  parallel, a mutating one in order, `stop_on_error`).

A mutating, not idempotent call records its intent first, in a step of its
own: found recorded with no result after it, the call is in doubt, and the
rule of `toolbus.in_doubt` decides (a handler's `Rerun`, `Skip`, or by
default an `IN_DOUBT` error). Its key, derived from the workflow id and its
step position, is the same on every run (`ToolContext.idempotency_key`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dbos import DBOS, StepReservation

from ..._executor._handles import BatchHandle, batch_handle, call_handle
from ...approvals import ApprovalDecision
from ...calls import CallLike, coerce_call
from ...executor import Executor
from ...in_doubt import (
    InDoubtCall,
    InDoubtHandler,
    Rerun,
    adecide,
    decide,
    in_doubt_result,
    reruns_without_asking,
)
from ...masking import mask_paths, published_arguments
from ...models import BatchResult, ToolCall, ToolResult
from ...tools import ArgumentError, parse_json_arguments
from ._records import call_key, intent_record, read_result, result_record, step_name

__all__ = ["DurableExecutor", "durable"]


@dataclass(slots=True)
class _Steps:
    """One call's place in the workflow: its steps, reserved in order."""

    call: ToolCall  # with its key
    result: StepReservation
    intent: StepReservation | None  # a mutating call's, not idempotent


def in_workflow() -> bool:
    """Whether this code runs in a DBOS workflow, outside its steps: where
    calls become steps of their own."""
    return DBOS.workflow_id is not None and DBOS.step_id is None


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
        if not isinstance(executor, Executor):
            raise TypeError(
                f"durable(): executor must be a toolbus.Executor, got {type(executor).__name__}"
            )
        if on_in_doubt is not None and not callable(on_in_doubt):
            raise TypeError(
                "durable(): on_in_doubt must be a callable (sync or async), got "
                f"{type(on_in_doubt).__name__}"
            )
        self.executor = executor
        self.on_in_doubt = on_in_doubt

    # -- one call ---------------------------------------------------------------

    def execute(
        self, call: CallLike, *, approval: ApprovalDecision | None = None, **options: Any
    ) -> ToolResult:
        """`Executor.execute`, as a step of the workflow it runs in."""
        if not in_workflow():
            return self.executor.execute(call, approval=approval, **options)
        steps = self._reserve([coerce_call(call)])[0]
        fresh = self._intent(steps)
        ran: list[ToolResult] = []

        def step() -> str:
            result = self._run_one(steps, fresh, approval, options)
            ran.append(result)
            return result_record(result)

        record = steps.result.run({"name": step_name(steps.call.name)}, step)
        if ran:
            return ran[0]
        return self._replay(steps.call, read_result(record))

    async def aexecute(
        self, call: CallLike, *, approval: ApprovalDecision | None = None, **options: Any
    ) -> ToolResult:
        """`Executor.aexecute`, as a step of the workflow it runs in."""
        if not in_workflow():
            return await self.executor.aexecute(call, approval=approval, **options)
        steps = self._reserve([coerce_call(call)])[0]
        fresh = await self._aintent(steps)
        ran: list[ToolResult] = []

        async def step() -> str:
            decided = None if fresh else await self._adecided(steps)
            handle = self._submit_one(steps.call, decided, approval, options)
            result: ToolResult = await handle
            ran.append(result)
            return result_record(result)

        record = await steps.result.run_async({"name": step_name(steps.call.name)}, step)
        if ran:
            return ran[0]
        result: ToolResult = await self._submit_one(steps.call, read_result(record), None, {})
        return result

    # -- a batch ----------------------------------------------------------------

    def execute_batch(self, calls: Iterable[CallLike], **options: Any) -> BatchResult:
        """`Executor.execute_batch`, each call a step of the workflow it runs in.

        The steps of one batch run concurrently, on a loop of this thread's
        own (DBOS runs concurrent steps of a workflow as tasks): from a
        coroutine, use `aexecute_batch`."""
        if not in_workflow():
            return self.executor.execute_batch(calls, **options)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._batch(list(calls), options))
        raise RuntimeError(
            "DurableExecutor.execute_batch() was called while an event loop is running: "
            "use await aexecute_batch(...)"
        )

    async def aexecute_batch(self, calls: Iterable[CallLike], **options: Any) -> BatchResult:
        """`Executor.aexecute_batch`, each call a step of the workflow it runs in."""
        if not in_workflow():
            return await self.executor.aexecute_batch(calls, **options)
        return await self._batch(list(calls), options)

    async def _batch(self, calls: list[CallLike], options: dict[str, Any]) -> BatchResult:
        made = [coerce_call(c) for c in calls]
        if not made:
            return await self.executor.aexecute_batch((), **options)
        plan = self._reserve(made)
        stop_on_error = bool(options.pop("stop_on_error", False))
        known: dict[int, ToolResult] = {}
        loop = asyncio.get_running_loop()
        everyone_in: asyncio.Future[None] = loop.create_future()
        submitted: asyncio.Future[BatchHandle] = loop.create_future()
        pending = len(plan)

        def arrived() -> None:
            nonlocal pending
            pending -= 1
            if pending == 0:
                everyone_in.set_result(None)

        async def one(i: int, steps: _Steps) -> None:
            fresh = await self._aintent(steps)
            entered = False

            async def step() -> str:
                nonlocal entered
                entered = True
                if not fresh:
                    decided = await self._adecided(steps)
                    if decided is not None:
                        known[i] = decided
                arrived()
                handle = await submitted
                result: ToolResult = await handle.calls[i]
                return result_record(result)

            record = await steps.result.run_async({"name": step_name(steps.call.name)}, step)
            if not entered:
                known[i] = read_result(record)
                arrived()

        async def submit() -> None:
            await everyone_in
            submitted.set_result(
                batch_handle(
                    self.executor._submit_batch,
                    self.executor._stop,
                    self.executor._blocks_its_loop,
                    [s.call for s in plan],
                    stop_on_error,
                    known=known,
                    **_batch_options(options),
                )
            )

        try:
            async with asyncio.TaskGroup() as group:
                for i, steps in enumerate(plan):
                    group.create_task(one(i, steps))
                group.create_task(submit())
        except BaseException:
            # A step DBOS could not record (or a cancelled workflow): the calls
            # still running are stopped; after a recovery they are in doubt,
            # or run again.
            if submitted.done() and not submitted.cancelled():
                submitted.result().cancel()
            raise
        result: BatchResult = await submitted.result()
        return result

    # -- the steps of a call ----------------------------------------------------

    def _reserve(self, calls: list[ToolCall]) -> list[_Steps]:
        """Reserve each call's steps, in the order given, and give it its key."""
        workflow_id = DBOS.workflow_id
        assert workflow_id is not None
        registry = self.executor.registry
        plan: list[_Steps] = []
        for made in calls:
            tool = registry.get(made.name)
            asks = tool is not None and not reruns_without_asking(tool.read_only, tool.idempotent)
            intent = DBOS.reserve_step() if asks else None
            result = DBOS.reserve_step()
            keyed = made
            if made.idempotency_key is None:
                keyed = made.model_copy(
                    update={"idempotency_key": call_key(workflow_id, result.step_id)}
                )
            plan.append(_Steps(keyed, result, intent))
        return plan

    def _intent(self, steps: _Steps) -> bool:
        """Record a mutating call's intent; False if it was recorded before (the
        call may have run). True for a call that records none."""
        if steps.intent is None:
            return True
        fresh: list[bool] = []
        c = steps.call
        assert c.idempotency_key is not None

        def mark() -> str:
            fresh.append(True)
            return intent_record(c.id, c.name, c.idempotency_key or "")

        steps.intent.run({"name": step_name(c.name, intent=True)}, mark)
        return bool(fresh)

    async def _aintent(self, steps: _Steps) -> bool:
        if steps.intent is None:
            return True
        fresh: list[bool] = []
        c = steps.call

        async def mark() -> str:
            fresh.append(True)
            return intent_record(c.id, c.name, c.idempotency_key or "")

        await steps.intent.run_async({"name": step_name(c.name, intent=True)}, mark)
        return bool(fresh)

    def _in_doubt(self, steps: _Steps) -> InDoubtCall:
        c = steps.call
        return InDoubtCall(c.id, c.name, self._masked(c), c.idempotency_key or "")

    def _decided(self, steps: _Steps) -> ToolResult | None:
        """For a call in doubt: its result if it does not run again, else None."""
        call = self._in_doubt(steps)
        decision = decide(self.on_in_doubt, call)
        return None if isinstance(decision, Rerun) else in_doubt_result(call, decision)

    async def _adecided(self, steps: _Steps) -> ToolResult | None:
        call = self._in_doubt(steps)
        decision = await adecide(self.on_in_doubt, call)
        return None if isinstance(decision, Rerun) else in_doubt_result(call, decision)

    def _run_one(
        self,
        steps: _Steps,
        fresh: bool,
        approval: ApprovalDecision | None,
        options: Mapping[str, Any],
    ) -> ToolResult:
        decided = None if fresh else self._decided(steps)
        if decided is None:
            return self.executor.execute(steps.call, approval=approval, **options)
        return self._replay(steps.call, decided)

    def _submit_one(
        self,
        call: ToolCall,
        decided: ToolResult | None,
        approval: ApprovalDecision | None,
        options: Mapping[str, Any],
    ) -> Any:
        ex = self.executor
        return call_handle(
            ex._submit_one,
            ex._stop,
            ex._blocks_its_loop,
            call,
            decided=decided,
            approval=approval,
            priority=options.get("priority"),
            clocks=(options.get("timeout"), options.get("call_timeout")),
        )

    def _replay(self, call: ToolCall, decided: ToolResult) -> ToolResult:
        """Announce a call whose result is known (it does not run) and return it."""
        result: ToolResult = self._submit_one(call, decided, None, {}).result()
        return result

    def _masked(self, call: ToolCall) -> Any:
        """The call's arguments as its events show them (for an in-doubt handler)."""
        ex = self.executor
        tool = ex.registry.get(call.name)
        if isinstance(call.arguments, str):  # the model's JSON text, read as admission reads it
            try:
                call = call.model_copy(update={"arguments": parse_json_arguments(call.arguments)})
            except ArgumentError:
                pass
        raw = call.arguments
        try:
            masked = ex.mask_arguments(call)
            if asyncio.iscoroutine(masked):  # an async masker: nothing shown
                masked.close()
                return None
            paths = tool.secret_paths if tool is not None else ()
            masked, typed = mask_paths(masked, raw, paths) if paths else (masked, [])
            if masked is not raw:
                masked, _ = published_arguments(raw, masked, typed)
            return masked
        except Exception:  # a broken masker: nothing shown
            return None


def _batch_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """`execute_batch`'s keywords as `_submit_batch` takes them."""
    unknown = set(options) - {"approvals", "priority", "timeout", "call_timeout"}
    if unknown:
        raise TypeError(f"execute_batch() got unexpected keyword arguments {sorted(unknown)}")
    return {
        "approvals": options.get("approvals"),
        "priority": options.get("priority"),
        "clocks": (options.get("timeout"), options.get("call_timeout")),
    }


def durable(executor: Executor, *, on_in_doubt: InDoubtHandler | None = None) -> DurableExecutor:
    """`executor`'s calls made inside a DBOS workflow, as DBOS steps: see `DurableExecutor`."""
    return DurableExecutor(executor, on_in_doubt=on_in_doubt)
