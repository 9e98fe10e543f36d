"""The thread backend: sync tools' attempts on worker actors, one call at a time each.

Each tool gets its own pool of `ToolWorker` pykka actors (a thread and a
mailbox each), started lazily and reused. A worker carries a `Job` to the
pipeline inside the caller's captured `contextvars` and always reports back,
whatever happened, so the supervisor never loses track of a worker or a call.

A thread stuck in a sync tool cannot be stopped (`can_kill` is False). When
its job is cancelled it is detached from its pool and counted as abandoned; a
fresh worker takes its place. If it ever returns, it rejoins the pool.
"""

from __future__ import annotations

import logging
import traceback
from collections import Counter
from typing import TYPE_CHECKING, Any

import pykka

from .._sync import simple_inbox
from ..models import ErrorCode
from ..pipeline import LOST, Outcome, Services, drive_sync, end_call
from ._protocol import BackendUnavailable, ContextSpec, Host, Job

if TYPE_CHECKING:
    from ..pipeline import Run
    from ..tools import Tool

__all__ = ["ThreadBackend", "ToolWorker", "WorkerHandle", "contain"]

log = logging.getLogger("toolbus.backends")


def contain(job: Job, error: BaseException, services: Services) -> Outcome:
    """A backend's last line: an internal error while running `job` still ends the call."""
    run = job.run
    log.error(
        "internal error running call %s:\n%s",
        run.call.id,
        run.scrubber.text("".join(traceback.format_exception(error))),
    )
    try:
        return end_call(
            run, services, "error", ErrorCode.TOOL_ERROR, f"internal error: {type(error).__name__}"
        )
    except BaseException:
        return LOST


class WorkerHandle:
    """The backend's name for a worker: its actor and the tool it serves."""

    __slots__ = ("ref", "seq", "tool")

    def __init__(self, ref: pykka.ActorRef[Any], tool: Tool, seq: int) -> None:
        self.ref = ref
        self.tool = tool
        self.seq = seq

    def __repr__(self) -> str:
        return f"<worker {self.seq} of {self.tool.name!r}>"


class ToolWorker(pykka.ThreadingActor):
    """Runs one job at a time: tools and hooks, never the supervisor's bookkeeping.

    Daemon thread: a tool stuck forever must not keep the process alive.
    """

    use_daemon_thread = True
    _create_actor_inbox = staticmethod(simple_inbox)  # C SimpleQueue, not queue.Queue

    def __init__(self, host: Host) -> None:
        super().__init__()
        self.host = host
        self.handle: WorkerHandle | None = None

    def on_receive(self, message: Any) -> Any:
        # Never let anything escape a tell handler: pykka would stop this actor,
        # and a BaseException would make pykka stop every actor in the process.
        if isinstance(message, WorkerHandle):
            self.handle = message
            return None
        job: Job = message
        services = self.host.services
        try:
            outcome = job.run.context.copy().run(
                drive_sync, job.steps(services), job.run, self.host.loop
            )
        except BaseException as e:
            outcome = contain(job, e, services)
        if not self.host.report(job, outcome, self.handle):
            # The executor closed while this worker was stuck: nobody will reuse it.
            self.actor_ref.stop(block=False)
        return None


class ThreadBackend:
    """Runs each attempt on a worker thread of its tool's pool (sync tools)."""

    name = "thread"
    can_kill = False
    uses_threads = True
    carries_context: ContextSpec = "all"

    def __init__(self) -> None:
        self._host: Host | None = None
        self._idle: dict[int, list[WorkerHandle]] = {}
        self._serving: dict[Run, WorkerHandle] = {}
        self._detached: set[WorkerHandle] = set()
        self._detached_by_tool: Counter[int] = Counter()
        self._busy = 0
        self._busy_by_tool: Counter[int] = Counter()
        self._seq = 0
        self._stopped = False
        self.started = 0

    def check(self, tool: Tool) -> None:
        return None  # an async tool's coroutine is awaited on the loop thread

    def start(self, host: Host) -> None:
        if self._host is not None and self._host is not host:
            raise RuntimeError("this ThreadBackend already serves another executor")
        self._host = host

    def submit(self, job: Job) -> None:
        tool = job.run.tool
        assert tool is not None
        assert self._host is not None
        idle = self._idle.get(id(tool))
        if idle:
            w = idle.pop()
        else:
            try:
                ref = ToolWorker.start(self._host)
            except Exception as e:  # e.g. "can't start new thread"
                raise BackendUnavailable(
                    f"Tool '{tool.name}' is unavailable: no worker thread could be started ({e})"
                ) from None
            self._seq += 1
            self.started += 1
            w = WorkerHandle(ref, tool, self._seq)
            ref.tell(w)
        self._busy += 1
        self._busy_by_tool[id(tool)] += 1
        self._serving[job.run] = w
        w.ref.tell(job)

    def release(self, job: Job, worker: Any) -> None:
        w: WorkerHandle | None = worker
        if w is None:
            return
        if self._serving.get(job.run) is w:
            del self._serving[job.run]
        if w in self._detached:
            # An abandoned worker came back: it is healthy again, let it serve.
            self._detached.discard(w)
            self._detached_by_tool[id(w.tool)] -= 1
        else:
            self._busy -= 1
            self._busy_by_tool[id(w.tool)] -= 1
        if self._stopped:
            w.ref.stop(block=False)
        else:
            self._idle.setdefault(id(w.tool), []).append(w)

    def cancel(self, job: Job) -> None:
        w = self._serving.pop(job.run, None)
        if w is None or w in self._detached:
            return
        self._busy -= 1
        self._busy_by_tool[id(w.tool)] -= 1
        self._detached.add(w)
        self._detached_by_tool[id(w.tool)] += 1

    def kill(self, job: Job) -> bool:
        return False

    def busy(self, tool: Tool | None = None) -> int:
        return self._busy if tool is None else self._busy_by_tool[id(tool)]

    def abandoned(self, tool: Tool | None = None) -> int:
        if tool is None:
            return len(self._detached)
        return self._detached_by_tool[id(tool)]

    def idle(self, tool: Tool) -> int:
        return len(self._idle.get(id(tool), ()))

    def stop(self) -> None:
        self._stopped = True
        for idle in self._idle.values():
            for w in idle:
                w.ref.stop(block=False)
            idle.clear()
