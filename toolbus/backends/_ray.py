"""The Ray backend: a tool's calls run on Ray actors, anywhere on a cluster.

Only the tool moves. Its calls' steps (hooks, masking, validation, retries,
events, the journal) stay in the agent's process, as for the process backend:
`job.steps(services, invoke)` with an `invoke` that sends the call to an actor
and awaits the Ray ObjectRef on the executor's event loop, holding no thread;
a call to a free actor whose steps run no user code is sent from the thread
that dispatches it instead, and its reply finishes it on the loop
(`_direct.py`). A call's round trip is `_ray_calls.py`. The tool travels by
value (`_ray_shipping.py`); the actor side is `_ray_actor.py`; one tool's
actors are `_ray_pool.py` (room on the cluster for them, `_ray_room.py`);
the Ray session the backends share is `_ray_session.py`.

At a deadline or a cancellation, a sync call's actor is killed
(`ray.kill(no_restart=True)`, announced as `tool:killed`) and replaced, so a
hung call never holds its slot; an async call is cancelled with `ray.cancel`
(its actor serves other calls), and if it has not ended within `cancel_grace`
(1 s: a tool that swallows its CancelledError or blocks its event loop), its
actor is killed and replaced the same way, its other calls ending
`TOOL_CRASHED` (`_ray_calls.py`). An actor or a node that dies ends the call
`TOOL_CRASHED`; Ray never retries a call behind the supervisor
(`max_task_retries=0`, `max_restarts=0`: toolbus replaces actors itself).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._options import positive_number
from ._protocol import BackendUnavailable, Host, Job
from ._ray_calls import CANCEL_GRACE, ActorCalls
from ._remote_base import refuse_process_local

if TYPE_CHECKING:
    from ..pipeline import Run
    from ..tools import Tool
    from ._ray_pool import RayActor, ToolActors

__all__ = ["RayBackend"]

log = logging.getLogger("toolbus.backends")

_HINT = "RayBackend needs Ray: pip install 'toolbus[ray]'"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError(f"{_HINT} ({e})") from None
    return ray


class RayBackend(ActorCalls):
    """Runs each tool's attempts on Ray actors, on this machine or a cluster.

    `address` and `init_options` go to `ray.init` when toolbus starts Ray (no
    session in this process yet); a session the application started is used
    as it is. `num_cpus`, `num_gpus` and `resources` are what each actor needs
    to be placed. `max_restarts` bounds how many times a tool's actors are
    replaced after crashing (-1: no bound); past it the tool's calls get
    `TOOL_UNAVAILABLE`. A sync tool's actor idle for `idle_timeout` seconds
    (default 60) is stopped, except the one each tool keeps warm. An async
    call cancelled (its deadline, a cancellation) that has not ended within
    `cancel_grace` seconds (default 1) has its actor killed and replaced.
    `context_vars` lists the ContextVars whose values travel with each call:
    no others do.
    """

    name = "ray"
    enforces_limits = False
    _owner = "RayBackend"
    _stopped_text = "the Ray backend has stopped"

    def __init__(
        self,
        address: str | None = None,
        *,
        init_options: Mapping[str, Any] | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        resources: Mapping[str, float] | None = None,
        max_restarts: int = 3,
        context_vars: Iterable[contextvars.ContextVar[Any]] = (),
        idle_timeout: float = 60.0,
        cancel_grace: float = CANCEL_GRACE,
    ) -> None:
        self._ray = _import_ray()
        # Modules that import Ray: loaded here, not with toolbus.backends.
        from ._ray_actor import encode_request
        from ._ray_pool import check_placement
        from ._ray_reply import consume, failure
        from ._ray_room import Room
        from ._ray_shipping import context_pairs, shipped_vars

        self._encode = encode_request
        self._context_pairs = context_pairs
        self._consume = consume
        self._failure = failure

        if address is not None and not isinstance(address, str):
            raise TypeError(f"RayBackend: address must be a string, got {address!r}")
        if init_options is not None and not isinstance(init_options, Mapping):
            raise TypeError(f"RayBackend: init_options must be a mapping, got {init_options!r}")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < -1:
            raise ValueError(f"RayBackend: max_restarts must be an int >= -1, got {max_restarts!r}")
        self.address = address
        self.init_options: dict[str, Any] = dict(init_options or {})
        self.placement = check_placement(num_cpus, num_gpus, resources)
        self._room = Room(self.placement)
        self.max_restarts = max_restarts
        self.idle_timeout = positive_number(idle_timeout, "idle_timeout", "RayBackend")
        self.cancel_grace = positive_number(cancel_grace, "cancel_grace", "RayBackend")
        variables = tuple(context_vars)
        self._vars = shipped_vars(variables)
        super().__init__(variables)
        self._max_parallel: int | None = None
        self._session: Any = None  # concurrent Future: Ray is up
        # Whether Ray's workers can host toolbus's actors (None: not asked yet),
        # and why not, once known: every later call is refused with it.
        self._checked: asyncio.Future[str | None] | None = None
        self._unavailable: str | None = None
        self._pools: dict[int, tuple[Tool, ToolActors]] = {}
        self._cancelled: dict[int, tuple[Any, int]] = {}
        self._lingering: Counter[int] = Counter()
        self._held: set[Run] = set()  # async runs cancelled while being sent

    # -- the Backend protocol (the supervisor's thread) ---------------------------

    def check(self, tool: Tool) -> None:
        refuse_process_local(tool, "on a Ray actor")
        # Pickled once here, so that a tool closing over a lock, a socket or a
        # client is refused at registration; it is pickled again (and may still
        # be refused) at its first call, when what it closes over may have changed.
        from ._ray_shipping import ship_tool

        ship_tool(tool)

    def capacity(self, tool: Tool) -> int:
        """How many calls of `tool` may run at once: a sync tool's pool size
        (one actor each), an async tool's actor's `max_concurrency`."""
        if tool.max_concurrency:
            return tool.max_concurrency
        return self._max_parallel or 1_000_000  # the executor's max_parallel caps it anyway

    def _reset(self, host: Host) -> None:
        scheduler = getattr(host, "scheduler", None)
        self._max_parallel = getattr(scheduler, "max_parallel", None)
        self._session = None
        self._checked = None
        self._unavailable = None
        self._pools.clear()
        self._room.pools.clear()

    def _prepare(self, tool: Tool) -> None:
        if self._unavailable is not None:
            raise BackendUnavailable(f"Tool '{tool.name}' is unavailable: {self._unavailable}")
        known = self._pools.get(id(tool))
        if known is None or known[0] is not tool:
            known = self._pools[id(tool)] = (tool, self._make_pool(tool))
        if known[1].unavailable is not None:
            raise BackendUnavailable(known[1].unavailable)
        if self._session is None:
            from ._ray_session import SESSION

            self._session = SESSION.join(self, self.address, self.init_options)

    def kill(self, job: Job) -> bool:
        """Kill the actor running a sync call (its task's cancellation then
        replaces it); an async call's actor serves others: it is cancelled."""
        run = job.run
        is_async = run.tool is not None and run.tool.is_async
        with self._lock:
            # Under the lock `_forget` takes: an actor let go of is never killed.
            serving = self._serving.get(run)
            killing = serving is not None and not is_async and serving[0].mark_killed()
            if is_async and serving is not None and serving[1] is None:
                # Being sent: counted as lingering on its actor now (no call is
                # sent there meanwhile), cancelled once it is sent (`_sent`).
                self._hold(run, serving[0])
                return False
        if serving is None:
            return True
        actor, ref = serving
        if is_async:
            self._cancel_async(run, actor, ref)
            return False
        if killing:
            actor.end()
            self._announce_kill(run, actor.pid, run.stop_reason or "cancelled")
        return True

    def abandoned(self, tool: Tool | None = None) -> int:
        """Async calls cancelled that have not ended yet: for `cancel_grace` at
        most, then their actor is killed (a sync call's actor is killed at once)."""
        with self._lock:
            if tool is None:
                return sum(self._lingering.values())
            return self._lingering[id(tool)]

    def stop(self) -> None:
        self._stopped = True
        for _, pool in list(self._pools.values()):
            pool.kill_all()
        if self._session is not None:
            from ._ray_session import SESSION

            self._session = None
            SESSION.leave(self)

    # -- stats (any thread) ---------------------------------------------------------

    @property
    def workers_started(self) -> int:
        """Actors started so far (for `ExecutorStats.workers_started`)."""
        return sum(p.started for _, p in list(self._pools.values()))

    @property
    def live_workers(self) -> int:
        """Actors alive now, idle or serving (for `ExecutorStats.live_workers`)."""
        return sum(len(p.live) for _, p in list(self._pools.values()))

    # -- the dispatching thread, once per tool ----------------------------------------

    def _make_pool(self, tool: Tool) -> ToolActors:
        """The tool's actors (none started yet), with the tool pickled once, now:
        later changes to the tool object do not reach its actors."""
        from ._ray_actor import AsyncToolActor, SyncToolActor
        from ._ray_pool import ToolActors, remote_class
        from ._ray_shipping import ship_tool

        try:
            payload = ship_tool(tool)
        except ValueError as e:
            raise BackendUnavailable(f"Tool '{tool.name}' is unavailable: {e}") from None
        options: dict[str, Any] = {
            **self.placement,
            "max_restarts": 0,  # toolbus replaces actors, within its own budget
            "max_task_retries": 0,  # and the supervisor alone decides retries
        }
        if tool.is_async:
            options["max_concurrency"] = self.capacity(tool)
            cls = remote_class(AsyncToolActor)
        else:
            options["max_concurrency"] = 1
            cls = remote_class(SyncToolActor)
        needs = ", ".join(f"{k}={v}" for k, v in self.placement.items()) or "Ray's defaults"
        pool = ToolActors(
            cls,
            options,
            payload,
            tool.name,
            is_async=tool.is_async,
            max_restarts=self.max_restarts,
            placement=needs,
            room=self._room,
            idle_timeout=self.idle_timeout,
        )
        self._room.pools.append(pool)
        return pool

    # -- the loop thread (and `_killed`, `_cancel_ref`: any thread) ---------------

    def _killed(self, run: Run, actor: RayActor, reason: str) -> None:
        if actor.kill():
            self._announce_kill(run, actor.pid, reason)

    def _cancel_ref(self, ref: Any) -> None:
        try:
            self._ray.cancel(ref)
        except Exception:
            pass  # finished already
