"""One tool's Ray actors, as the agent keeps them (on the executor's loop).

A sync tool has a pool: one actor per call running at once, started as calls
need them and reused (the scheduler never lets more calls run than the pool's
size, `RayBackend.capacity`). An async tool has one actor serving all its
calls. An actor that toolbus killed (a deadline) or that died (a crash) is
replaced at once, so the next call finds a warm one; replacements after
crashes are bounded by `max_restarts` for the tool, past which the tool is
unavailable. Kills are toolbus's own doing and are not counted. Before an
actor starts, the backend's `Room` (`_ray_room.py`) may stop an idle actor
of another tool to make room, or have the call wait for one of this tool's.

Everything here runs on the executor's loop thread, except `kill_all` (the
supervisor's, at close) and `RayActor.kill` (the supervisor's, at a
deadline): `live` is guarded by a lock for them; and `take` and `give_back`,
which the thread that dispatches a call sent from there calls (`_direct.py`):
a list's `pop` and `append` are atomic, so an idle actor is taken once.

One piece: a tool's actors, their replacement and the restart budget share
one lock and one count of what is placed; the room they make for each other
is decided there too.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ray
from ray.core.generated import gcs_pb2

from ..pipeline import ToolCrashed
from ..tools import ToolError
from ._retire import Retirement

if TYPE_CHECKING:
    from ._ray_room import Room

__all__ = ["START_TIMEOUT", "RayActor", "ToolActors", "check_placement", "remote_class"]

_DEAD = gcs_pb2.ActorTableData.DEAD  # type: ignore[attr-defined,unused-ignore]  # generated

# How long starting an actor may take: a new worker process that imports
# toolbus and loads the tool, or longer while the cluster finds room for it
# (an autoscaler adding a node). Off the call's deadline, like a process
# backend's worker start.
START_TIMEOUT = 60.0


class RayActor:
    """One actor as the agent sees it: its handle, and where it runs."""

    __slots__ = (
        "dead", "handle", "idle_since", "killed", "lingering", "lock", "node", "pid", "replaced",
    )  # fmt: skip

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.pid = 0
        self.node = ""
        self.killed = False  # by toolbus (ray.kill)
        self.dead = False  # counted as lost, by whichever saw it first
        self.lock = threading.Lock()
        # An async actor: its calls cancelled (ray.cancel) that have not ended yet;
        # and why toolbus replaced it, if it did (what its other calls are told).
        self.lingering = 0
        self.replaced: str | None = None
        self.idle_since = 0.0  # a sync actor: when it last became idle

    def kill(self) -> bool:
        """Kill it with no restart; True only for the first kill (any thread)."""
        if not self.mark_killed():
            return False
        self.end()
        return True

    def mark_killed(self) -> bool:
        """Any thread: count it as killed by toolbus; True only the first time,
        and then its caller kills it (`end`)."""
        with self.lock:
            if self.killed:
                return False
            self.killed = True
            return True

    def end(self) -> None:
        try:
            ray.kill(self.handle, no_restart=True)
        except Exception:
            pass  # gone already

    def died(self) -> bool:
        """Whether Ray knows it died (while idle: the OOM killer, its node
        lost). This process's own record of it, kept up to date by Ray (a
        death shows within milliseconds): no round trip, a fraction of a µs."""
        try:
            return bool(self.handle._get_local_state() == _DEAD)
        except Exception:  # no such record (an older Ray): as before, a call finds out
            return False


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # read: a failed spare start is not an unhandled error


class ToolActors:
    """The actors of one tool, on one backend."""

    def __init__(
        self,
        cls: Any,
        options: dict[str, Any],
        payload: bytes,
        name: str,
        *,
        is_async: bool,
        max_restarts: int,
        placement: str,
        room: Room | None = None,
        idle_timeout: float = 60.0,
    ) -> None:
        self.cls = cls
        self.options = options
        self.payload = payload
        self.name = name
        self.is_async = is_async
        self.max_restarts = max_restarts
        self.placement = placement
        self.room = room  # shared by the backend's pools (`_ray_room.py`)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.idle: list[RayActor] = []  # sync tools: ready, serving no call
        self.spares: list[asyncio.Future[RayActor]] = []  # replacements still starting
        self.shared: RayActor | None = None  # async tools: the one actor
        self.shared_start: asyncio.Future[RayActor] | None = None
        self.waiters: list[asyncio.Future[None]] = []  # calls waiting for `shared` to calm
        self.live: set[RayActor] = set()
        self.lock = threading.Lock()
        self.started = 0
        self.pending = 0  # actors starting (`_begin`)
        self.crashes = 0
        # Set once crashes have used up max_restarts: why the tool is unavailable.
        self.unavailable: str | None = None
        self.closed = False
        # A sync tool's actor idle this long is stopped, but for one (`_retire.py`).
        self.retirement = Retirement(idle_timeout, self._idle_actors, self._retire)

    # -- getting an actor -----------------------------------------------------------

    def take(self) -> RayActor | None:
        """Any thread: an actor that can take a call now, if there is one.

        Not one that died while idle: a call sent to it would end
        TOOL_CRASHED ("may have had its effect") though it never ran, and its
        death count against `max_restarts`. It is replaced (`lost`), not
        counted as a crash: no call of the tool was running."""
        if self.is_async:
            actor = self.shared
            # Not while a cancelled call may still hold it (`acquire` waits).
            ok = actor is not None and not actor.dead and not actor.killed and not actor.lingering
            if ok and actor is not None and actor.died():
                self._died_idle(actor)
                return None
            return actor if ok else None
        while True:
            try:
                actor = self.idle.pop()
            except IndexError:
                return None
            if not actor.died():
                return actor
            self._died_idle(actor)

    def _died_idle(self, actor: RayActor) -> None:
        """Any thread: `actor` died while idle: count it out, replace it."""
        loop = self.loop
        if loop is not None and asyncio._get_running_loop() is loop:
            self.lost(actor, crashed=False)
            return
        try:
            if loop is None:
                raise RuntimeError("no loop")
            loop.call_soon_threadsafe(functools.partial(self.lost, actor, crashed=False))
        except RuntimeError:
            self._discard(actor)  # closing: nothing to replace it for

    def give_back(self, actor: RayActor) -> None:
        """Any thread: `actor`, taken but not sent a call, is free again."""
        if not self.is_async:
            self._idle(actor)
            loop = self.loop
            if loop is not None:
                try:
                    if self.waiters:
                        loop.call_soon_threadsafe(self.wake)
                    loop.call_soon_threadsafe(self.retirement.idle, loop)
                except RuntimeError:
                    pass  # closing

    async def acquire(self) -> RayActor:
        """An actor ready to take a call (starting one if needed)."""
        self.loop = asyncio.get_running_loop()
        actor = self.take()
        if actor is not None:
            return actor
        if self.is_async:
            # A cancelled call has not ended yet: wait (off the call's deadline)
            # until it does, or until its actor is replaced (RayBackend._overdue).
            while (shared := self.shared) is not None and not shared.dead and shared.lingering:
                waiter = asyncio.get_running_loop().create_future()
                self.waiters.append(waiter)
                await waiter
            return await asyncio.shield(self._start_shared())
        while True:
            actor = self.take()
            if actor is not None:
                return actor
            if self.closed:
                raise RuntimeError("the Ray backend has stopped")
            if self.unavailable is not None:
                raise ToolCrashed(self.unavailable, retry=False)
            if self.spares:
                start = self.spares.pop(0)
                break
            # No room on the cluster for another, and some of ours will be free:
            # wait for one (`_ray_room.py`).
            mine = len(self.live) + self.pending > len(self.idle)  # busy, or starting
            if self.room is None or self.room.free(self) or not mine:
                start = self._begin(placed=True)
                break
            waiter = self.loop.create_future()
            self.waiters.append(waiter)
            await waiter
        try:
            return await asyncio.shield(start)
        except asyncio.CancelledError:
            start.add_done_callback(self._adopt)  # its call is gone: keep the actor
            raise

    def release(self, actor: RayActor) -> None:
        """A sync tool's actor is free again (an async tool's is never taken)."""
        if self.is_async:
            return
        if actor.killed or actor.dead or self.closed:
            self.lost(actor, crashed=False)
        else:
            self._idle(actor)
            if self.loop is not None:
                self.retirement.idle(self.loop)
        self.wake()

    def _idle(self, actor: RayActor) -> None:
        actor.idle_since = time.monotonic()  # the loop's clock too
        self.idle.append(actor)

    def _idle_actors(self) -> tuple[list[RayActor], int]:
        return list(self.idle), len(self.live)

    def _retire(self, actor: RayActor) -> bool:
        """Stop `actor`, idle too long, without replacing it; False if it was taken."""
        try:
            self.idle.remove(actor)  # atomic: `take` may pop it from another thread
        except ValueError:
            return False
        self._discard(actor)
        return True

    def lost(self, actor: RayActor, *, crashed: bool) -> None:
        """`actor` is gone (killed by toolbus, or `crashed`): count it, replace it."""
        if actor.dead:
            return
        actor.dead = True
        with self.lock:
            self.live.discard(actor)
        if not actor.killed:
            actor.kill()  # whatever state it is in, it serves no more calls
        if self.shared is actor:
            self.shared = None
            self.shared_start = None
        self.wake()
        if crashed:
            self.crashes += 1
            if 0 <= self.max_restarts < self.crashes:
                self.unavailable = (
                    f"Tool '{self.name}' is unavailable: its Ray actors died {self.crashes} "
                    f"times (max_restarts={self.max_restarts})"
                )
        if self.closed or self.unavailable is not None:
            return
        if self.is_async:
            self._start_shared()
        else:
            spare = self._begin()
            spare.add_done_callback(self._spare_started)
            self.spares.append(spare)

    def wake(self) -> None:
        """The loop thread: calls waiting for an actor look again."""
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- starting one ---------------------------------------------------------------

    def _start_shared(self) -> asyncio.Future[RayActor]:
        """An async tool's actor, starting (one start at a time)."""
        start = self.shared_start
        if start is None:
            start = self.shared_start = self._begin()
            start.add_done_callback(self._shared_started)
        return start

    def _begin(self, *, placed: bool = False) -> asyncio.Future[RayActor]:
        """Start an actor (`placed`: `Room.free` was asked already); counted as
        starting at once, so that the next call's `Room.free` sees it."""
        room = self.room
        if room is not None and not placed:
            room.free(self)  # makes room if an idle actor of another tool holds it
        if room is not None:
            room.starting += 1
        self.pending += 1
        return asyncio.ensure_future(self._start())

    async def _start(self) -> RayActor:
        room = self.room
        try:
            return await self._started()
        finally:
            self.pending -= 1
            if room is not None:
                room.starting -= 1

    async def _started(self) -> RayActor:
        if self.closed:
            raise RuntimeError("the Ray backend has stopped")
        actor = RayActor(self.cls.options(**self.options).remote(self.payload, self.name))
        with self.lock:
            self.live.add(actor)
        try:
            pid, node, error = await asyncio.wait_for(actor.handle.ready.remote(), START_TIMEOUT)
        except BaseException as e:
            self._discard(actor)
            if isinstance(e, asyncio.CancelledError):
                raise
            if isinstance(e, TimeoutError):
                raise ToolCrashed(
                    f"no Ray actor could be placed for '{self.name}' within {START_TIMEOUT:g} s "
                    f"(it needs {self.placement}): is the cluster big enough?",
                    retry=False,
                ) from None
            raise ToolCrashed(f"no Ray actor could be started for '{self.name}': {e}") from None
        if error is not None:
            self._discard(actor)
            raise ToolError(
                f"Tool '{self.name}' could not be loaded on its Ray actor: {error}",
                retryable=False,
            )
        actor.pid, actor.node = pid, node
        self.started += 1
        if self.closed:
            self._discard(actor)
            raise RuntimeError("the Ray backend has stopped")
        return actor

    def discard(self, actor: RayActor) -> None:
        """Stop `actor`, not replacing it (no call of it is running)."""
        self._discard(actor)

    def _discard(self, actor: RayActor) -> None:
        actor.dead = True
        with self.lock:
            self.live.discard(actor)
        actor.kill()

    def _shared_started(self, start: asyncio.Future[RayActor]) -> None:
        if self.shared_start is not start:
            return  # lost meanwhile, or replaced
        if start.cancelled() or start.exception() is not None:
            self.shared_start = None  # the next call tries again
            return
        self.shared = start.result()

    def _spare_started(self, start: asyncio.Future[RayActor]) -> None:
        _retrieved(start)
        if start in self.spares:  # no call claimed it: it waits, idle
            self.spares.remove(start)
            self._adopt(start)

    def _adopt(self, start: asyncio.Future[RayActor]) -> None:
        if start.cancelled() or start.exception() is not None:
            return
        actor = start.result()
        if self.closed:
            self._discard(actor)
        else:
            self._idle(actor)
            if self.loop is not None:
                self.retirement.idle(self.loop)
            self.wake()

    # -- closing --------------------------------------------------------------------

    def kill_all(self) -> None:
        """Kill every actor of the tool (any thread): the backend stops."""
        self.closed = True
        self.retirement.stop()
        with self.lock:
            actors = list(self.live)
            self.live.clear()
        for actor in actors:
            actor.dead = True
            actor.kill()
        loop = self.loop
        if self.waiters and loop is not None:
            try:
                loop.call_soon_threadsafe(self.wake)
            except RuntimeError:
                pass  # the loop is closed


def check_placement(
    num_cpus: float | None, num_gpus: float | None, resources: Mapping[str, float] | None
) -> dict[str, Any]:
    """`RayBackend`'s placement options, checked: the keywords for an actor's options."""
    out: dict[str, Any] = {}
    for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
        if value is None:
            continue
        if not _amount(value):
            raise ValueError(f"RayBackend: {name} must be a finite number >= 0, got {value!r}")
        out[name] = value
    if resources is not None:
        if not isinstance(resources, Mapping):
            raise TypeError(f"RayBackend: resources must be a mapping, got {resources!r}")
        for key, value in resources.items():
            if key in ("CPU", "GPU"):  # Ray refuses them there, at every actor's start
                raise ValueError(
                    f"RayBackend: resources[{key!r}]: use num_{key.lower()}= for {key}s"
                )
            if not isinstance(key, str) or not _amount(value):
                raise ValueError(f"RayBackend: resources[{key!r}] must be a finite number >= 0")
        out["resources"] = dict(resources)
    return out


def _amount(value: object) -> bool:
    """A number of a resource Ray accepts: finite, >= 0 (no bool, no NaN, no inf)."""
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < float("inf")
    )


_classes: dict[type, Any] = {}


def remote_class(cls: type) -> Any:
    """`ray.remote(cls)`, made once per process."""
    remote = _classes.get(cls)
    if remote is None:
        remote = _classes[cls] = ray.remote(cls)
    return remote
