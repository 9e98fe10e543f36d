"""The steps of a durable call: its two positions, its intent recorded as its
tool is about to run, its result recorded as it ends (`run_steps`).

What decides each call: DBOS runs a step function only for a step it has no
record of. So a call's result step tells whether the call finished before
(the recorded result is replayed through the executor as `Run.decided`), and
its intent step, for a mutating call, whether it had started (recorded, and
no result: in doubt). The calls known to run are submitted together, once
every call of the batch is known, so a batch still runs as one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dbos import DBOS, StepReservation

from ...executor import Executor
from ...in_doubt import reruns_without_asking
from ...models import ToolCall, ToolResult
from .._turns.records import (
    call_key,
    intent_record,
    read_result,
    result_record,
    step_name,
    was_reasked,
)
from .._turns.submission import Gate, settle, submit_batch, submit_one
from ._outside import outside_dbos

__all__ = ["CallSteps", "NotStarted", "reserve", "run_steps"]


class NotStarted(BaseException):
    """Raised in an intent's step function for a call that ended without its
    tool starting: a BaseException, so DBOS records nothing for the step."""


@dataclass(slots=True)
class CallSteps:
    """One call's place in the workflow: its two steps, reserved in order."""

    call: ToolCall  # with its key
    intent: StepReservation
    result: StepReservation
    asks: bool  # mutating, not idempotent: records its intent before it runs


def reserve(executor: Executor, calls: list[ToolCall]) -> list[CallSteps]:
    """Reserve each call's two steps, in the order given; give it its key."""
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None
    registry = executor.registry
    plan: list[CallSteps] = []
    for made in calls:
        tool = registry.get(made.name)
        asks = tool is not None and not reruns_without_asking(tool.read_only, tool.idempotent)
        intent = DBOS.reserve_step()
        result = DBOS.reserve_step()
        keyed = made
        if made.idempotency_key is None:
            keyed = made.model_copy(
                update={"idempotency_key": call_key("dbos", workflow_id, result.step_id)}
            )
        plan.append(CallSteps(keyed, intent, result, asks))
    return plan


async def run_steps(
    executor: Executor,
    plan: list[CallSteps],
    options: Mapping[str, Any],
    stop_on_error: bool | None,
    decide: Callable[[CallSteps], Awaitable[ToolResult | None]],
) -> Any:
    """Run `plan`'s calls as steps: as one batch (`stop_on_error` given:
    their `BatchResult`), or one call alone (a list of its result)."""
    loop = asyncio.get_running_loop()
    known: dict[int, ToolResult] = {}
    gates: dict[int, Gate] = {}
    # Where each call's tool runs: outside the workflow, a context of its own.
    outside = [outside_dbos() for _ in plan]
    everyone_in: asyncio.Future[None] = loop.create_future()
    submitted: asyncio.Future[list[Any]] = loop.create_future()
    pending = len(plan)

    def arrived() -> None:
        nonlocal pending
        pending -= 1
        if pending == 0 and not everyone_in.done():  # (cancelled: the steps are)
            everyone_in.set_result(None)

    async def outcome(i: int) -> ToolResult:
        handles = await submitted
        result: ToolResult = await handles[i]
        return result

    async def one_call(i: int, steps: CallSteps, spawned: list[asyncio.Future[None]]) -> None:
        joined = False
        in_doubt = False
        # A recorded `deferred` result asked again: said in its intent, if its
        # tool then starts (its result step holds `deferred` for good).
        reasked = False
        recorded_intent: Any = None
        intent: asyncio.Future[None] | None = None
        if steps.asks:
            # Whether its intent is recorded is known when DBOS calls
            # `mark` (not recorded: it is now, if the tool starts) or
            # returns without calling it (recorded: the call had started).
            unrecorded: asyncio.Future[None] = loop.create_future()

            async def mark() -> str:
                gate = gates[i] = Gate(loop, loop.create_future())
                unrecorded.set_result(None)
                done: asyncio.Future[Any] = asyncio.ensure_future(outcome(i))
                waited: set[asyncio.Future[Any]] = {gate.asked, done}
                try:
                    await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    done.cancel()
                if not gate.asked.done():
                    raise NotStarted  # it ended without its tool starting
                c = steps.call
                return intent_record(c.id, c.name, c.idempotency_key or "", reasked=reasked)

            async def record_intent() -> None:
                nonlocal recorded_intent
                name = step_name(steps.call.name, intent=True)
                try:
                    recorded_intent = await steps.intent.run_async({"name": name}, mark)
                except NotStarted:
                    return
                except BaseException as e:
                    if i in gates:
                        why = RuntimeError(f"the intent was not recorded: {type(e).__name__}")
                        settle(gates[i].recorded, why)
                    raise
                if i in gates:
                    settle(gates[i].recorded)  # on disk: the tool may start

            intent = asyncio.ensure_future(record_intent())
            spawned.append(intent)
            await asyncio.wait({intent, unrecorded}, return_when=asyncio.FIRST_COMPLETED)
            in_doubt = not unrecorded.done()
            if in_doubt:
                await intent  # (done: DBOS's error, if any, raises here)
        stepped = False

        async def step() -> str:
            nonlocal stepped, joined
            stepped = True
            joined = True
            if in_doubt:
                decided = await decide(steps)
                if decided is not None:
                    known[i] = decided
            arrived()
            return result_record(await outcome(i))

        try:
            record = await steps.result.run_async({"name": step_name(steps.call.name)}, step)
            if not stepped:
                replay = read_result(record)
                if replay.status != "deferred":
                    known[i] = replay
                elif in_doubt and was_reasked(recorded_intent):
                    # Deferred, then asked again after a recovery and let
                    # through: its tool started, its result went unrecorded.
                    # In doubt like any such call.
                    decided = await decide(steps)
                    if decided is not None:
                        known[i] = decided
                else:
                    # Asked again (its request was bound to the process that
                    # made it); its tool, if it starts, says so in its intent.
                    reasked = True
        finally:
            if not joined:  # (recorded, or its step raised: the others go on)
                joined = True
                arrived()
        if intent is not None:
            await intent

    async def one(i: int, steps: CallSteps) -> None:
        spawned: list[asyncio.Future[None]] = []
        try:
            await one_call(i, steps, spawned)
        finally:
            for task in spawned:  # (a step cancelled midway leaves none behind)
                task.cancel()

    async def submit() -> None:
        await everyone_in
        ex = executor
        keyed = [s.call for s in plan]
        if stop_on_error is None:
            made = (keyed[0], known.get(0), gates.get(0), options)
            submitted.set_result([outside[0].run(submit_one, ex, *made)])
        else:
            # From a context none of the calls runs in: submission hooks may
            # enter the first call's (`Submission.context`) while this runs.
            batch = outside_dbos().run(
                submit_batch, ex, keyed, stop_on_error, known, gates, options, outside
            )
            submitted.set_result([*batch.calls, batch])

    try:
        async with asyncio.TaskGroup() as group:
            for i, steps in enumerate(plan):
                group.create_task(one(i, steps))
            group.create_task(submit())
    except BaseException as e:
        # A step DBOS could not record, or the workflow's task cancelled:
        # the calls still running are stopped (after a recovery they are
        # in doubt, or run again).
        if submitted.done() and not submitted.cancelled():
            submitted.result()[-1].cancel()
        if isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            raise e.exceptions[0] from None
        raise
    handles = submitted.result()
    if stop_on_error is None:
        return [await handles[0]]
    return await handles[-1]
