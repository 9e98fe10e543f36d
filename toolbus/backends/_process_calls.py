"""A part of `ProcessBackend`: one call's round trip to a worker process.

Two ways. The loop path (`_call`, a coroutine on the executor's loop) takes a
worker from the tool's pool (starting one if needed), sends the request and
awaits the reply. A direct call (`_send`, see `_direct.py`) is sent from the
thread that dispatches it, to a worker idle now, and its reply is taken where
it lands: on the loop thread, by the worker's reader. Both share the request,
the bookkeeping `kill` reads (`_serving`), and what a reply means (`_outcome`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..pipeline import (
    SetUpTime,
    ToolCrashed,
    WorkerKilled,
    log_contained,
    logged,
    progress_fraction,
    publish_progress,
)
from ..tools import ToolError
from ._cpuwatch import watch_cpu
from ._direct import Direct, Pending, runs_plain
from ._procpool import Pool
from ._procs import START_TIMEOUT, WorkerProcess, describe_exit
from ._remote import value_of
from ._remote_base import RemoteBackend
from ._wire import encode
from ._worker import CallRequest

if TYPE_CHECKING:
    from ..pipeline import Run
    from ..tools import Tool, ToolContext
    from ._protocol import Job
    from ._shipping import Shipped

__all__ = ["WorkerCalls"]

_MISSING = object()
# How long a worker's exit status is waited for once its connection closed: it
# comes at once when it died; a worker still alive after this is killed.
_STATUS_TIMEOUT = 0.5
# How long a killed worker's death is waited for before its attempt counts as
# ended (its journal record let go): a SIGKILL takes effect once the kernel
# delivers it, within milliseconds unless the process is inside a system call
# that cannot be interrupted (a write to a hung disk); a zygote that never says
# is not waited for beyond this.
_DEATH_TIMEOUT = 10.0
# How many workers a call is sent to, each dead before the request reached it,
# before it ends TOOL_CRASHED (it never ran).
_SENDS = 3
# What `_outcome` says of a call whose worker never read its request.
_UNREAD = object()


class WorkerCalls(RemoteBackend[WorkerProcess]):
    """The calls of a `ProcessBackend` (a part of it)."""

    cpu_limit_s: float | None
    _pools: dict[int, Pool]
    _seqs: itertools.count[int]
    _shipped: dict[int, tuple[Tool, Shipped]]
    _vars: list[tuple[contextvars.ContextVar[Any], str, str]]

    if TYPE_CHECKING:

        def _pool(self, tool: Tool) -> Pool: ...
        def _killed(self, run: Run, worker: WorkerProcess, reason: str) -> None: ...

    async def _call(self, run: Run, ctx: ToolContext) -> Any:
        """Run the tool of `run` in a worker; its value, or raise what it raised."""
        tool = run.tool
        assert tool is not None
        pool = self._pool(tool)
        cpu = tool.cpu_limit_s or self.cpu_limit_s
        for _ in range(_SENDS):
            worker = await self._acquire(run, pool, tool.name)
            message = await self._round_trip(run, ctx, pool, worker, cpu)
            if message is None:  # it could not be sent: the worker is dead
                pool.lost(worker)
                continue
            value = self._outcome(worker, pool, tool.name, message, cpu)
            if value is not _UNREAD:
                break
        else:
            raise ToolCrashed(
                f"Tool '{tool.name}' did not run: {_SENDS} worker processes in a row died "
                "before its request reached them"
            )
        if type(value) is Pending:
            return await value.awaitable
        return value

    async def _acquire(self, run: Run, pool: Pool, name: str) -> WorkerProcess:
        # Starting the zygotes and a worker is off the deadline's clock (the
        # first call of a tool pays for it; a wait for a busy pool's worker is
        # in the scheduler's queue, not here).
        with SetUpTime(run, 2 * START_TIMEOUT):
            try:
                return await pool.acquire()
            except asyncio.CancelledError:
                raise WorkerKilled() from None
            except ImportError as e:
                raise ToolError(
                    f"Tool '{name}' could not be loaded in a worker process: {e}", retryable=False
                ) from None
            except Exception as e:
                raise ToolCrashed(f"no worker process could be started for '{name}': {e}") from None

    async def _round_trip(
        self, run: Run, ctx: ToolContext, pool: Pool, worker: WorkerProcess, cpu: float | None
    ) -> dict[str, Any] | None:
        """Send the call to `worker`: its last message; None if the request
        could not be sent (the worker is dead: it never ran)."""
        seq = next(self._seqs)
        try:
            data = self._request(run, ctx, worker, seq, cpu)
        except BaseException:
            pool.release(worker)
            raise
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[dict[str, Any]] = loop.create_future()

        def deliver(message: dict[str, Any]) -> None:
            if not reply.done():
                reply.set_result(message)

        self._serve(run, worker, seq, deliver)
        watch = loop.create_task(watch_cpu(worker, cpu, reply)) if cpu is not None else None
        try:
            if run.settled:  # stopped while we prepared: the kill found no worker yet
                raise asyncio.CancelledError
            if await worker.send(data):
                assert run.tool is not None
                worker.knows.add(id(run.tool))
                message: dict[str, Any] | None = await reply
            else:
                message = None
        except asyncio.CancelledError:
            self._forget(run, worker)
            self._killed(run, worker, run.stop_reason or "cancelled")
            pool.lost(worker)
            await _seen_dead(worker)
            raise WorkerKilled() from None
        except BaseException:
            self._forget(run, worker)
            pool.release(worker)
            raise
        finally:
            if watch is not None:
                watch.cancel()
        self._forget(run, worker)
        return message

    # -- a call sent from the dispatching thread (see _direct.py) ---------------------

    def _direct(self, job: Job) -> bool:
        """Whether `job` may be sent from the dispatching thread: its steps up to
        the tool run no user code, and its tool's pool is up (a worker may be
        ready). A CPU limit needs the loop's watch: not those."""
        tool = job.run.tool
        assert tool is not None
        assert self._host is not None
        return (
            id(tool) in self._pools
            and (tool.cpu_limit_s or self.cpu_limit_s) is None
            and runs_plain(job, self._host.services)
        )

    def _send(self, direct: Direct, run: Run, ctx: ToolContext) -> bool:
        """The dispatching thread: send the call to an idle worker (False: none)."""
        tool = run.tool
        assert tool is not None
        pool = self._pools.get(id(tool))
        worker = pool.take() if pool is not None else None
        if worker is None:
            return False
        assert pool is not None
        seq = next(self._seqs)
        try:
            if run.settled:  # stopped already: nothing to send
                raise WorkerKilled()
            data = self._request(run, ctx, worker, seq, None)
        except BaseException:
            pool.give_back(worker)
            raise
        direct.finish = functools.partial(self._finished, run, ctx, worker, pool)
        self._serve(run, worker, seq, direct.replied)
        if not worker.send_now(data):
            # Dead before the request reached it: the call never ran, and the
            # loop path sends it to another worker (this one is counted out there).
            self._forget(run, worker)
            pool.give_back(worker)
            return False
        worker.knows.add(id(tool))
        return True

    def _finished(
        self, run: Run, ctx: ToolContext, worker: WorkerProcess, pool: Pool, message: Any
    ) -> Any:
        """The loop thread: what the reply to a call sent directly means."""
        self._forget(run, worker)
        assert run.tool is not None
        value = self._outcome(worker, pool, run.tool.name, message, None)
        if value is _UNREAD:
            return Pending(self._call(run, ctx))
        return value

    # -- both ways --------------------------------------------------------------------

    def _request(
        self, run: Run, ctx: ToolContext, worker: WorkerProcess, seq: int, cpu: float | None
    ) -> bytes:
        """The call as the worker's request frame; TypeError if it cannot be sent."""
        tool = run.tool
        assert tool is not None
        context = [
            (module, attr, value)
            for var, module, attr in self._vars
            if (value := run.context.get(var, _MISSING)) is not _MISSING
        ]
        tool_id = id(tool)
        request = CallRequest(
            None if tool_id in worker.knows else self._shipped[tool_id][1],
            tool_id,
            tool.name,
            run.call.arguments,
            seq=seq,
            call_id=run.call.id,
            attempt=run.attempt,
            remaining=run.remaining(),
            key=ctx.idempotency_key,
            context=context,
            cpu_limit_s=cpu,
        )
        try:
            return encode(request)
        except Exception as e:
            names = ", ".join(f"{m}.{a}" for m, a, _ in context) or "none"
            raise TypeError(
                f"the call to '{tool.name}' cannot be sent to its worker process (arguments, "
                f"or the context_vars values: {names}): {e}"
            ) from None

    def _serve(
        self, run: Run, worker: WorkerProcess, seq: int, deliver: Callable[[Any], None]
    ) -> None:
        """`worker` serves `run` now: its frames tagged `seq` reach `deliver`
        (progress is published on the way), and `kill` finds it."""
        assert self._host is not None
        services = self._host.services

        def report(message: dict[str, Any], kind: Any) -> None:
            if kind == "progress":
                data = message.get("data")
                publish_progress(
                    run,
                    services,
                    str(message.get("message", "")),
                    progress_fraction(message.get("fraction")),
                    data if isinstance(data, dict) else {},
                )
            elif kind == "log":
                logged(run, message)
            else:
                # Lost, as a log message that cannot be written is: the call goes on.
                log_contained(
                    f"a {message['of']} message of call {run.call.id} could not be read "
                    "from its worker process; dropped",
                    message["error"],
                    run.scrubber,
                )

        def on_message(message: dict[str, Any]) -> None:
            kind = message.get("kind")
            if kind in ("progress", "log") or (
                kind == "garbled" and message.get("of") in ("progress", "log")
            ):
                # One report that cannot be published is dropped alone: never
                # the frames read with it (the reply), never the call.
                try:
                    report(message, kind)
                except Exception as e:
                    log_contained(
                        f"a {kind} message of call {run.call.id} could not be handled; dropped",
                        e,
                        run.scrubber,
                    )
            else:
                deliver(message)

        worker.seq = seq
        worker.on_message = on_message
        self._track(run, worker)

    def _forget(self, run: Run, worker: WorkerProcess) -> None:
        """`worker` no longer serves `run`: before it is released (another
        thread may take it at once), and under the lock `kill` reads it with,
        so whether it was killed is settled once this returns."""
        worker.on_message = None
        self._untrack(run, worker)

    def _outcome(
        self, worker: WorkerProcess, pool: Pool, name: str, message: Any, cpu: float | None
    ) -> Any:
        """What a worker's last message means: the tool's value, or raise its
        error; a `Pending` when its exit status must be awaited first;
        `_UNREAD` if the worker never read the request (send it elsewhere)."""
        kind = message.get("kind")
        if kind in ("ok", "raised"):
            pool.release(worker)
            return value_of(message)
        if kind == "garbled":
            # It ran, and what it returned is lost: not retried (a mutating call
            # had its effect), and its worker, whose state is unknown, replaced.
            worker.kill("lost")
            pool.lost(worker)
            return Pending(
                _once_dead(
                    worker,
                    ToolError(
                        f"Tool '{name}' failed: its reply could not be read from its worker "
                        f"process ({message.get('error')})",
                        retryable=False,
                    ),
                )
            )
        if kind == "crashed":  # it said why (a limit), or the CPU watch did
            worker.kill("lost")
            pool.lost(worker)
            crashed = ToolCrashed(f"Tool '{name}' crashed: {message.get('why')}", retry=False)
            return Pending(_once_dead(worker, crashed))
        if worker.killed in ("", "lost") and not worker.reached():
            # It died (or its zygote did) before it read the request: the call
            # never ran, and goes to another worker. Not one toolbus killed
            # to end the call (a deadline, a cancellation, closing).
            pool.lost(worker)
            return _UNREAD
        if worker.killed:
            pool.lost(worker)
            return Pending(_once_dead(worker, WorkerKilled()))
        return Pending(self._exited(worker, pool, name, cpu))

    async def _exited(self, worker: WorkerProcess, pool: Pool, name: str, cpu: float | None) -> Any:
        """The connection closed: its zygote says how it ended (at once, if it did)."""
        try:
            status = await asyncio.wait_for(asyncio.shield(worker.status), _STATUS_TIMEOUT)
            why, limit = describe_exit(status, pool.memory_limit_mb, cpu)
        except TimeoutError:
            why, limit = "its worker process closed its connection to toolbus; it was killed", False
        except asyncio.CancelledError:
            worker.kill("lost")
            pool.lost(worker)
            await _seen_dead(worker)
            raise WorkerKilled() from None
        worker.kill("lost")  # of no more use, whatever it was doing
        pool.lost(worker)
        # Over a limit it would be over it again: not worth a retry.
        raise ToolCrashed(f"Tool '{name}' crashed: {why}", retry=not limit)


async def _once_dead(worker: WorkerProcess, error: BaseException) -> Any:
    """Raise `error` once the worker just killed is seen dead (`_seen_dead`):
    the attempt, and the key a journal holds for it, end no sooner."""
    await _seen_dead(worker)
    raise error


async def _seen_dead(worker: WorkerProcess) -> None:
    """Return once the killed `worker`'s exit is seen (its zygote reaped it), or
    after `_DEATH_TIMEOUT`: until then its tool may still be running, so its
    attempt has not ended (a journal holds the call's key until it has). A
    second cancellation (the executor closing) stops the wait."""
    try:
        await asyncio.wait_for(asyncio.shield(worker.status), _DEATH_TIMEOUT)
    except (TimeoutError, asyncio.CancelledError):
        pass
