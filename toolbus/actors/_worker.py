"""The tool worker: an actor with its own mailbox that runs one call at a time.

A thin shell. It carries an `Invoke` or `AfterTimeout` message to the pipeline,
inside the caller's captured `contextvars`, and always reports back, whatever
happened, so the supervisor never loses track of a worker or a call.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

import pykka

from .. import pipeline as _pipeline
from .._sync import simple_inbox
from ..bus._events import LateResult
from ..bus._signals import LATE_RESULT
from ..models import ErrorCode
from ._messages import AfterTimeout, Invoke, Report

__all__ = ["ToolWorker", "WorkerHandle"]

log = logging.getLogger("toolbus.actors")


class WorkerHandle:
    """The supervisor's name for a worker: its actor and the pool it belongs to."""

    __slots__ = ("pool", "ref", "seq")

    def __init__(self, ref: pykka.ActorRef[Any], pool: Any, seq: int) -> None:
        self.ref = ref
        self.pool = pool
        self.seq = seq

    def __repr__(self) -> str:
        return f"<worker {self.seq} of {self.pool!r}>"


class ToolWorker(pykka.ThreadingActor):
    """Runs tools and hooks, never the supervisor's bookkeeping.

    Daemon thread: a tool stuck forever must not keep the process alive.
    """

    use_daemon_thread = True
    _create_actor_inbox = staticmethod(simple_inbox)  # C SimpleQueue, not queue.Queue

    def __init__(self, services: _pipeline.Services, supervisor: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self.services = services
        self.supervisor = supervisor
        self.handle: WorkerHandle | None = None

    def on_receive(self, message: Any) -> Any:
        # Never let anything escape a tell handler: pykka would stop this actor,
        # and a BaseException would make pykka stop every actor in the process.
        if isinstance(message, WorkerHandle):
            self.handle = message
            return None
        run = message.run
        kind: str = "lost"
        delay = 0.0
        late: LateResult | None = None
        try:
            if type(message) is Invoke:
                kind, delay, late = run.context.copy().run(
                    _pipeline.run_attempt, run, message.attempt, self.services
                )
            elif type(message) is AfterTimeout:
                kind, delay, late = run.context.copy().run(
                    _pipeline.after_timeout, run, message.attempt, message.phase, self.services
                )
        except BaseException as e:
            log.error(
                "internal error in worker for call %s:\n%s",
                run.call.id,
                run.scrubber.text("".join(traceback.format_exception(e))),
            )
            try:
                result = _pipeline.make_result(
                    run,
                    "error",
                    error=f"internal error: {type(e).__name__}",
                    code=ErrorCode.TOOL_ERROR,
                )
                kind = "done" if _pipeline.finish(run, result, self.services) else "lost"
            except BaseException:
                kind = "lost"
        try:
            self.supervisor.tell(Report(self.handle, run, message.attempt, kind, delay))  # type: ignore[arg-type]
        except pykka.ActorDeadError:
            # The executor closed while this worker was stuck: nobody will reuse it.
            self.actor_ref.stop(block=False)
        if late is not None:
            self.services.emitter.emit(LATE_RESULT, late)
        return None
