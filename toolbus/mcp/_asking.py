"""What a server asks the client while a call is open, and which call it is about.

A server may send requests of its own while one of its tools runs: input
from a person (elicitation, `_elicitation.py`), a sample from the client's
model (`_sampling.py`). The connection answers each through a handler of the
user's; what is shared lives here:

- `Asking`, a toolbus call in flight, and `while_asking`, which makes it the
  one a request is about: in the task that sends the call (on 2026-07-28 the
  SDK answers the server's requests in that task, from its
  `InputRequiredResult`), and among the connection's calls in flight (on
  2025-11-25 a request arrives beside the call and names none: it is the
  call's when the connection has that one call in flight, `about`);
- `answered`: a handler's answer, sync or async, a sync one in a thread of its
  own, within the call's deadline;
- `refused`: an error reply that the call ends with, saying why.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, TypeVar

import mcp_types as types

from ..tools import ToolContext

__all__ = ["ASKING", "Asking", "about", "answered", "refused", "while_asking"]

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Asking:
    """A toolbus call in flight on a connection, as the server's requests see it.

    `failure`: why an answer for it was not sent (the call ends with it);
    `declined`: what the server asked that nobody could answer (no handler).
    """

    ctx: ToolContext
    tool: str
    failure: str | None = None
    declined: list[str] = field(default_factory=list)


ASKING: contextvars.ContextVar[Asking | None] = contextvars.ContextVar(
    "toolbus_mcp_asking", default=None
)
"""The call whose request is running in this task (set by `while_asking`)."""


async def while_asking(
    asking: Asking | None, in_flight: set[Asking], send: Callable[[], Awaitable[T]]
) -> T:
    """`send()` (a call's request) with `asking` as the call that the server's
    requests meanwhile are about: in this task and among the calls in flight."""
    if asking is None:
        return await send()
    ASKING.set(asking)
    in_flight.add(asking)
    try:
        return await send()
    finally:
        in_flight.discard(asking)


def about(in_flight: Collection[Asking]) -> Asking | None:
    """The call a request that arrived now is about, if toolbus can tell."""
    asking = ASKING.get()
    if asking is None and len(in_flight) == 1:  # 2025-11-25: the only call it can be
        (asking,) = in_flight
    return asking


async def answered(
    handler: Callable[[Any], object], request: object, asking: Asking | None, name: str
) -> object:
    """`handler(request)`, within the call's deadline (TimeoutError past it).

    A sync handler runs in a daemon thread called `name`: a person may take
    minutes, and a pool's thread would be joined when the connection's loop
    shuts down."""
    remaining = asking.ctx.remaining if asking is not None else None
    async with asyncio.timeout(remaining):
        if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 (an object with an async __call__)
        ):
            return await handler(request)  # type: ignore[misc]
        answer = await _in_thread(handler, request, name)
        if inspect.isawaitable(answer):  # a sync function that returned a coroutine
            return await answer
        return answer


async def _in_thread(handler: Callable[[Any], object], request: object, name: str) -> object:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[object] = loop.create_future()

    def settle(value: object, error: BaseException | None) -> None:
        if done.done():
            return  # past the deadline: nobody waits
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    def work() -> None:
        value: object = None
        error: BaseException | None = None
        try:
            value = handler(request)
        except BaseException as e:
            error = e
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass  # the connection's loop has closed: nobody waits

    threading.Thread(target=work, name=name, daemon=True).start()
    return await done


def refused(asking: Asking | None, why: str) -> types.ErrorData:
    """The error reply for an answer that was not sent; the call ends with `why`."""
    if asking is not None and asking.failure is None:
        asking.failure = why
    return types.ErrorData(code=types.INVALID_PARAMS, message=f"toolbus: {why}")
