"""A remote call sent from the thread that dispatches it, finished where its reply lands.

On the loop path of the remote backends (`ProcessBackend`, `RayBackend`) a
warm call costs five turns of the executor's event loop: the job is handed to
the loop thread (a wake-up), runs as a task up to the send, the reply wakes
the task (Ray's in two turns), the task ends, its report is flushed. A
`Direct` job takes the common call past all that:

- the dispatching thread (inside `Backend.submit`, under the supervisor's
  lock) runs the call's steps up to the tool and sends the call itself: only
  when those steps run no user code and await nothing (`runs_plain`), and
  only with a worker free now. A send that fails is raised on the loop: what
  follows it (the retry decision, post-call hooks) is user code;
- the reply finishes the steps on the executor's loop thread, where the
  process backend's replies land anyway (a Ray reply is handed there in one
  `call_soon_threadsafe`), and the outcome is reported from there, with the
  other outcomes of that loop turn (`Lane.report`).

One wake-up of the loop per call instead of two, two turns instead of five,
and no hop to the loop before the send. The price: the send happens under
the supervisor's lock, as any dispatch does (messages posted meanwhile wait
their turn; nobody blocks), so a burst of dispatches holds it for the sends
too.

Whatever else the steps await (an async post-call hook, a crashed worker's
exit status) hands the rest of them to the loop as a task (`Lane.resume`):
the loop path from there on. Deadlines, cancellations and kills are the loop
path's: the supervisor settles the attempt and kills its worker; the worker's
end reaches the steps as `WorkerKilled` (LOST), and a reply that beat the
kill is a late result (`Run.try_settle` decides, as everywhere).

The send and the reply race: the reply may land before the dispatching thread
is out of the steps. Both *arrive*, under a lock; whichever comes second
resumes the steps, so they are driven by one thread at a time and resumed
exactly once. A dispatching thread that comes second never resumes them
itself (it may hold the supervisor's lock, and post-call hooks are user
code): it hands them to the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ..pipeline import LOST, Invoke, Outcome, Steps
from ._thread import contain

if TYPE_CHECKING:
    from ..pipeline import Run, Services
    from ..tools import ToolContext
    from ._loop import Lane
    from ._protocol import Job

__all__ = ["Direct", "Pending", "runs_plain"]


def runs_plain(job: Job, services: Services) -> bool:
    """Whether `job`'s steps up to the tool run no user code and await nothing:
    an attempt (not what follows a timeout) of an executor whose pre-call
    hooks are its defaults, with no policy to ask or tell, no intent to
    journal and no value to inject. Only such a job may start on the thread
    that dispatches it (a call refused there ends there, without user code)."""
    if job.timed_out_in is not None:
        return False
    run = job.run
    tool = run.tool
    if tool is None or run.policy_at < len(run.policies):
        return False
    if run.consulted or run.delayed_by is not None:
        return False  # its policies are told how it ends: a rejection ends it here
    if services.journal is not None and not run.read_only and not run.journaled:
        return False
    if run.admitted:
        return True  # a retry: admission is behind it
    return services.plain_admission and not (tool.injected and services.inject)


class Pending:
    """What a reply means, once something is awaited (a crashed worker's exit
    status): the rest of the steps go to the loop, which awaits it."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable


# send(direct, run, ctx): on the dispatching thread, take a ready worker, send
# the call and set `direct.finish`; False if no worker is ready (the loop path
# then takes the call). Raises what the tool's call would (arguments that
# cannot be sent).
Send = Callable[["Direct", "Run", "ToolContext"], bool]
# finish(reply): on the loop thread, what the reply means for the call: the
# tool's value, or raise its error, or a `Pending`.
Finish = Callable[[Any], Any]


_SENT, _REPLIED = 1, 2
_BOTH = _SENT | _REPLIED


async def _reply() -> Any:
    """The awaitable the tool's invocation yields when the call was sent: never
    awaited (the reply resumes the steps), only recognised, then closed."""


async def _raise(error: BaseException) -> Any:
    raise error


class Direct:
    """One job sent from its dispatching thread (see the module's docstring)."""

    __slots__ = ("_arrived", "_context", "_lock", "_marker", "_reply", "_steps", "finish", "invoke",
                 "job", "lane", "send")  # fmt: skip

    def __init__(self, job: Job, lane: Lane, send: Send, invoke: Invoke) -> None:
        self.job = job
        self.lane = lane
        self.send = send
        self.invoke = invoke  # the loop path's
        self.finish: Finish | None = None  # set by `send` with the call sent
        self._lock = threading.Lock()
        self._arrived = 0  # _SENT | _REPLIED: who is here (the second resumes)
        self._reply: Any = None
        self._marker: Coroutine[Any, Any, Any] | None = None
        self._context = job.run.context.copy()
        # Dropped once they end or go to the loop (they hold this object: a cycle).
        self._steps: Steps | None = job.steps(lane.services, self._invoke)

    # -- the dispatching thread -------------------------------------------------------

    def start(self) -> None:
        """Run the steps up to the send, on this thread."""
        self._drive(None, None)

    def _invoke(self, run: Run, params: Any, ctx: ToolContext) -> Any:
        if self._steps is None:  # handed to the loop before the send: the loop path
            return self.invoke(run, params, ctx)
        try:
            sent = self.send(self, run, ctx)
        except BaseException as e:
            # Raised on the loop: what follows a failed attempt (the retry
            # decision, post-call hooks) is user code.
            return _raise(e)
        if not sent:  # no worker free now: the loop path
            return self.invoke(run, params, ctx)
        self._marker = _reply()
        return self._marker

    def _sent(self) -> None:
        """The steps yielded at the send: wait for the reply, or resume with it."""
        marker, self._marker = self._marker, None
        if marker is not None:
            marker.close()
        with self._lock:
            self._arrived |= _SENT
            last = self._arrived == _BOTH
        if last:
            self._hand_to_loop()

    # -- the reply (any thread) -------------------------------------------------------

    def replied(self, reply: Any) -> None:
        """The call's reply (or its worker's end) is here; only the first counts.
        On the loop thread it resumes the steps at once if the dispatching
        thread is done with them."""
        with self._lock:
            if self._arrived & _REPLIED:
                return
            self._reply = reply
            self._arrived |= _REPLIED
            last = self._arrived == _BOTH
        if not last:
            return
        if asyncio._get_running_loop() is self.lane.loop:
            self._resume()
        else:
            self._hand_to_loop()

    def _hand_to_loop(self) -> None:
        loop = self.lane.loop
        try:
            if loop is None:
                raise RuntimeError("the loop is gone")
            loop.call_soon_threadsafe(self._resume)
        except RuntimeError:
            self._abandon()  # closed: the executor is closing

    # -- the loop thread --------------------------------------------------------------

    def _resume(self) -> None:
        assert self.finish is not None
        try:
            value = self.finish(self._reply)
        except BaseException as e:
            self._drive(None, e)
            return
        finally:
            self._reply = None
        if type(value) is Pending:
            self._to_lane(value.awaitable)
        else:
            self._drive(value, None)

    def _drive(self, value: Any, error: BaseException | None) -> None:
        """Resume the steps with `value` (or `error`) until they end, send, or await."""
        steps, run = self._steps, self.job.run
        assert steps is not None
        try:
            if error is not None:
                aw = self._context.run(steps.throw, error)
            else:
                aw = self._context.run(steps.send, value)
        except StopIteration as stop:
            outcome: Outcome = stop.value
        except asyncio.CancelledError as e:
            outcome = (
                LOST if run.settled or run.completed else contain(self.job, e, self.lane.services)
            )
        except BaseException as e:
            outcome = contain(self.job, e, self.lane.services)
        else:
            if aw is self._marker and aw is not None:
                self._sent()
            else:
                self._to_lane(aw)
            return
        self._steps = None
        lane = self.lane
        if asyncio._get_running_loop() is lane.loop:
            lane.report(self.job, outcome)  # with the others of this turn: one wake-up
        else:
            lane.host.report(self.job, outcome)

    def _to_lane(self, awaitable: Awaitable[Any]) -> None:
        steps, self._steps = self._steps, None
        assert steps is not None
        self.lane.resume(self.job, steps, awaitable, self._context)

    def _abandon(self) -> None:
        steps, self._steps = self._steps, None
        assert steps is not None
        self.lane.abandon(self.job, steps, self._context)
