"""A batch of calls journaled through a Restate handler's context (`run_calls`).

Each call issues its commands when the batch is made, in the order given, so
a batch replays the same way whatever finished first before a crash: a
`ctx.run` for its result and, for a mutating call that is not idempotent, one
before it for its intent. Restate runs an action only for a command it has
no result of, so each call's state is known once each of its commands has
either returned a journaled value or had its action started; the batch is
then submitted once, with what is known:

- its result recorded: replayed through the executor as `Run.decided` (a
  recorded `deferred` result is asked again, as on DBOS);
- its intent recorded, its result not: in doubt, decided by the rule of
  `toolbus.in_doubt` (its result, or it runs again under its key);
- neither: it runs. Its intent's action waits until the tool asks to start
  (`Run.gate`) and returns the record; the tool starts once Restate has
  stored it. A call that ends without its tool starting records so, but only
  once its result is stored: Restate records every action it runs, and an
  intent saying "not started" with no result after it would let a later
  attempt run the tool with no intent on record.

One coroutine drives Restate for the whole batch (`restate.wait_completed`),
and one batch at a time of a handler's (`one_at_a_time`): the SDK's futures
share one input queue, so two coroutines polling at once can each take the
other's news, and one then waits for good (seen: four `aexecute` gathered).
Calls gathered from tasks of one handler therefore run one after another;
`aexecute_batch` runs them together.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import restate
from restate import Context, RunOptions

from ..._executor._handles import batch_handle
from ...executor import Executor
from ...in_doubt import reruns_without_asking
from ...models import ToolCall, ToolResult
from .._turns.records import (
    call_key,
    intent_record,
    read_result,
    result_record,
    started,
    step_name,
    unstarted_record,
)
from .._turns.submission import Gate, settle, submit_one, submit_options

__all__ = ["inside_a_call", "one_at_a_time", "run_calls"]

# A call's position in its invocation, counted per attempt (a context is one
# attempt's): the same for the same call on every attempt.
_made: weakref.WeakKeyDictionary[Context, int] = weakref.WeakKeyDictionary()
_polling: weakref.WeakKeyDictionary[Context, asyncio.Lock] = weakref.WeakKeyDictionary()
# Set in the context a call's tool runs in (copied at submission): a call the
# tool makes is the executor's own, as inside any `ctx.run` action.
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "toolbus_restate_call", default=False
)


def inside_a_call() -> bool:
    """Whether this code runs in a toolbus call journaled by a handler (its tool)."""
    return _inside.get()


def one_at_a_time(ctx: Context) -> asyncio.Lock:
    """The lock a handler's toolbus steps wait on Restate under (see above)."""
    lock = _polling.get(ctx)
    if lock is None:
        lock = _polling[ctx] = asyncio.Lock()
    return lock


# Each action returns its record or raises nothing: Restate need not retry it.
_ONCE: RunOptions[str] = RunOptions(max_attempts=1)

Decide = Callable[[ToolCall], Awaitable[ToolResult | None]]


@dataclass(slots=True)
class _Call:
    """One call of the batch, and what this attempt learns of its commands."""

    call: ToolCall  # with its key
    result: Any = None  # the result's durable future
    intent: Any = None  # the intent's, for a call that records one
    # Whether each is journaled: True once it returns a value without its
    # action, False once its action starts, None until then.
    result_recorded: bool | None = None
    intent_recorded: bool | None = None
    intent_value: Any = None  # its journaled record, if it is
    stored: asyncio.Future[None] | None = None  # its result on record


class _Learning:
    """Counts the commands whose state is not known yet; `known` ends when
    none is left."""

    __slots__ = ("known", "left")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.left = 0
        self.known: asyncio.Future[None] = loop.create_future()

    def learn(self, one: _Call, *, intent: bool, recorded: bool) -> None:
        if intent:
            if one.intent_recorded is not None:
                return
            one.intent_recorded = recorded
        else:
            if one.result_recorded is not None:
                return
            one.result_recorded = recorded
        self.left -= 1
        if self.left == 0 and not self.known.done():
            self.known.set_result(None)


def _positions(ctx: Context, n: int) -> range:
    first = _made.get(ctx, 0)
    _made[ctx] = first + n
    return range(first + 1, first + n + 1)


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
        invocation = ctx.request().id
        handles: asyncio.Future[list[Any]] = loop.create_future()
        gates: dict[int, Gate] = {}
        made: list[_Call] = []
        learning = _Learning(loop)

        async def outcome(i: int) -> ToolResult:
            result: ToolResult = await (await handles)[i]
            return result

        def actions(i: int, one: _Call) -> tuple[Callable[[], Any], Callable[[], Any]]:
            c = one.call

            async def intent() -> str:
                assert one.stored is not None
                learning.learn(one, intent=True, recorded=False)
                gate = gates[i] = Gate(loop, loop.create_future())
                await asyncio.wait({gate.asked, one.stored}, return_when=asyncio.FIRST_COMPLETED)
                if gate.asked.done():
                    return intent_record(c.id, c.name, c.idempotency_key or "")
                return unstarted_record(c.id, c.name)

            async def result() -> str:
                learning.learn(one, intent=False, recorded=False)
                return result_record(await outcome(i))

            return intent, result

        registry = executor.registry
        for i, (position, given) in enumerate(zip(_positions(ctx, len(calls)), calls, strict=True)):
            c = given
            if c.idempotency_key is None:
                c = c.model_copy(
                    update={"idempotency_key": call_key("restate", invocation, position)}
                )
            tool = registry.get(c.name)
            asks = tool is not None and not reruns_without_asking(tool.read_only, tool.idempotent)
            one = _Call(c, stored=loop.create_future())
            intent, result = actions(i, one)
            if asks:
                one.intent = ctx.run_typed(step_name(c.name, intent=True), intent, _ONCE)
                learning.left += 1
            one.result = ctx.run_typed(step_name(c.name), result, _ONCE)
            learning.left += 1
            made.append(one)

        driver = asyncio.ensure_future(_drive(made, gates, learning))
        try:
            await asyncio.wait({learning.known, driver}, return_when=asyncio.FIRST_COMPLETED)
            if not learning.known.done():
                driver.result()  # (its error)
                raise RuntimeError("the journal ended before every call's state was known")
            known: dict[int, ToolResult] = {}
            for i, one in enumerate(made):
                if one.result_recorded:
                    replay = read_result(await one.result)
                    if replay.status != "deferred":  # (else asked again)
                        known[i] = replay
                elif one.intent_recorded and started(one.intent_value):
                    decided = await decide(one.call)  # it may have run: in doubt
                    if decided is not None:
                        known[i] = decided
            _submit(executor, made, known, gates, options, stop_on_error, handles)
            await driver
        except BaseException:
            # Restate cancelled the invocation, or ended this attempt: the calls
            # still running are stopped (on the next attempt they are in doubt,
            # or run again).
            driver.cancel()
            if handles.done():
                handles.result()[-1].cancel()
            for gate in gates.values():
                settle(
                    gate.recorded, RuntimeError("the attempt ended before the intent was stored")
                )
            raise
        last = handles.result()[-1]
        return [await last] if stop_on_error is None else await last


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
    # A gate only for a call that runs (its intent's action started; a call
    # decided has none to pass).
    gated = {i: g for i, g in gates.items() if i not in known}
    token = _inside.set(True)  # (in the contexts the tools run in, copied now)
    try:
        if stop_on_error is None:
            handles.set_result([submit_one(ex, keyed[0], known.get(0), gated.get(0), options)])
            return
        batch = batch_handle(
            ex._submit_batch,
            ex._stop,
            ex._blocks_its_loop,
            keyed,
            stop_on_error,
            known=known,
            gates=gated,
            **submit_options(options, one=False),
        )
    finally:
        _inside.reset(token)
    handles.set_result([*batch.calls, batch])


async def _drive(made: list[_Call], gates: dict[int, Gate], learning: _Learning) -> None:
    """Wait for each durable future of the batch: one that returns a journaled
    value says its command was recorded before; else its action ran now, and
    an intent stored lets its tool start, a result stored lets its call's
    intent say it never did."""
    where: dict[int, tuple[int, bool]] = {}
    waiting: list[Any] = []
    for i, one in enumerate(made):
        for f, is_intent in ((one.intent, True), (one.result, False)):
            if f is not None:
                where[id(f)] = (i, is_intent)
                waiting.append(f)
    while waiting:
        done, waiting = await restate.wait_completed(*waiting)
        for f in done:
            i, is_intent = where[id(f)]
            one = made[i]
            value = await f  # (taken: its value is the record)
            if is_intent:
                if one.intent_recorded is None:  # journaled before
                    one.intent_value = value
                    learning.learn(one, intent=True, recorded=True)
                elif i in gates:
                    settle(gates[i].recorded)  # on record: its tool may start
            else:
                learning.learn(one, intent=False, recorded=True)  # (unless it ran now)
                assert one.stored is not None
                settle(one.stored)
