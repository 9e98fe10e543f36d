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
  call's when the connection has that one call in flight, `about`; a request
  of the caller's own, a resource read, is about no call, `NOBODY`);
- `answered`: a handler's answer, sync or async, a sync one in a thread of its
  own, within the call's deadline;
- `refused`: an error reply that the call ends with, saying why.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import mcp_types as types

from ..masking import EMPTY_SCRUBBER, Scrubber
from ..tools import ToolContext
from ..tools._context import call_scrubber
from ..tools._peer import Peer

__all__ = [
    "ASKING",
    "NOBODY",
    "Asking",
    "Calls",
    "HandlerFailed",
    "InFlight",
    "PastDeadline",
    "about",
    "answered",
    "checked_handler",
    "every_scrubber",
    "failed",
    "publish",
    "refused",
    "while_asking",
]

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Asking:
    """A toolbus call in flight on a connection, as the server's requests see it.

    `failure`: why an answer for it was not sent (the call ends with it);
    `declined`: what the server asked that nobody could answer (no handler).
    """

    ctx: ToolContext
    tool: str
    # The MCP client the call is served to, if it is (a server's log messages go on to it).
    peer: Peer | None = None
    failure: str | None = None
    declined: list[str] = field(default_factory=list)
    # False for a guess (`about`): the call is told of nothing that went wrong.
    sure: bool = True


ASKING: contextvars.ContextVar[Asking | None] = contextvars.ContextVar(
    "toolbus_mcp_asking", default=None
)
"""The call whose request is running in this task (set by `while_asking`)."""


async def while_asking(
    asking: Asking | None, in_flight: set[Asking], send: Callable[[], Awaitable[T]]
) -> T:
    """`send()` (a call's request) with `asking` as the call that the server's
    requests meanwhile are about: in this task and among the calls in flight
    (None: a request of the caller's own, about no call: `NOBODY`)."""
    # Reset after: a task this one starts later (a reconnection, a health
    # check) must not take the call for its own.
    token = ASKING.set(asking if asking is not None else NOBODY)
    if asking is not None:
        in_flight.add(asking)
    try:
        return await send()
    finally:
        if asking is not None:
            in_flight.discard(asking)
        ASKING.reset(token)


NOBODY = Asking(ToolContext(call_id="", tool=""), "")
"""What `ASKING` holds in a request of the caller's own (a resource read): a
server's request then is about no toolbus call, not a guess at one."""


def about(in_flight: Collection[Asking]) -> Asking | None:
    """The call a request that arrived now is about, if toolbus can tell.

    On 2025-11-25 the connection's only call in flight is a guess (`sure`
    false): a server that ignored a call's cancellation may still ask for it.
    The guess names the call to the handler, publishes under it and notes
    what was declined for it, but never fails it: the server's own reply to
    the refusal is what that call gets.
    """
    asking = ASKING.get()
    if asking is NOBODY:
        return None
    if asking is None and len(in_flight) == 1:
        (only,) = in_flight
        asking = Asking(only.ctx, only.tool, declined=only.declined, sure=False)
    return asking


class PastDeadline(Exception):
    """The call's deadline came before the handler answered."""


async def answered(
    handler: Callable[[Any], object], request: object, asking: Asking | None, name: str
) -> object:
    """`handler(request)`, within the call's deadline (`PastDeadline` past it).

    A sync handler runs in a daemon thread called `name`: a person may take
    minutes, and a pool's thread would be joined when the connection's loop
    shuts down. Whatever the handler raises is an `Exception` here (a
    `SystemExit` or a `CancelledError` of its own would stop the connection's
    loop, or have the SDK ask again): `HandlerFailed` names its type."""
    remaining = asking.ctx.remaining if asking is not None else None
    try:
        async with asyncio.timeout(remaining) as clock:
            return await _called(handler, request, name)
    except TimeoutError:
        if clock.expired():
            raise PastDeadline from None
        raise
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the request itself was cancelled: the call ended
        raise HandlerFailed("CancelledError") from None
    except (SystemExit, KeyboardInterrupt, GeneratorExit) as e:
        raise HandlerFailed(type(e).__name__) from None


class HandlerFailed(Exception):
    """A handler raised what is not an `Exception` (`args[0]`: its type's name)."""


async def _called(handler: Callable[[Any], object], request: object, name: str) -> object:
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
        except Exception as e:
            error = e
        except BaseException as e:  # raised on the loop, it would stop it
            error = HandlerFailed(type(e).__name__)
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass  # the connection's loop has closed: nobody waits

    threading.Thread(target=work, name=name, daemon=True).start()
    return await done


def failed(error: Exception) -> str:
    """A handler's failure, by its type only: its message may hold what the
    person typed, or quote the prompt."""
    kind = error.args[0] if isinstance(error, HandlerFailed) else type(error).__name__
    return f"failed ({kind})"


def checked_handler(handler: object, owner: str, option: str, takes: str) -> Any:
    """`handler` if it is None or callable, else a `TypeError` naming `owner`
    and the `option` (a function of what it `takes`)."""
    if handler is not None and not callable(handler):
        raise TypeError(
            f"{owner}: {option} must be a function of {takes}, got {type(handler).__name__}"
        )
    return handler


def publish(asking: Asking | None, message: str, **data: Any) -> None:
    """A `tool:progress` event of the call a request is about, if any and
    while it runs (nothing after its `tool:finished`)."""
    if asking is not None and not asking.ctx.cancelled:
        asking.ctx.progress(message, None, **data)


ENDED_KEPT = 64
"""How many of a connection's calls that ended are remembered for their secrets."""


class Calls(set[Asking]):
    """A connection's calls in flight, and what the last `ENDED_KEPT` of
    them that ended masked: a server's log message sent after a call's
    result, or beside another call, may still quote its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: deque[Scrubber] = deque(maxlen=ENDED_KEPT)

    def discard(self, element: object) -> None:
        if isinstance(element, Asking) and element in self:
            scrubber = call_scrubber(element.ctx)
            if scrubber:
                self.ended.append(scrubber)
        super().discard(element)


def every_scrubber(in_flight: Collection[Asking]) -> Scrubber:
    """What every call in `in_flight` masked, and the calls of it that ended
    lately (a `Calls`, or an `InFlight` of one): for a server's message that
    toolbus cannot tie to one call."""
    global _last_merged
    scrubbers = tuple(call_scrubber(a.ctx) for a in list(in_flight))
    scrubbers += tuple(getattr(in_flight, "ended", ()))
    last = _last_merged
    if last[0] == scrubbers:  # (compared by identity: the same calls as last time)
        return last[1]
    # Built once from every value: merging one by one would sort and compile
    # again at each step, a cost that grows with the square of the calls.
    values = [v for s in scrubbers for v in s.values]
    scanner = next((s.scanner for s in scrubbers if s.scanner is not None), None)
    merged = Scrubber(values, scanner) if values or scanner is not None else EMPTY_SCRUBBER
    _last_merged = (scrubbers, merged)  # (one tuple: swapped whole)
    return merged


# The last `every_scrubber` answer, by the scrubbers it was made of: a server
# that logs many lines while the same calls are in flight pays for one build.
_last_merged: tuple[tuple[Scrubber, ...], Scrubber] = ((), EMPTY_SCRUBBER)


class InFlight:
    """The calls in flight on a connection: its `Link`'s `asking`, read on
    its loop (the `Link` is made after the client factory that needs this)."""

    def __init__(self, calls: Callable[[], Collection[Asking]]) -> None:
        self._calls = calls

    def __len__(self) -> int:
        return len(self._calls())

    def __iter__(self) -> Iterator[Asking]:
        return iter(self._calls())

    def __contains__(self, item: object) -> bool:
        return item in self._calls()

    @property
    def ended(self) -> Collection[Scrubber]:
        """What the calls that ended lately masked (`Calls.ended`)."""
        return getattr(self._calls(), "ended", ())


def refused(asking: Asking | None, why: str) -> types.ErrorData:
    """The error reply for an answer that was not sent; the call ends with `why`."""
    if asking is not None and asking.sure and asking.failure is None:
        asking.failure = why
    return types.ErrorData(code=types.INVALID_PARAMS, message=f"toolbus: {why}")
