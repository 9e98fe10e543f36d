"""The executor's threads and actors: started as the executor is made.

An executor runs on a timer thread (deadlines, retry delays), an event-loop
thread (async tools and hooks), the scheduler (admission and dispatch, on the
caller's thread under its lock) and a supervisor actor that carries timer
messages to it. `start` starts them in that order and, should one fail,
stops those already started before it raises. `Executor.close` stops them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import pykka

from ..actors import Scheduler, Supervisor, SupervisorHost, TimerService
from ..actors._messages import HaltRun
from ..backends import Backends, LoopThread
from ..bus import Emitter
from ..hooks import ExecutorHooks
from ..journal import Journal
from ..journal._session import Session
from ..masking import EMPTY_SCRUBBER, Scrubber
from ..models import ToolCall
from ..pipeline import NestedCalls, Services
from ..scanning import ContentScanner
from ._journal import CallsInDoubt
from ._options import Options

__all__ = [
    "HOOK_ATTRIBUTES",
    "Machinery",
    "plain_admission",
    "plain_post",
    "refresh_plain",
    "start",
]


class Machinery(NamedTuple):
    """What `start` started (the executor keeps each as an attribute)."""

    timers: TimerService
    loop: LoopThread
    services: Services
    scheduler: Scheduler
    supervisor: pykka.ActorRef[Any]


def start(
    hooks: ExecutorHooks,
    nested: NestedCalls,
    opts: Options,
    *,
    emitter: Emitter,
    journal: Journal | None,
    session: Session | None,
    journal_required: bool = False,
    in_doubt: CallsInDoubt | None = None,
    inject: Mapping[str, Callable[[ToolCall], Any]],
    backends: Backends,
    groups: dict[str, int],
    group_queues: dict[str, int] | None = None,
    scanner: ContentScanner | None = None,
) -> Machinery:
    """Start an executor's threads and actors; `hooks` is the executor."""
    timers: TimerService | None = None
    loop: LoopThread | None = None
    try:
        timers = TimerService()
        loop = LoopThread()
        # With a journal, its secret: keys stay the same across restarts.
        key_secret = journal._key_secret if journal is not None else os.urandom(32)
        # The scanner's `hash` action under the same secret: a tag stays the
        # same across restarts with a journal.
        scrubber = Scrubber(scanner=scanner.keyed(key_secret)) if scanner else EMPTY_SCRUBBER
        services = Services(
            emitter=emitter,
            hooks=hooks,
            max_argument_bytes=opts.max_argument_bytes,
            key_secret=key_secret,
            journal=session,
            journal_required=journal_required,
            in_doubt=in_doubt,
            inject=inject,
            nested=nested,
            plain_admission=plain_admission(hooks),
            plain_post=plain_post(hooks),
            plain_retry=_default(hooks, "should_retry"),
            secret_keys=hooks._secret_keys,
            scrubber=scrubber,
        )
        host = SupervisorHost(services, loop)
        scheduler = host.scheduler = Scheduler(
            services,
            timers,
            host,
            max_parallel=opts.max_parallel,
            max_abandoned=opts.max_abandoned_workers,
            max_abandoned_per_tool=opts.max_abandoned_per_tool,
            hook_grace=opts.hook_grace,
            backends=backends.all(),
            groups=groups,
            max_queued=opts.max_queued,
            group_queues=group_queues,
        )
        supervisor = Supervisor.start(scheduler)

        def tell_halt(agent_run: str | None, batch: Any, reason: str, by: Any, fresh: bool) -> None:
            scheduler.post(HaltRun(agent_run, batch, reason, by, fresh))

        services.halts.tell = tell_halt
        halts = services.halts
        halts.dropped = services.pending.drop_run
        services.pending.halted = lambda agent_run: halts.reason(agent_run) is not None
        if journal is not None:  # approvals held there: every process on it sees them
            services.used_decisions.record = journal.use_decision
            services.pending.store = journal
    except BaseException:  # (the supervisor starts last: nothing to stop of it)
        for thing in (timers, loop):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close()
        raise
    return Machinery(timers, loop, services, scheduler, supervisor)


def plain_admission(hooks: ExecutorHooks) -> bool:
    """No user code admits a call: no pre-call hook, authorizer or masker,
    and none of those hooks overridden (see `Services.plain_admission`)."""
    if hooks._pre_call or hooks._authorize is not None or hooks._masker is not None:
        return False
    return all(_default(hooks, name) for name in ("pre_execute", "is_allowed", "mask_arguments"))


def plain_post(hooks: ExecutorHooks) -> bool:
    """No user code sees a result before it is final: no post-call hook, and
    `post_execute` not overridden (see `Services.plain_post`)."""
    return not hooks._post_call and _default(hooks, "post_execute")


# What decides `plain_admission`, `plain_post` and `plain_retry`: set on an
# executor after it starts, the flags are worked out again (`refresh_plain`).
HOOK_ATTRIBUTES = frozenset(
    {"pre_execute", "is_allowed", "mask_arguments", "post_execute", "should_retry",
     "_pre_call", "_post_call", "_authorize", "_masker"}
)  # fmt: skip


def _default(hooks: ExecutorHooks, name: str) -> bool:
    """Whether hook `name` is toolbus's own: not overridden by a subclass, nor
    set on the instance."""
    return name not in getattr(hooks, "__dict__", {}) and getattr(type(hooks), name) is getattr(
        ExecutorHooks, name
    )


def refresh_plain(services: Services, hooks: ExecutorHooks) -> None:
    """Work out `services.plain_admission`, `plain_post` and `plain_retry`
    again (a hook was set)."""
    services.set_plain(plain_admission(hooks), plain_post(hooks), _default(hooks, "should_retry"))
