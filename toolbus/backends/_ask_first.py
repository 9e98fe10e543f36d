"""A call's policies asked on the thread that dispatches it, before any worker.

A call under a rate limit may be made to wait (`Delay`): asked on a worker,
that wait would have woken a thread, or started one, only to hand it back at
once, and every time the call is asked again. So the thread backend begins
such an attempt right where it is dispatched (a caller's thread, or whichever
thread runs the scheduler), under the scheduler's lock: admission, then the
policies. A call they let through is handed to a worker *between* steps (the
steps yield `HANDOFF`), which runs the rest: the journal, the tool, the result.
A call they make wait, refuse or answer never reaches the pool.

Only what never blocks may run here: the default admission (no pre-call hook,
authorizer or masker of the user's: `Services.plain_admission`), or a call
admitted already (asked again after a wait), and policies whose `admit` never
blocks (`never_blocks`: a rate limit kept in memory, or a policy that does not
override `BasePolicy.admit`). Anything else is asked on the worker, as before.
"""

from __future__ import annotations

import contextvars
import functools
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
    has policies left to ask, all of them never block, and its admission runs
    no user code (or is done)."""
    if run.policy_at >= len(run.policies) or not (run.admitted or services.plain_admission):
        return False
    chain = run.policies[run.policy_at :]
    try:
        return _never_block(chain)  # cached: a tool's runs share their plan's chain
    except Exception:  # a policy that cannot be hashed, or whose flag raises
        try:
            return _never_blocks(chain)
        except Exception:
            return False  # asked on a worker, where what it raises is contained


def _never_blocks(chain: tuple[Any, ...]) -> bool:
    return all(
        getattr(p, "never_blocks", False) is True
        or getattr(type(p), "admit", None) is BasePolicy.admit
        for p in chain
    )


_never_block = functools.lru_cache(maxsize=256)(_never_blocks)


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
