"""What the backends that run calls elsewhere share: `RemoteBackend`.

`ProcessBackend` (worker processes) and `RayBackend` (Ray actors) keep a
tool's calls' steps in this process and send only the tool's invocation away.
They do the same bookkeeping around it, written here once: the `Backend`
protocol's `start`/`submit`/`release`/`cancel`/`busy` (a call goes to the
executor's loop through a `Lane`, or is sent from the dispatching thread as a
`Direct` job), which worker serves which run (`_serving`, read by `kill` on
the supervisor's thread), the announcement of a kill, and the set-up time a
call spends waiting for its worker, which is off its deadline's clock.

Each subclass says what is its own: `_prepare` (refuse a call before it is
counted), `_reset` (forget a previous executor), and its round trip
(`_call`, `_direct`, `_send`, in `_process_calls.py` / `_ray_calls.py`).
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ._direct import Direct
from ._loop import Lane
from ._protocol import BackendUnavailable, ContextSpec

if TYPE_CHECKING:
    from ..pipeline import Run
    from ..tools import Tool, ToolContext
    from ._protocol import Host, Job

__all__ = ["RemoteBackend", "refuse_process_local", "var_home"]

# What `_serving` holds for a run: the worker serving it (and what else `kill` needs).
S = TypeVar("S")


class RemoteBackend(Generic[S]):
    """The bookkeeping of a backend whose calls run elsewhere (see the module's doc)."""

    can_kill = True
    uses_threads = False
    # Named in its errors: "this ProcessBackend already serves another executor".
    _owner: ClassVar[str]
    # Why every call is refused once it stopped.
    _stopped_text: ClassVar[str]

    def __init__(self, variables: tuple[contextvars.ContextVar[Any], ...]) -> None:
        self.carries_context: ContextSpec = variables
        self._host: Host | None = None
        self._lane: Lane | None = None
        # Which worker serves which run: read by `cancel` on the supervisor's thread.
        self._serving: dict[Run, S] = {}
        self._lock = threading.Lock()
        self._busy = 0
        self._busy_by_tool: Counter[int] = Counter()
        self._stopped = False

    if TYPE_CHECKING:

        def _prepare(self, tool: Tool) -> None:
            """Raise `BackendUnavailable` if `tool`'s call cannot be taken now."""

        def _reset(self, host: Host) -> None:
            """Forget what served the previous executor: `host` is served now."""

        async def _call(self, run: Run, ctx: ToolContext) -> Any: ...
        def _direct(self, job: Job) -> bool: ...
        def _send(self, direct: Direct, run: Run, ctx: ToolContext) -> bool: ...
        def kill(self, job: Job) -> bool: ...

    # -- the Backend protocol (the supervisor's thread) ---------------------------

    def start(self, host: Host) -> None:
        if self._host is not None and self._host is not host and not self._stopped:
            raise RuntimeError(f"this {self._owner} already serves another executor")
        if self._host is not host:
            # A backend declared on a tool outlives an executor: serve the next.
            self._host = host
            self._lane = None
            self._stopped = False
            self._reset(host)

    def submit(self, job: Job) -> None:
        tool = job.run.tool
        assert tool is not None
        assert self._host is not None
        if self._stopped:
            raise BackendUnavailable(self._stopped_text)
        self._prepare(tool)
        lane = self._lane
        if lane is None:
            lane = self._lane = Lane(self._host.loop.current, self._host, self._invoke)  # type: ignore[attr-defined]
        self._busy += 1
        self._busy_by_tool[id(tool)] += 1
        if self._direct(job):
            Direct(job, lane, self._send, self._invoke).start()
            return
        if not lane.submit(job):
            self._busy -= 1
            self._busy_by_tool[id(tool)] -= 1
            raise BackendUnavailable("the executor's event loop is closed")

    def release(self, job: Job, worker: Any) -> None:
        self._busy -= 1
        tool = job.run.tool
        if tool is not None:
            self._busy_by_tool[id(tool)] -= 1

    def cancel(self, job: Job) -> None:
        self.kill(job)

    def busy(self, tool: Tool | None = None) -> int:
        return self._busy if tool is None else self._busy_by_tool[id(tool)]

    # -- both ways of a call --------------------------------------------------------

    def _invoke(self, run: Run, params: Any, ctx: ToolContext) -> Any:
        return self._call(run, ctx)

    def _track(self, run: Run, serving: S) -> None:
        """`serving` serves `run` now: `kill` finds it."""
        with self._lock:
            self._serving[run] = serving

    def _untrack(self, run: Run, serving: S) -> None:
        """The call is over: under the lock `kill` reads `_serving` with, so
        whether its worker was killed is settled once this returns."""
        with self._lock:
            # Only ours: a retry of the run may be on another worker already.
            if self._serving.get(run) is serving:
                del self._serving[run]

    def _announce_kill(self, run: Run, pid: int, reason: str) -> None:
        """Publish `tool:killed` for the worker `pid` that served `run`."""
        if self._host is not None:
            self._host.services.announce_killed(run, pid, reason)


def refuse_process_local(tool: Tool, where: str) -> None:
    """ValueError if `tool` holds resources of this process: it cannot run `where`."""
    if tool.process_local:
        raise ValueError(
            f"tool {tool.name!r} holds resources of this process (a live session, a "
            f"socket): it cannot run {where}"
        )


def var_home(var: Any, owner: str) -> tuple[str, str] | None:
    """The module and attribute a listed context variable is found at (None: it
    is no imported module's attribute), for a worker to import it from; TypeError
    if `var` is no ContextVar."""
    if not isinstance(var, contextvars.ContextVar):
        raise TypeError(
            f"{owner}: context_vars must be ContextVar objects, got {type(var).__name__}"
        )
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if value is var:
                return name, attr
    return None
