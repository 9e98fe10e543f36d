"""The execution seam: what a backend is, and the work it is handed.

A tool's calls run on a backend. The supervisor decides *when* an attempt may
start (limits, barriers, retries, deadlines); the backend decides *where* it
runs: a worker thread (`ThreadBackend`), a task on an event loop
(`LoopBackend`), a worker process (`ProcessBackend`) or a Ray actor
(`RayBackend`). A backend is handed `Job`s and tells its `Host` what became of
each, exactly once per job.

Every method of a backend is called on the supervisor's thread, one at a time,
so a backend's own bookkeeping needs no lock; only the work it runs, and its
reports, happen elsewhere.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..pipeline import (
    AsyncRunner,
    Invoke,
    Outcome,
    Run,
    Services,
    Steps,
    after_timeout,
    attempt,
    publish_progress,
)

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Backend", "BackendUnavailable", "ContextSpec", "Host", "Job"]

# "all": jobs run in a copy of the caller's whole context; a tuple: the only
# ContextVars a remote backend ships (and sets) where it runs the tool.
ContextSpec = Literal["all"] | tuple[contextvars.ContextVar[Any], ...]


class BackendUnavailable(Exception):
    """A backend cannot take a job now (it could not start a worker, say).

    The call ends `rejected` with `TOOL_UNAVAILABLE` and this message."""


@dataclass(frozen=True, slots=True)
class Job:
    """One unit of work for a backend: attempt `attempt` of `run`, or, when
    `timed_out_in` is not None, what follows that attempt's timeout (the retry
    decision and the post-call hooks)."""

    run: Run
    attempt: int
    timed_out_in: str | None = None

    def steps(self, services: Services, invoke: Invoke | None = None) -> Steps:
        """The pipeline steps this job stands for, to be driven by the backend.

        `invoke(run, params, ctx)` runs the tool itself (default: `tool.invoke`
        right here); a backend that runs tools elsewhere passes its own."""
        if self.timed_out_in is None:
            return attempt(self.run, self.attempt, services, invoke)
        return after_timeout(self.run, self.attempt, self.timed_out_in, services)

    @property
    def remaining(self) -> float | None:
        """Seconds left before the attempt's deadline (None: none). A remote
        backend rebases this on its own clock; it never sees a monotonic time."""
        return self.run.remaining()

    @property
    def context(self) -> contextvars.Context:
        """The caller's contextvars, as captured at submission."""
        return self.run.context

    def progress(
        self, services: Services, message: str, fraction: float | None = None, **data: Any
    ) -> None:
        """The progress channel: announce the tool's progress (scrubbed of secrets)."""
        publish_progress(self.run, services, message, fraction, data)


class Host(Protocol):
    """What a backend reports to: its executor's supervisor."""

    @property
    def services(self) -> Services:
        """What the pipeline steps need (the emitter, the hooks, limits)."""
        ...

    @property
    def loop(self) -> AsyncRunner:
        """The executor's event loop thread (for awaitables met on a worker thread)."""
        ...

    def report(self, job: Job, outcome: Outcome, worker: Any = None) -> bool:
        """Called once per job, from any thread, when the job is over.

        `worker` is the backend's own token for what ran it; the supervisor
        hands it back through `Backend.release`. False: the executor is gone."""
        ...

    def report_many(self, reports: list[tuple[Job, Outcome, Any]]) -> bool:
        """`report` for several jobs at once, `(job, outcome, worker)` each: one
        wake-up of the supervisor instead of one per job."""
        ...


@runtime_checkable
class Backend(Protocol):
    """Where a tool's attempts run.

    Names and flags:
    - `name`: how tools and executors refer to it (`backend="thread"`).
    - `can_kill`: `kill` really stops a job (a process can be killed, a thread
      cannot).
    - `uses_threads`: each running job holds a thread of this process; such jobs
      count against `Executor(max_abandoned_workers=...)`.
    - `carries_context`: "all" when jobs run in a copy of the caller's
      contextvars, or the tuple of `ContextVar`s a remote backend ships.
    """

    name: str
    can_kill: bool
    uses_threads: bool
    carries_context: ContextSpec

    def check(self, tool: Tool) -> None:
        """Raise ValueError, saying why, if this backend cannot run `tool`.

        Called when a tool is bound to the backend (registration, or the
        executor's start), so a pairing that cannot work fails early."""
        ...

    def start(self, host: Host) -> None:
        """Begin serving one executor. A backend serves one executor only."""
        ...

    def submit(self, job: Job) -> None:
        """Run `job`; report its Outcome to the host exactly once.

        Raise `BackendUnavailable` if it cannot be taken at all."""
        ...

    def release(self, job: Job, worker: Any) -> None:
        """The supervisor has read the report of `job`, run by `worker`."""
        ...

    def cancel(self, job: Job) -> None:
        """The job's outcome is no longer wanted (deadline, cancellation): stop it
        cooperatively if possible. Its worker no longer serves the call; if it
        keeps running it counts as abandoned until it reports."""
        ...

    def kill(self, job: Job) -> bool:
        """Stop the job's worker for real; False if this backend cannot."""
        ...

    def busy(self, tool: Tool | None = None) -> int:
        """Jobs running now (of `tool`, or all), abandoned ones excluded."""
        ...

    def abandoned(self, tool: Tool | None = None) -> int:
        """Workers still stuck in jobs that were given up (for `tool`, or all)."""
        ...

    def stop(self) -> None:
        """Stop serving: called when the executor closes. Must not block on jobs."""
        ...
