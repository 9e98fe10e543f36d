"""What comes back from a tool's Ray actor, and what a Ray error means.

A reply is JSON bytes (`_ray_actor.py`): the value or the exception's
description, rebuilt by `_remote.py` as for the process backend. A streamed
call (a tool that takes a `ToolContext`) yields its progress first, each
published on the agent's bus as it arrives, then the reply. A Ray error
instead of a reply says what became of the actor: killed by toolbus, dead
(a crash: `TOOL_CRASHED`, and the actor is replaced within the tool's
restart budget), or the call cancelled on it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ray import exceptions as rx

from ..pipeline import (
    ToolCrashed,
    WorkerKilled,
    log_contained,
    logged,
    progress_fraction,
    publish_progress,
)
from ..tools import ToolError
from . import _wire

if TYPE_CHECKING:
    from ..pipeline import Run, Services
    from ._ray_pool import RayActor, ToolActors

__all__ = ["consume", "describe_death", "failure"]


async def consume(ref: Any, run: Run, services: Services) -> dict[str, Any]:
    """A streamed call: publish each progress message as it comes (and write
    each log message); the reply."""
    reply: dict[str, Any] | None = None
    unread: ValueError | None = None
    async for item in ref:
        try:
            message = _wire.parse(await item)
        except ValueError as e:
            # Not the reply if more follows (it comes last): a progress or log
            # message, lost as one that cannot be written is; the call goes on.
            if unread is not None:
                _dropped(run, unread)
            unread = e
            continue
        if unread is not None:
            _dropped(run, unread)
            unread = None
        if message.get("kind") == "progress":
            data = message.get("data")
            publish_progress(
                run,
                services,
                str(message.get("message", "")),
                progress_fraction(message.get("fraction")),
                data if isinstance(data, dict) else {},
            )
        elif message.get("kind") == "log":
            logged(run, message)
        else:
            reply = message
    if unread is not None:  # the last item: the reply
        raise unread
    if reply is None:
        raise RuntimeError("the Ray actor's stream ended without a reply")
    return reply


def _dropped(run: Run, error: ValueError) -> None:
    log_contained(
        f"a progress or log message of call {run.call.id} could not be read from its Ray "
        "actor; dropped",
        error,
        run.scrubber,
    )


def failure(pool: ToolActors, actor: RayActor, error: Exception) -> BaseException:
    """What a Ray error instead of a reply means, for the call and for its actor."""
    name = pool.name
    if actor.killed:  # by toolbus (a deadline, or the executor closing)
        pool.lost(actor, crashed=False)
        return WorkerKilled()
    cause = getattr(error, "cause", None)
    if isinstance(error, rx.TaskCancelledError) or isinstance(
        cause, rx.TaskCancelledError | asyncio.CancelledError
    ):
        # Not asked for by toolbus (that cancellation never reads the ref):
        # the tool's own, reported as a local one is.
        pool.release(actor)
        return asyncio.CancelledError()
    if isinstance(error, rx.RayTaskError):
        pool.release(actor)
        return ToolError(f"Tool '{name}' failed on its Ray actor: {cause or error}")
    if isinstance(error, rx.RayError):
        pool.lost(actor, crashed=True)
        where = f"pid {actor.pid} on {actor.node}" if actor.pid else "starting"
        return ToolCrashed(
            f"Tool '{name}' crashed: its Ray actor ({where}) died: {describe_death(error)}"
        )
    pool.release(actor)
    if isinstance(error, ValueError):  # it ran; what it returned is lost
        return ToolError(
            f"Tool '{name}' failed: its reply could not be read from its Ray actor ({error})",
            retryable=False,
        )
    return error  # a bug, reported as the tool's error


def describe_death(error: BaseException) -> str:
    """What a Ray error says about an actor's death, in a sentence or two."""
    text = " ".join(str(error).split())
    at = text.find("Worker exit detail:")
    if at >= 0:
        detail = text[at + len("Worker exit detail:") :].strip()
        # Ray goes on with the common causes of any death: not about this one.
        detail = detail.split(" Some common causes")[0]
        return detail[:200]
    at = text.find("The actor is dead because")
    if at >= 0:
        return text[at : at + 200]
    first = str(error).strip().splitlines()
    return (first[0] if first else type(error).__name__)[:200]
