"""A batch of calls journaled through a Restate handler's context (`run_calls`).

Each call issues its commands when the batch is made, in the order given, so
a batch replays the same way whatever finished first before a crash: a
`ctx.run` for its result and, for a mutating call that is not idempotent, one
before it for its intent. Whether the journal holds each command's result is
known as it is issued (`_handler.journaled`), and the batch is submitted
once, with what is known:

- its result journaled: replayed through the executor as `Run.decided`, a
  `deferred` one too. (DBOS asks such a call again, its request being bound
  to the process that made it. Here a call asked again could only end as it
  did or take the handler down another path than the journal's, which
  Restate refuses on every later attempt: an outcome other than `deferred`
  cannot be journaled, the result's command holding that already);
- its intent journaled, its result not: in doubt, decided by the rule of
  `toolbus.in_doubt` (its result, or it runs again under its key);
- neither: it runs. Its intent's action waits until the tool asks to start
  (`Run.gate`) and returns the record; the tool starts once Restate has
  stored it. A call that ends without its tool starting leaves its intent's
  command without a result (the action ends cancelled: Restate records
  nothing for it, and completes the invocation all the same), as DBOS
  records no step for it.

One coroutine drives Restate for the whole batch (`_drive`, over
`restate.wait_completed`), and one batch at a time of a handler's
(`_handler.one_at_a_time`): calls gathered from tasks of one handler run one
batch after another; `aexecute_batch` runs them together. Nothing is
submitted once the attempt has ended (Restate cancelled or aborted it while a
call in doubt was being decided): a call run then would never be journaled.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import restate
from restate import Context, RunOptions

from ...executor import Executor
from ...in_doubt import reruns_without_asking
from ...models import ToolCall, ToolResult
from .._turns.records import (
    call_key,
    intent_record,
    read_result,
    result_record,
    step_name,
)
from .._turns.submission import Gate, settle, submit_batch, submit_one
from ._handler import (
    attempt_ending,
    journaled,
    one_at_a_time,
    positions,
    submitting,
)

__all__ = ["run_calls"]

# Each action returns its record and raises nothing: Restate need not retry it.
_ONCE: RunOptions[str] = RunOptions(max_attempts=1)
# What a call's record may weigh: the server refuses a message over 32 MiB
# (its default), and an attempt that cannot write its record never ends.
MAX_RECORD = 16 * 1024 * 1024

Decide = Callable[[ToolCall], Awaitable[ToolResult | None]]
T = TypeVar("T")


@dataclass(slots=True)
class _Call:
    """One call of the batch, and what this attempt knows of it."""

    call: ToolCall  # with its key
    ended: asyncio.Future[None]  # the call ended (this attempt)
    result: Any = None  # its result's durable future
    intent: Any = None  # its intent's, for a call that records one
    result_journaled: bool = False
    intent_journaled: bool = False
    waits_intent: bool = False  # its intent's action runs (this attempt)


async def run_calls(
    executor: Executor,
    ctx: Context,
    calls: list[ToolCall],
    options: Mapping[str, Any],
    stop_on_error: bool | None,
    decide: Decide,
) -> Any:
    """Run `calls` journaled through `ctx`: as one batch (`stop_on_error`
    given: their `BatchResult`), or one call alone (a list of its result)."""
    async with one_at_a_time(ctx):
        loop = asyncio.get_running_loop()
        handles: asyncio.Future[list[Any]] = loop.create_future()
        gates: dict[int, Gate] = {}
        made = _issue(executor, ctx, calls, handles, gates)
        known: dict[int, ToolResult] = {}
        doubts: list[int] = []
        for i, one in enumerate(made):  # (the journal's values: no action runs yet)
            if one.result_journaled:
                # Replayed as it was, a `deferred` one too (see above).
                known[i] = read_result(await one.result)
            elif one.intent_journaled:
                doubts.append(i)  # it may have run
            else:
                one.waits_intent = one.intent is not None
        for i, one in enumerate(made):
            if one.waits_intent:
                gates[i] = Gate(loop, loop.create_future())
        driver = asyncio.ensure_future(_drive(made, gates))
        try:
            for i in doubts:
                decided = await _while_driven(decide(made[i].call), driver)
                if decided is not None:
                    known[i] = decided
            if driver.done() and driver.exception() is not None:
                driver.result()  # (the attempt ended meanwhile: its error)
            if doubts and attempt_ending(ctx):
                # (a slow decision outlived the attempt: a call run now
                # would never be journaled, and would run on every retry)
                raise RuntimeError("the attempt ended while calls in doubt were decided")
            with submitting():
                _submit(executor, made, known, gates, options, stop_on_error, handles)
            await driver
        except BaseException:
            # Restate cancelled the invocation, or ended this attempt: the calls
            # still running are stopped (on the next attempt they are in doubt,
            # or run again).
            driver.cancel()
            if handles.done():
                handles.result()[-1].cancel()
            ended = RuntimeError("the attempt ended before the intent was stored")
            for gate in gates.values():
                settle(gate.recorded, ended)
            raise
        last = handles.result()[-1]
        return [await last] if stop_on_error is None else await last


def _issue(
    executor: Executor,
    ctx: Context,
    calls: list[ToolCall],
    handles: asyncio.Future[list[Any]],
    gates: dict[int, Gate],
) -> list[_Call]:
    """Each call's commands, issued in order, with their actions."""
    loop = asyncio.get_running_loop()
    invocation = ctx.request().id
    registry = executor.registry
    made: list[_Call] = []

    def actions(i: int, one: _Call) -> tuple[Callable[[], Any], Callable[[], Any]]:
        c = one.call

        async def intent() -> str:
            gate = gates[i]
            await asyncio.wait({gate.asked, one.ended}, return_when=asyncio.FIRST_COMPLETED)
            if gate.asked.done():
                return intent_record(c.id, c.name, c.idempotency_key or "")
            raise asyncio.CancelledError  # no record (see the module's docstring)

        async def result() -> str:
            ended: ToolResult = await (await handles)[i]
            settle(one.ended)
            return _bounded(result_record(ended), ended)

        return intent, result

    for i, (position, given) in enumerate(zip(positions(ctx, len(calls)), calls, strict=True)):
        c = given
        if c.idempotency_key is None:
            key = call_key("restate", invocation, position)
            c = c.model_copy(update={"idempotency_key": key})
        tool = registry.get(c.name)
        asks = tool is not None and not reruns_without_asking(tool.read_only, tool.idempotent)
        one = _Call(c, loop.create_future())
        intent, result = actions(i, one)
        if asks:
            one.intent = ctx.run_typed(step_name(c.name, intent=True), intent, _ONCE)
            one.intent_journaled = journaled(ctx, one.intent)
        one.result = ctx.run_typed(step_name(c.name), result, _ONCE)
        one.result_journaled = journaled(ctx, one.result)
        made.append(one)
    return made


def _bounded(record: str, result: ToolResult) -> str:
    """`record`, or one of `result` cut to fit `MAX_RECORD` as the SDK sends
    it (`_sent`): its output's text cut (what the model reads is cut long
    before), its attachments left out, `metadata["journal_cut"]` the size it
    had. The call ran: it stays so."""
    size = _sent(record)
    if size <= MAX_RECORD:
        return record
    text = result.output if isinstance(result.output, str) else str(result.output)
    cut = result
    # Each character is at most 12 bytes sent (past the BMP: two `\uXXXX`),
    # so the first cut fits; the rest of the result (its metadata, its
    # error) is cut too if it alone is past the bound.
    for keep in (MAX_RECORD // 16, MAX_RECORD // 64):
        shown = text[:keep] + f"... [cut: the output was {size} bytes journaled]"
        update: dict[str, Any] = {
            "output": shown,
            "attachments": (),
            "metadata": {**result.metadata, "journal_cut": size},
        }
        if keep != MAX_RECORD // 16:
            update["metadata"] = {"journal_cut": size}
            update["error"] = None if result.error is None else result.error[:keep]
        cut = result.model_copy(update=update)
        record = result_record(cut)
        if _sent(record) <= MAX_RECORD:
            break
    return record


def _sent(record: str) -> int:
    """The bytes the SDK sends for `record`: its JSON string (`json.dumps`,
    ASCII: a character past it is `\\uXXXX`, a quote or backslash escaped
    again). Counted only for a record that may be past the bound."""
    if len(record) * 12 + 2 <= MAX_RECORD:
        return len(record)
    return len(json.dumps(record))


async def _while_driven(work: Awaitable[T], driver: asyncio.Future[None]) -> T:
    """`work`'s value, unless the driver fails first (the attempt ended: its
    error raises, and `work` is cancelled). A driver with nothing to wait on
    ends at once: then `work` is simply awaited."""
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    try:
        while not task.done():
            if driver.done():
                driver.result()  # (its error, if it failed)
                return await task
            either: set[asyncio.Future[Any]] = {task, driver}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
    return task.result()


def _submit(
    executor: Executor,
    made: list[_Call],
    known: dict[int, ToolResult],
    gates: dict[int, Gate],
    options: Mapping[str, Any],
    stop_on_error: bool | None,
    handles: asyncio.Future[list[Any]],
) -> None:
    ex = executor
    keyed = [one.call for one in made]
    if stop_on_error is None:
        handles.set_result([submit_one(ex, keyed[0], known.get(0), gates.get(0), options)])
    else:
        batch = submit_batch(ex, keyed, stop_on_error, known, gates, options)
        handles.set_result([*batch.calls, batch])


async def _drive(made: list[_Call], gates: dict[int, Gate]) -> None:
    """Wait on Restate for each command whose action runs this attempt: an
    intent stored lets its tool start; an ended call's intent is waited for
    no more (journaled already, or never to be)."""
    where: dict[int, tuple[int, bool]] = {}
    waiting: list[Any] = []
    for i, one in enumerate(made):
        if one.waits_intent:
            where[id(one.intent)] = (i, True)
            waiting.append(one.intent)
        if not one.result_journaled:
            where[id(one.result)] = (i, False)
            waiting.append(one.result)
    while waiting:
        done, waiting = await restate.wait_completed(*waiting)
        for f in done:
            i, is_intent = where[id(f)]
            await f  # (taken: its value is the record just stored)
            if is_intent:
                settle(gates[i].recorded)  # on record: its tool may start
            else:
                settle(made[i].ended)
        waiting = [f for f in waiting if not _over(where[id(f)], made)]


def _over(at: tuple[int, bool], made: list[_Call]) -> bool:
    i, is_intent = at
    return is_intent and made[i].ended.done()
