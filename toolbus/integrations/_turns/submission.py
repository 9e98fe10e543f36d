"""How a durable engine's wrapper hands calls to the executor: the keywords
it takes (checked before any step, where an engine would record the error for
good), a call submitted with its result decided already or waiting at its
gate until its intent is recorded (`Gate`), and a run stopped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..._executor._handles import batch_handle, call_handle
from ..._executor._submission import check_clocks
from ..._options import check_priority
from ...agent_runs import check_agent_run
from ...approvals import check_approval, check_approvals
from ...executor import Executor
from ...models import ToolCall, ToolResult
from ...pipeline import InPlace, Run, Waiter

__all__ = [
    "MANY",
    "ONE",
    "Gate",
    "check_values",
    "check_wrapped",
    "checked",
    "give_up",
    "no_loop",
    "settle",
    "submit_batch",
    "submit_one",
    "submit_options",
    "submit_waited",
    "wrapped",
]

W = TypeVar("W")

# What `execute`/`aexecute` and the batch methods take besides the calls.
ONE = frozenset({"approval", "priority", "timeout", "call_timeout", "agent_run"})
MANY = frozenset({"stop_on_error", "approvals", "priority", "timeout", "call_timeout", "agent_run"})


@dataclass
class Gate:
    """Between a call's run (which asks to start, on its worker) and the
    engine's loop (which records the intent, then lets it start)."""

    loop: asyncio.AbstractEventLoop
    asked: asyncio.Future[None]
    recorded: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)

    def __call__(self) -> InPlace:
        """`Run.gate` (on the call's worker): ask to start; the wait ends
        once the intent is recorded."""
        self.loop.call_soon_threadsafe(settle, self.asked)
        return InPlace(self.recorded)


def settle(
    fut: asyncio.Future[None] | concurrent.futures.Future[None], error: BaseException | None = None
) -> None:
    """End `fut` (with `error`, if given) unless it has ended: a gate's wait
    cancelled (a deadline, a cancellation) cancels the future it waited for."""
    if fut.done():
        return
    try:
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)
    except (asyncio.InvalidStateError, concurrent.futures.InvalidStateError):
        pass  # (ended by the other side meanwhile)


def submit_one(
    executor: Executor,
    call: ToolCall,
    decided: ToolResult | None,
    gate: Callable[[], Awaitable[None]] | None,
    options: Mapping[str, Any],
) -> Any:
    """Submit one call (its result `decided` already, or waiting at `gate`
    before its tool runs); return its handle."""
    return call_handle(
        executor._submit_one,
        executor._stop,
        executor._blocks_its_loop,
        call,
        decided=decided,
        gate=gate,
        **submit_options(options, one=True),
    )


def submit_batch(
    executor: Executor,
    calls: list[ToolCall],
    stop_on_error: bool,
    known: Mapping[int, ToolResult],
    gates: Mapping[int, Callable[[], Awaitable[None]]],
    options: Mapping[str, Any],
    contexts: list[Any] | None = None,
) -> Any:
    """Submit `calls` as one batch (those in `known` decided already, those
    in `gates` waiting there before their tools run; each in its own context
    of `contexts`, if given); return its handle."""
    extra: dict[str, Any] = {} if contexts is None else {"contexts": contexts}
    return batch_handle(
        executor._submit_batch,
        executor._stop,
        executor._blocks_its_loop,
        calls,
        stop_on_error,
        known=known,
        gates=gates,
        **extra,
        **submit_options(options, one=False),
    )


def submit_waited(
    executor: Executor,
    call: ToolCall,
    waiter: Waiter,
    decided: ToolResult | None,
    gate: Callable[[], Awaitable[None]] | None,
    options: Mapping[str, Any],
) -> Run:
    """`submit_one` without a handle: `waiter` is released with the result."""
    return executor._submit_one(
        call, waiter, decided=decided, gate=gate, **submit_options(options, one=True)
    )


def give_up(executor: Executor, waiter: Waiter) -> None:
    """Nobody waits on `waiter` any more (its thread was interrupted): the
    calls handed on with it end `cancelled`, in whatever state they are."""
    executor._waiting.given_up(waiter)


def check_values(options: Mapping[str, Any], *, one: bool) -> None:
    """Raise as `execute*` would for a keyword's bad value (`one`: a call's
    method, else a batch's)."""
    if options.get("priority") is not None:
        check_priority(options["priority"])
    clocks = (options.get("timeout"), options.get("call_timeout"))
    if clocks != (None, None):
        owner = (
            "execute, aexecute or submit"
            if one
            else "execute_batch, aexecute_batch or submit_batch"
        )
        check_clocks(clocks, owner)
    if options.get("approval") is not None:
        check_approval(options["approval"])
    if options.get("approvals") is not None:
        check_approvals(options["approvals"])
    if options.get("agent_run") is not None:
        check_agent_run(options["agent_run"], "execute*")


def submit_options(options: Mapping[str, Any], *, one: bool) -> dict[str, Any]:
    """The keywords of `execute*` as `_submit_one`/`_submit_batch` take them."""
    made: dict[str, Any] = {
        "priority": options.get("priority"),
        "clocks": (options.get("timeout"), options.get("call_timeout")),
        "agent_run": options.get("agent_run"),
    }
    if one:
        made["approval"] = options.get("approval")
    else:
        made["approvals"] = options.get("approvals")
    return made


def checked(
    options: Mapping[str, Any], allowed: frozenset[str], method: str, owner: str = "DurableExecutor"
) -> None:
    """Raise for a keyword, or a keyword's value, the method refuses: before
    any step, where DBOS would record the error as the step's for good."""
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(f"{owner}.{method}() got unexpected keyword arguments {unknown}")
    check_values(options, one=allowed is ONE)


def no_loop(method: str, owner: str = "DurableExecutor") -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"{owner}.{method}() was called while an event loop is running: use await a{method}(...)"
    )


def check_wrapped(executor: Any, on_in_doubt: Any) -> None:
    """Raise for what a durable wrapper (`durable(executor, on_in_doubt=)`) refuses."""
    if not isinstance(executor, Executor):
        raise TypeError(
            f"durable(): executor must be a toolbus.Executor, got {type(executor).__name__}"
        )
    if on_in_doubt is not None and not callable(on_in_doubt):
        raise TypeError(
            "durable(): on_in_doubt must be a callable (sync or async), got "
            f"{type(on_in_doubt).__name__}"
        )


def wrapped(wrapper: type[W], executor: Any, on_in_doubt: Any, who: str) -> W:
    """`executor` as the agent loop `who` takes it: a wrapper as it is (its
    own `on_in_doubt` then, none given here), an `Executor` wrapped."""
    if isinstance(executor, wrapper):
        if on_in_doubt is not None:
            raise ValueError(
                f"{who}: on_in_doubt= is the DurableExecutor's own; give it there, "
                "or pass the Executor itself"
            )
        return executor
    return wrapper(executor, on_in_doubt=on_in_doubt)  # type: ignore[call-arg]
