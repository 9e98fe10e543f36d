"""What toolbus knows of the Restate handler it runs in: its context (None
where a call is the executor's own), whether the journal holds a command's
result, a call's position, and the lock its steps wait on Restate under.

Some of these read the SDK's invocation context (restate-sdk 1.3, the
version the `restate` extra pins): which actions it has still to run
(`run_coros_to_execute`: a command whose result the journal holds has none),
which tasks run actions (`tasks`), and whether the server closed its side
of the stream (`receive`). The public API says the first only
once a future is awaited, when it is too late to decide, and not the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from collections.abc import Iterator
from typing import Any

from restate import Context
from restate.extensions import current_context

__all__ = [
    "attempt_ending",
    "handler_context",
    "journaled",
    "one_at_a_time",
    "positions",
    "submitting",
]

# A call's position in its invocation, counted per attempt (a context is one
# attempt's): the same for the same call on every attempt.
_made: weakref.WeakKeyDictionary[Context, int] = weakref.WeakKeyDictionary()
_polling: weakref.WeakKeyDictionary[Context, asyncio.Lock] = weakref.WeakKeyDictionary()
# Set in the context a call's tool runs in (copied at submission): a call the
# tool makes is the executor's own, as inside any `ctx.run` action.
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "toolbus_restate_call", default=False
)


def handler_context() -> Context | None:
    """The context of the Restate handler this code runs in, if it runs in
    the handler itself: None in a toolbus call's tool and in a `ctx.run`
    action (a call made there is the executor's own, as the action is one
    journal entry), and outside any handler."""
    if _inside.get():
        return None
    try:
        ctx = current_context()
    except LookupError:  # (the SDK's variable has no default)
        return None
    if ctx is None or _in_an_action(ctx):
        return None
    return ctx


def _in_an_action(ctx: Context) -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True  # a thread: a sync action's (or one the handler started)
    running = getattr(getattr(ctx, "tasks", None), "tasks", ())
    return asyncio.current_task() in running  # an async action's task


@contextlib.contextmanager
def submitting() -> Iterator[None]:
    """Calls submitted in here run their tools in a context marked as a
    call's (copied at submission): `handler_context` is None there."""
    token = _inside.set(True)
    try:
        yield
    finally:
        _inside.reset(token)


def journaled(ctx: Context, future: Any) -> bool:
    """Whether the journal holds the result of `future`'s command, asked right
    after the command is issued: the SDK then has no action to run for it."""
    pending = getattr(ctx, "run_coros_to_execute", None)
    if not isinstance(pending, dict):
        raise RuntimeError(
            "toolbus.integrations.restate needs restate-sdk 1.3 (pip install 'toolbus[restate]')"
        )
    return future.handle not in pending


def attempt_ending(ctx: Context) -> bool:
    """Whether the server has closed its side of this attempt's stream: it
    asks the handler to suspend, or aborts the attempt (its inactivity and
    abort timers): no record the handler writes now will be confirmed."""
    closed = getattr(getattr(ctx, "receive", None), "_http_input_closed", None)
    return isinstance(closed, asyncio.Event) and closed.is_set()


def positions(ctx: Context, n: int) -> range:
    """The positions of the invocation's next `n` calls (from 1)."""
    first = _made.get(ctx, 0)
    _made[ctx] = first + n
    return range(first + 1, first + n + 1)


def one_at_a_time(ctx: Context) -> asyncio.Lock:
    """The lock a handler's toolbus steps wait on Restate under: the SDK's
    futures share one input queue, so two coroutines polling at once can each
    take the other's news, and one then waits for good."""
    lock = _polling.get(ctx)
    if lock is None:
        lock = _polling[ctx] = asyncio.Lock()
    return lock
