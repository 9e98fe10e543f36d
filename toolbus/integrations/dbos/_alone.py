"""One mutating call from a sync workflow: its two steps on the workflow's thread.

`DurableExecutor.execute` of a call that records its intent (`CallSteps.asks`)
must know, before it submits the call, whether each of its two steps is
recorded, and DBOS says so only by calling a step's function or not. The
async path (`_steps.run_steps`) runs the two steps as tasks of a loop; here a
loop, or a helper thread, per call would cost about as much as a step. So the
intent's step runs *inside* the result's step function, in the workflow's own
context (a copy taken before: DBOS runs a reservation only from there):

- the result's function is called (no result recorded), then the intent's:
  the call is submitted, and the intent's function waits until its tool asks
  to start (`Run.gate`) and returns the record; the tool starts once DBOS has
  it on disk. A call that ends without starting records no intent;
- the result's function is called and the intent's is not (recorded): the
  call is in doubt, and `decide` rules (its result, or None: it runs again);
- the result's function is not called: the recorded result is replayed (its
  intent not read), or a recorded `deferred` one asked again (see `_durable`),
  its intent then read as `run_steps` reads it.

The call itself is submitted from outside the workflow, as DBOS sees it
(`_outside.outside_dbos`): its tool is the step's work, not part of the workflow.
"""

from __future__ import annotations

import contextvars
import queue
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from ...executor import Executor
from ...models import ToolResult
from ...pipeline import InPlace, Run, Waiter
from .._turns.records import intent_record, read_result, result_record, step_name, was_reasked
from .._turns.submission import give_up, settle, submit_waited
from ._steps import CallSteps, NotStarted

__all__ = ["run_alone"]


class _Escaped(BaseException):
    """An error of the intent's step, carried out of the result's step function
    as a BaseException, so DBOS records nothing for the result either."""

    def __init__(self, error: Exception) -> None:
        self.error = error


_ASKED = object()


class _Watch(Waiter):
    """One call's waiter and its gate (`Run.gate`): the workflow's thread wakes
    for whichever comes first, its tool asking to start or its end; the tool
    then waits until its intent is on disk (`recorded`)."""

    __slots__ = ("events", "recorded")

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.recorded: Future[None] = Future()

    def release(self, value: Any) -> None:
        self.events.put(value)  # its result

    def __call__(self) -> InPlace:
        self.events.put(_ASKED)
        return InPlace(self.recorded)


def run_alone(
    executor: Executor,
    steps: CallSteps,
    options: Mapping[str, Any],
    decide: Callable[[CallSteps], ToolResult | None],
    tools: contextvars.Context,
) -> ToolResult:
    """Run `steps`' call as two steps of the workflow this thread runs; its
    tool in `tools` (`_outside.outside_dbos`)."""
    call = steps.call
    workflow = contextvars.copy_context()  # where a reservation may run
    watch = _Watch()
    runs: list[Run] = []
    results: list[ToolResult] = []
    # The intent's DBOS error: raised once the call has ended, as the async
    # path raises it (the result, a refusal, is recorded first).
    failed: list[BaseException] = []

    def submit(known: ToolResult | None, gated: bool) -> None:
        gate = watch if gated else None
        runs.append(tools.run(submit_waited, executor, call, watch, known, gate, options))

    def intent(reasked: bool) -> Any:
        """Run the intent's step (its function: the call submitted, waiting
        to start); the record if it was there (in doubt), else None."""

        def mark() -> str:
            submit(None, gated=True)
            first = watch.events.get()
            if first is not _ASKED:
                watch.events.put(first)  # (its result, read below)
                raise NotStarted  # it ended without its tool starting: no record
            return intent_record(call.id, call.name, call.idempotency_key or "", reasked=reasked)

        def run_intent() -> str:
            return steps.intent.run({"name": step_name(call.name, intent=True)}, mark)

        try:
            recorded = workflow.run(run_intent)
        except NotStarted:
            return None
        except BaseException as e:
            interrupted = not isinstance(e, Exception)
            if not runs and not interrupted:
                raise  # (nothing submitted: it raises as it is)
            # The tool does not wait for a record that will not come.
            settle(watch.recorded, RuntimeError(f"the intent was not recorded: {type(e).__name__}"))
            if interrupted:
                raise  # (`run_alone` gives the call up, handed on or not)
            failed.append(e)
            return None
        if runs:
            settle(watch.recorded)  # on disk: the tool may start
            return None
        return recorded

    def ended() -> ToolResult:
        """The call's result, once it has one."""
        if not results:
            value = watch.events.get()
            while value is _ASKED:
                value = watch.events.get()
            results.append(value)
        return results[0]

    def step() -> str:
        try:
            intent(reasked=False)
        except Exception as e:
            raise _Escaped(e) from e
        if not runs:  # in doubt
            submit(decide(steps), gated=False)
        return result_record(ended())

    try:
        try:
            record = steps.result.run({"name": step_name(call.name)}, step)
        except _Escaped as e:
            raise e.error from None
        if not runs:  # its result was recorded
            replay = read_result(record)
            if replay.status != "deferred":
                submit(replay, gated=False)
            else:
                recorded = intent(reasked=True)
                if not runs:  # its intent recorded
                    # Deferred, asked again after a recovery and let through: its
                    # tool started, its result went unrecorded. In doubt, as any
                    # such call; else asked again (its request was bound to the
                    # process that made it).
                    submit(decide(steps) if was_reasked(recorded) else None, gated=False)
        result = ended()
    except BaseException as e:
        if not isinstance(e, Exception):
            # Interrupted, wherever it landed (waiting, or once the call was
            # handed on but before it was held): the call is not left running.
            give_up(executor, watch)
        raise
    if failed:
        raise failed[0]
    return result
