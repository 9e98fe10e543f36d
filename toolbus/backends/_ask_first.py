"""A call's policies asked on the thread that dispatches it, before any worker.

A call under a rate limit may be made to wait (`Delay`): asked on a worker,
that wait would have woken a thread, or started one, only to hand it back at
once, and every time the call is asked again. So the thread backend begins
such an attempt right where it is dispatched (a caller's thread, or whichever
thread runs the scheduler), under the scheduler's lock: admission, then the
policies. A call they let through is handed to a worker *between* steps (the
steps yield `HANDOFF`), which runs the rest: the journal, the tool, the result.
A call they make wait, refuse or answer never reaches the pool.

Only what never blocks may run here, since nothing else of the scheduler's
moves meanwhile: the default admission (no pre-call hook, authorizer, masker
or injected value's provider of the user's), or a call admitted already
(asked again after a wait), and policies whose `admit` never blocks
(`never_blocks`: a rate limit kept in memory with no key function, or a
policy that keeps `BasePolicy.admit`). Anything else is asked on the worker,
as before.

The price: an admitted call starts a worker's wake-up after its policies let
it through (about 0.1 ms on an idle machine; more on a busy one), where a
worker that asked them itself started the tool at once.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from ..pipeline import HANDOFF, Outcome, Run, Services, Steps, attempt
from ..policies._protocol import BasePolicy
from ._protocol import Host, Job

__all__ = ["BegunJob", "asks_here", "begin_here"]


@dataclass(frozen=True, slots=True)
class BegunJob(Job):
    """A job whose steps were begun on the dispatching thread: a worker resumes
    `begun` in `begun_in`, resolving `pending` first if they yielded an awaitable."""

    begun: Steps = None  # type: ignore[assignment]  # (always given: `begin_here`)
    begun_in: contextvars.Context = None  # type: ignore[assignment]
    pending: Any = None


def asks_here(run: Run, services: Services) -> bool:
    """Whether `run`'s next attempt may be begun on the dispatching thread: it
    has policies left to ask, none of which may block, and what admits it
    first runs no code of the user's that might (or it is admitted already)."""
    if run.policy_at >= len(run.policies):
        return False
    if not run.admitted:
        tool = run.tool
        # A pre-call hook, an authorizer or a masker, or an injected value's
        # provider, is the user's code: it runs on a worker, as do the
        # policies after it (argument validation is not asked to be quick,
        # but it is: it runs here).
        if not services.plain_admission or (tool is not None and tool.injected and services.inject):
            return False
    for policy in run.policies[run.policy_at :]:
        try:
            quick = getattr(policy, "never_blocks", False) is True or (
                getattr(type(policy), "admit", None) is BasePolicy.admit
            )
        except Exception:  # a flag that raises: asked on a worker, which contains it
            return False
        if not quick:
            return False
    return True


def begin_here(job: Job, host: Host) -> BegunJob | None:
    """Run `job`'s steps on this thread up to the tool. None: the call's
    admission or policies decided it here (made it wait, refused or answered
    it), and its outcome is reported; else the job a worker is to carry on.
    Raises what the steps raise (an internal error: nothing of the user's)."""
    run = job.run
    services = host.services
    steps = attempt(run, job.attempt, services, handoff=True)
    # The steps' context from here on: the worker resumes them in it, so the
    # tool sees what admission and the policies set (`current_run`).
    context = run.context.copy()
    try:
        yielded = context.run(steps.send, None)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        host.report(job, outcome)
        return None
    # Anything else it raises is the caller's to contain (`ThreadBackend.submit`).
    return BegunJob(
        run,
        job.attempt,
        begun=steps,
        begun_in=context,
        pending=None if yielded is HANDOFF else yielded,
    )
