"""A part of `RayBackend`: one call's round trip to a Ray actor.

Two ways. The loop path (`_call`, a coroutine on the executor's loop) takes an
actor (starting Ray, or one, if needed), sends the call and awaits its
ObjectRef there. A direct call (`_send`, see `_direct.py`) is sent from the
thread that dispatches it, to an actor free now; Ray completes its reply on a
thread of its own, which hands it to the loop. Both share the request, the
bookkeeping `kill` reads (`_serving`) and what a reply means.

Nothing here imports Ray: what needs it, the backend loads when it is made.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..pipeline import SetUpTime, ToolCrashed, WorkerKilled
from ..tools import ToolError
from . import _wire
from ._direct import Direct, runs_plain
from ._remote import value_of
from ._remote_base import RemoteBackend

if TYPE_CHECKING:
    from ..pipeline import Run, Services
    from ..tools import Tool, ToolContext
    from ._protocol import Job
    from ._ray_pool import RayActor, ToolActors

__all__ = ["CANCEL_GRACE", "CONNECT_TIMEOUT", "ActorCalls"]

# How long an async call cancelled with `ray.cancel` (a deadline, a
# cancellation) may take to end, unless `RayBackend(cancel_grace=)` says. A
# tool that swallows its CancelledError, or blocks its actor's event loop,
# would hold its slots for ever: past this, its actor is killed and replaced
# (toolbus's own kill: no crash counted), and the calls it was serving
# besides end TOOL_CRASHED.
CANCEL_GRACE = 1.0

# How long `ray.init(address)` may take to connect to a cluster at an address
# (a local Ray that toolbus starts has `START_TIMEOUT`): past it, the backend
# is unavailable (its calls are refused `TOOL_UNAVAILABLE`, naming the address).
CONNECT_TIMEOUT = 20.0

# What `kill` reads: the actor serving a run, and the ObjectRef of its call.
_Serving = tuple["RayActor", Any]


class ActorCalls(RemoteBackend[_Serving]):
    """The calls of a `RayBackend` (a part of it)."""

    _pools: dict[int, tuple[Tool, ToolActors]]
    _session: Any
    _checked: asyncio.Future[str | None] | None
    _unavailable: str | None
    _vars: Any
    _encode: Callable[[Any], bytes]
    _context_pairs: Callable[..., list[Any]]
    _consume: Callable[[Any, Run, Services], Any]
    _failure: Callable[[ToolActors, RayActor, Exception], BaseException]
    # RayBackend(cancel_grace=): how long a cancelled async call may take to end.
    cancel_grace: float = CANCEL_GRACE
    # Cancelled async calls not ended yet, by id of their ref: (ref, tool id).
    _cancelled: dict[int, tuple[Any, int]]
    _lingering: Any  # Counter of those, by tool id
    _held: set[Run]  # async calls cancelled while being sent (`_hold`)

    if TYPE_CHECKING:

        def _killed(self, run: Run, actor: RayActor, reason: str) -> None: ...
        def _cancel_ref(self, ref: Any) -> None: ...

    async def _ready(self, run: Run, pool: ToolActors) -> RayActor:
        """Ray up and an actor ready: off the deadline's clock (the first call
        of a tool pays for it; a wait for a busy pool is in the scheduler's queue)."""
        from ._ray_pool import START_TIMEOUT

        with SetUpTime(run, 2 * START_TIMEOUT):
            try:
                session = self._session
                if session is None:
                    raise RuntimeError(self._stopped_text)
                address = getattr(self, "address", None)
                # Connecting to a running cluster takes a second or two; starting
                # a local Ray, longer on a busy machine.
                limit = CONNECT_TIMEOUT if address not in (None, "local") else START_TIMEOUT
                where = f" at {address!r}" if address else ""
                try:
                    await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(session)), limit)
                except TimeoutError:
                    # `ray.init` is stuck (an address nobody answers at): every
                    # later call is refused at once, rather than waiting again.
                    self._unavailable = f"Ray{where} did not answer within {limit:g} s"
                    raise ToolCrashed(self._unavailable, retry=False) from None
                except (ToolCrashed, asyncio.CancelledError):
                    raise
                except Exception as e:
                    raise ToolCrashed(
                        f"Ray{where} could not be started: {e}", retry=False
                    ) from None
                await self._check_workers(pool.name)
                return await pool.acquire()
            except (ToolError, asyncio.CancelledError):
                raise  # ToolCrashed is a ToolError
            except Exception as e:
                raise ToolCrashed(f"no Ray actor could be started for '{pool.name}': {e}") from None

    async def _check_workers(self, name: str) -> None:
        """Once per executor: can Ray's workers host toolbus's actors at all?"""
        from ._ray_pool import START_TIMEOUT
        from ._ray_session import check_workers

        if self._checked is None or (self._checked.done() and self._checked.exception()):
            self._checked = asyncio.ensure_future(check_workers(START_TIMEOUT))
        try:
            why = await asyncio.shield(self._checked)
        except TimeoutError:
            raise ToolCrashed(
                f"no Ray worker answered within {START_TIMEOUT:g} s", retry=False
            ) from None
        if why is not None:
            self._unavailable = why  # every later call is refused with it
            raise ToolCrashed(f"Tool '{name}' cannot run on Ray: {why}", retry=False)

    async def _call(self, run: Run, ctx: ToolContext) -> Any:
        """Run the tool of `run` on an actor; its value, or raise what it raised."""
        tool = run.tool
        assert tool is not None
        assert self._host is not None
        services = self._host.services
        is_async = tool.is_async
        pool = self._pools[id(tool)][1]
        session = self._session
        actor = pool.take() if session is not None and session.done() else None
        if actor is None:
            try:
                actor = await self._ready(run, pool)
            except asyncio.CancelledError:
                if is_async:
                    raise
                raise WorkerKilled() from None
        if run.settled:  # stopped while it waited for its actor
            pool.release(actor)
            if is_async:
                raise asyncio.CancelledError
            raise WorkerKilled()
        sending = self._serve(run, actor, None)
        try:
            ref = self._remote(run, ctx, actor)
        except BaseException:
            self._unsent(run, sending)
            pool.release(actor)
            raise
        serving = self._sent(run, sending, ref)
        try:
            if tool.wants_context:
                message = await self._consume(ref, run, services)
            else:
                message = _wire.parse(await ref)
        except asyncio.CancelledError:
            if is_async:
                # Counted as lingering on its actor before `kill` can no longer
                # find it: untracked first, `kill` (on the thread that ends the
                # call) found nothing to cancel, the caller's next call could be
                # sent to this actor, then killed with it a grace later.
                self._cancel_async(run, actor, ref)
                self._untrack(run, serving)
                raise
            self._untrack(run, serving)
            self._killed(run, actor, run.stop_reason or "cancelled")
            pool.lost(actor, crashed=False)
            raise WorkerKilled() from None
        except Exception as e:
            self._untrack(run, serving)
            raise self._failed(run, pool, actor, e) from None
        self._untrack(run, serving)
        return _value(pool, actor, message)

    # -- a call sent from the dispatching thread (see _direct.py) ---------------------

    def _direct(self, job: Job) -> bool:
        """Whether `job` may be sent from the dispatching thread: Ray is up, its
        steps up to the tool run no user code, and its tool streams no progress
        (that reply is read on the loop)."""
        tool = job.run.tool
        assert tool is not None
        assert self._host is not None
        session = self._session
        return (
            not tool.wants_context
            and session is not None
            and session.done()
            and runs_plain(job, self._host.services)
        )

    def _send(self, direct: Direct, run: Run, ctx: ToolContext) -> bool:
        """The dispatching thread: send the call to an actor free now (False: none).
        Its reply, on a thread of Ray's, goes to `direct` (which hands it to the loop)."""
        tool = run.tool
        assert tool is not None
        pool = self._pools[id(tool)][1]
        actor = pool.take()
        if actor is None:
            return False
        sending = self._serve(run, actor, None)
        try:
            if run.settled:  # stopped already: nothing to send
                raise asyncio.CancelledError() if tool.is_async else WorkerKilled()
            ref = self._remote(run, ctx, actor)
        except BaseException:
            self._unsent(run, sending)
            pool.give_back(actor)
            raise
        serving = self._sent(run, sending, ref)
        direct.finish = functools.partial(self._finished, run, pool, serving)
        ref.future().add_done_callback(direct.replied)
        return True

    def _finished(self, run: Run, pool: ToolActors, serving: _Serving, reply: Any) -> Any:
        """The loop thread: what the reply (a concurrent Future) to a call sent
        directly means: the tool's value, or raise its error."""
        self._untrack(run, serving)
        actor = serving[0]
        try:
            message = _wire.parse(reply.result())
        except Exception as e:
            raise self._failed(run, pool, actor, e) from None
        return _value(pool, actor, message)

    # -- an async call cancelled (any thread), and one that will not stop (the loop) -----

    def _hold(self, run: Run, actor: RayActor) -> None:
        """Under `_lock`: an async call cancelled while it is being sent counts
        as lingering on `actor` at once (the caller has its result, and may
        send its next call at once: not there), until `_sent` cancels it."""
        assert run.tool is not None
        if run not in self._held:
            self._held.add(run)
            self._lingering[id(run.tool)] += 1
            actor.lingering += 1

    def _unhold(self, run: Run, actor: RayActor) -> bool:
        """Under `_lock`: whether `run` was held (its count is then dropped)."""
        if run not in self._held:
            return False
        self._held.discard(run)
        assert run.tool is not None
        self._lingering[id(run.tool)] -= 1
        actor.lingering -= 1
        return True

    def _sent(self, run: Run, sending: _Serving, ref: Any) -> _Serving:
        """The call is sent: `kill` finds its ref now; one that came while it
        was being sent (`_hold`) is carried out."""
        actor = sending[0]
        serving = (actor, ref)
        with self._lock:
            if self._serving.get(run) is sending:
                self._serving[run] = serving
            held = self._unhold(run, actor)
        if held:
            self._cancel_async(run, actor, ref)
            self._calm(actor, run)
        return serving

    def _unsent(self, run: Run, sending: _Serving) -> None:
        """The call could not be sent: nothing of it lingers."""
        self._untrack(run, sending)
        with self._lock:
            held = self._unhold(run, sending[0])
        if held:
            self._calm(sending[0], run)

    def _calm(self, actor: RayActor, run: Run) -> None:
        """Any thread: calls waiting for `actor` look again if nothing lingers on it."""
        lane = self._lane
        loop = lane.loop if lane is not None else None
        pool = self._pools.get(id(run.tool))
        if actor.lingering == 0 and loop is not None and pool is not None:
            try:
                loop.call_soon_threadsafe(pool[1].wake)
            except RuntimeError:
                pass  # closing

    def _cancel_async(self, run: Run, actor: RayActor, ref: Any) -> None:
        """`ray.cancel` an async call; if it has not ended within CANCEL_GRACE,
        its actor is killed and replaced (`_overdue`). Meanwhile the call counts
        as abandoned, and new calls wait for the actor (`ToolActors.acquire`)."""
        self._cancel_ref(ref)
        tool = run.tool
        lane = self._lane
        loop = lane.loop if lane is not None else None
        if tool is None or loop is None:
            return
        with self._lock:
            if id(ref) in self._cancelled or actor.dead:
                return
            self._cancelled[id(ref)] = (ref, id(tool))
            self._lingering[id(tool)] += 1
            actor.lingering += 1
        try:
            loop.call_soon_threadsafe(self._watch, run, actor, ref)
        except RuntimeError:
            self._ended(actor, ref)  # the loop is closed: the executor is closing

    def _watch(self, run: Run, actor: RayActor, ref: Any) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(self.cancel_grace, self._overdue, run, actor, ref)
        done = ref.completed() if hasattr(ref, "completed") else ref  # a stream: its end
        done.future().add_done_callback(lambda _: self._ended(actor, ref))

    def _ended(self, actor: RayActor, ref: Any) -> bool:
        """Any thread: the cancelled call is over (True: it was still counted)."""
        with self._lock:
            entry = self._cancelled.pop(id(ref), None)
            if entry is None:
                return False
            self._lingering[entry[1]] -= 1
            actor.lingering -= 1
            calm = actor.lingering == 0
        lane = self._lane
        loop = lane.loop if lane is not None else None
        pool = self._pools.get(entry[1])
        if calm and loop is not None and pool is not None:
            try:
                loop.call_soon_threadsafe(pool[1].wake)
            except RuntimeError:
                pass  # closing
        return True

    def _overdue(self, run: Run, actor: RayActor, ref: Any) -> None:
        """The loop thread: a cancelled call has not ended within CANCEL_GRACE:
        kill its actor (no crash counted) and start another."""
        with self._lock:
            if id(ref) not in self._cancelled or actor.dead:
                return
            # Killed before it looks calm (`_ended`): `take`, on another
            # thread, passes a killed actor by.
            killing = actor.mark_killed()
        self._ended(actor, ref)
        tool = run.tool
        known = self._pools.get(id(tool))
        where = f"pid {actor.pid} on {actor.node}" if actor.pid else "starting"
        actor.replaced = (
            f"Tool '{tool.name if tool else '?'}' crashed: its Ray actor ({where}) was killed "
            f"and replaced because a cancelled call on it did not stop within "
            f"{self.cancel_grace:g} s (a tool that ignores its cancellation or blocks its "
            "event loop)"
        )
        if known is not None and known[0] is tool:
            known[1].lost(actor, crashed=False)  # marked dead first: no call is sent to it
        if killing:
            actor.end()
            reason = f"a cancelled call did not stop within {self.cancel_grace:g} s"
            self._announce_kill(run, actor.pid, reason)

    def _failed(self, run: Run, pool: ToolActors, actor: RayActor, e: Exception) -> BaseException:
        """What a Ray error instead of a reply means (`_failure`), or, for a call
        its actor was replaced under (`_overdue`), that it crashed."""
        if actor.replaced is not None and not run.settled:
            pool.lost(actor, crashed=False)
            return ToolCrashed(actor.replaced)
        return self._failure(pool, actor, e)

    # -- both ways --------------------------------------------------------------------

    def _remote(self, run: Run, ctx: ToolContext, actor: RayActor) -> Any:
        """Send the call to `actor`: its ObjectRef (TypeError: it cannot be sent)."""
        tool = run.tool
        assert tool is not None
        pairs = self._context_pairs(self._vars, run.context) if self._vars else []
        request = (
            run.call.arguments, run.call.id, run.attempt, run.remaining(),
            ctx.idempotency_key, pairs,
        )  # fmt: skip
        method = actor.handle.stream if tool.wants_context else actor.handle.call
        try:
            return method.remote(self._encode(request))
        except Exception as e:
            names = ", ".join(f"{m}.{a}" if m else k for k, m, a, _ in pairs) or "none"
            raise TypeError(
                f"the call to '{tool.name}' cannot be sent to its Ray actor (arguments, or the "
                f"context_vars values: {names}): {e}"
            ) from None

    def _serve(self, run: Run, actor: RayActor, ref: Any) -> _Serving:
        serving = (actor, ref)
        self._track(run, serving)
        return serving


def _value(pool: ToolActors, actor: RayActor, message: dict[str, Any]) -> Any:
    """The tool's value from its actor's reply, or raise its error."""
    pool.release(actor)
    return value_of(message)
