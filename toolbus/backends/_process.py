"""The process backend: where a hung tool is killed, not abandoned.

Each tool gets a pool of warm worker processes (`_procpool.py`), forked by a
zygote (`_zygote.py`), that run its calls one at a time (`_worker.py`). The
call's steps (hooks, masking, events, retries) stay in this process, on the
executor's event loop; only the tool itself crosses, by import reference, with
its arguments and result as pickles. Waiting for a worker holds no thread.

At a deadline or a cancellation the supervisor calls `cancel`, which sends
SIGKILL to the worker's process group, so everything the tool started dies
with it; the call gets its `timeout`/`cancelled` result as usual, the kill is
announced as `tool:killed`, and a replacement worker is started at once. A
worker that dies by itself (`os._exit`, a signal, the kernel's OOM killer, a
limit) ends the call `error`/`TOOL_CRASHED`; the host lives on.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._options import check_cpu_limit, check_memory_limit, positive_int
from ..pipeline import (
    RUNNING,
    STARTING,
    ToolCrashed,
    WorkerKilled,
    publish_killed,
    publish_progress,
)
from ..tools import ToolError
from ._cpuwatch import watch_cpu
from ._loop import Lane
from ._procpool import (
    START_TIMEOUT,
    Pool,
    Sources,
    WorkerProcess,
    Zygote,
    _retrieved,
    describe_exit,
    start_root,
)
from ._protocol import BackendUnavailable, ContextSpec, Host, Job
from ._remote import output_of, remote_error
from ._shipping import Shipped, check_shippable, ship
from ._wire import encode
from ._worker import CallRequest

if TYPE_CHECKING:
    from ..pipeline import Run
    from ..tools import Tool, ToolContext

__all__ = ["ProcessBackend", "check_process_tool"]

log = logging.getLogger("toolbus.backends")

_MISSING = object()
# How long a worker's exit status is waited for once its connection closed: it
# comes at once when it died; a worker still alive after this is killed.
_STATUS_TIMEOUT = 0.5


def _var_reference(var: contextvars.ContextVar[Any]) -> tuple[str, str]:
    """Where a worker imports `var` from: the module attribute that holds it."""
    if not isinstance(var, contextvars.ContextVar):
        raise TypeError(
            f"ProcessBackend: context_vars must be ContextVar objects, got {type(var).__name__}"
        )
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if value is var:
                return name, attr
    raise ValueError(
        f"ProcessBackend: ContextVar {var.name!r} is not a module-level attribute of an "
        "imported module (not __main__), so a worker process could not find it"
    )


def check_process_tool(tool: Tool) -> None:
    """ValueError, saying why, if `tool` could never run in a worker process."""
    if tool.process_local:
        raise ValueError(
            f"tool {tool.name!r} holds resources of this process (a live session, a "
            "socket): it cannot run in a worker process"
        )
    check_shippable(tool)


class ProcessBackend:
    """Runs each tool's attempts in its own pool of worker processes.

    `memory_limit_mb` (RLIMIT_AS, virtual memory: at least 256 is advisable)
    and `cpu_limit_s` (RLIMIT_CPU per call, counted in whole seconds by the
    kernel) are the defaults for its tools; a tool's own `memory_limit_mb` /
    `cpu_limit_s` win. `max_workers` caps each tool's pool (default: the CPU
    count; a tool's `max_concurrency` lowers it). `context_vars` lists the
    module-level ContextVars whose values travel with each call: no others do.
    """

    name = "process"
    can_kill = True
    uses_threads = False
    enforces_limits = True

    def __init__(
        self,
        memory_limit_mb: int | None = None,
        cpu_limit_s: float | None = None,
        max_workers: int | None = None,
        context_vars: Iterable[contextvars.ContextVar[Any]] = (),
    ) -> None:
        owner = "ProcessBackend"
        self.memory_limit_mb = check_memory_limit(memory_limit_mb, owner)
        self.cpu_limit_s = check_cpu_limit(cpu_limit_s, owner)
        self.max_workers = (
            None if max_workers is None else positive_int(max_workers, "max_workers", owner)
        )
        variables = tuple(context_vars)
        self._vars = [(var, *_var_reference(var)) for var in variables]
        self.carries_context: ContextSpec = variables
        self._host: Host | None = None
        self._lane: Lane | None = None
        self._root: asyncio.Future[Zygote] | None = None  # the loop thread's
        self._root_proc: subprocess.Popen[bytes] | None = None
        self._sources = Sources(self._ready_root)
        self._seq = 0
        self._pools: dict[int, Pool] = {}  # the loop thread's
        self._shipped: dict[int, tuple[Tool, Shipped]] = {}
        # Which worker serves which run: read by `cancel` on the supervisor's thread.
        self._serving: dict[Run, WorkerProcess] = {}
        self._lock = threading.Lock()
        self._busy = 0
        self._busy_by_tool: Counter[int] = Counter()
        self._stopped = False

    # -- the Backend protocol (the supervisor's thread) ---------------------------

    def check(self, tool: Tool) -> None:
        check_process_tool(tool)

    def capacity(self, tool: Tool) -> int:
        """How many calls of `tool` may run at once: its pool's size."""
        size = self.max_workers or os.cpu_count() or 1
        return min(size, tool.max_concurrency) if tool.max_concurrency else size

    def start(self, host: Host) -> None:
        if self._host is not None and self._host is not host and not self._stopped:
            raise RuntimeError("this ProcessBackend already serves another executor")
        if self._host is not host:
            # A backend declared on a tool outlives an executor: serve the next.
            self._host = host
            self._lane = None
            self._root = None
            self._sources = Sources(self._ready_root)
            self._pools.clear()
            self._stopped = False

    def submit(self, job: Job) -> None:
        tool = job.run.tool
        assert tool is not None
        assert self._host is not None
        if self._stopped:
            raise BackendUnavailable("the process backend has stopped")
        known = self._shipped.get(id(tool))
        if known is None or known[0] is not tool:
            try:
                self._shipped[id(tool)] = (tool, ship(tool))
            except ValueError as e:
                raise BackendUnavailable(f"Tool '{tool.name}' is unavailable: {e}") from None
        if self._lane is None:
            self._lane = Lane(self._host.loop.current, self._host, self._invoke)  # type: ignore[attr-defined]
        self._busy += 1
        self._busy_by_tool[id(tool)] += 1
        if not self._lane.submit(job):
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

    def kill(self, job: Job) -> bool:
        """SIGKILL the process group of the worker running `job` (if one is)."""
        run = job.run
        with self._lock:
            worker = self._serving.get(run)
        if worker is not None:
            self._killed(run, worker, run.stop_reason or "cancelled")
        return True

    def busy(self, tool: Tool | None = None) -> int:
        return self._busy if tool is None else self._busy_by_tool[id(tool)]

    def abandoned(self, tool: Tool | None = None) -> int:
        return 0  # killed, never abandoned

    def stop(self) -> None:
        self._stopped = True
        proc = self._root_proc
        root = self._root
        if root is None:
            return
        if not root.done() and proc is not None:
            proc.kill()  # still starting: nobody will use it
        if root.done() and not root.cancelled() and root.exception() is None:
            zygote = root.result()
            zygote.kill_all("closed")  # now, from this thread: the loop may be closing
            try:
                zygote.loop.call_soon_threadsafe(zygote.close)
            except RuntimeError:
                zygote.close()  # the loop is gone: nobody else will touch it

    # -- the loop thread ----------------------------------------------------------

    @property
    def workers_started(self) -> int:
        """Worker processes started so far (for `ExecutorStats.workers_started`)."""
        return sum(p.started for p in list(self._pools.values()))

    @property
    def live_workers(self) -> int:
        """Worker processes alive now, idle or serving (for `ExecutorStats.live_workers`)."""
        return sum(p.live for p in list(self._pools.values()))

    async def _ready_root(self) -> Zygote:
        """The root zygote, started on first use (and again if it died)."""
        f = self._root
        if f is None or (
            f.done() and (f.cancelled() or f.exception() is not None or f.result().closed)
        ):
            f = self._root = asyncio.ensure_future(self._start_root())
            f.add_done_callback(_retrieved)
        return await asyncio.shield(f)

    async def _start_root(self) -> Zygote:
        if self._stopped:
            raise RuntimeError("the process backend has stopped")
        zygote, self._root_proc = start_root(asyncio.get_running_loop())
        try:
            await asyncio.wait_for(asyncio.shield(zygote.ready), START_TIMEOUT)
        except BaseException:
            zygote.close()
            raise
        if self._stopped:
            zygote.close()
            raise RuntimeError("the process backend has stopped")
        return zygote

    def _killed(self, run: Run, worker: WorkerProcess, reason: str) -> None:
        if worker.kill(reason) and self._host is not None:
            publish_killed(run, self._host.services, worker.pid, reason)

    def _pool(self, tool: Tool) -> Pool:
        pool = self._pools.get(id(tool))
        if pool is None:
            shipped = self._shipped[id(tool)][1]
            memory = tool.memory_limit_mb or self.memory_limit_mb
            pool = self._pools[id(tool)] = Pool(
                functools.partial(self._sources.get, shipped.module), self.capacity(tool), memory
            )
        return pool

    def _invoke(self, run: Run, params: Any, ctx: ToolContext) -> Any:
        return self._call(run, ctx)

    async def _call(self, run: Run, ctx: ToolContext) -> Any:
        """Run the tool of `run` in a worker; its value, or raise what it raised."""
        tool = run.tool
        assert tool is not None
        assert self._host is not None
        services = self._host.services
        name = tool.name
        pool = self._pool(tool)
        # Starting the zygotes and a worker is off the deadline's clock (the
        # first call of a tool pays for it; a wait for a busy pool's worker is
        # in the scheduler's queue, not here).
        run.phase = STARTING
        began = time.monotonic()
        try:
            worker = await pool.acquire()
        except asyncio.CancelledError:
            raise WorkerKilled() from None
        except ImportError as e:
            raise ToolError(
                f"Tool '{name}' could not be loaded in a worker process: {e}", retryable=False
            ) from None
        except Exception as e:
            raise ToolCrashed(f"no worker process could be started for '{name}': {e}") from None
        finally:
            # Whatever came of it, the set-up was off the clock.
            if run.deadline is not None:
                run.deadline += min(time.monotonic() - began, 2 * START_TIMEOUT)
            run.phase = RUNNING
        memory = pool.memory_limit_mb
        cpu = tool.cpu_limit_s or self.cpu_limit_s
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._seq += 1
        worker.seq = seq = self._seq

        def on_message(message: dict[str, Any]) -> None:
            if message.get("kind") == "progress":
                data = message.get("data")
                publish_progress(
                    run,
                    services,
                    str(message.get("message", "")),
                    _fraction(message.get("fraction")),
                    data if isinstance(data, dict) else {},
                )
            elif not reply.done():
                reply.set_result(message)

        worker.on_message = on_message
        with self._lock:
            self._serving[run] = worker
        watch = loop.create_task(watch_cpu(worker, cpu, reply)) if cpu is not None else None
        try:
            context = [
                (module, attr, value)
                for var, module, attr in self._vars
                if (value := run.context.get(var, _MISSING)) is not _MISSING
            ]
            tool_id = id(tool)
            request = CallRequest(
                None if tool_id in worker.knows else self._shipped[tool_id][1],
                tool_id,
                name,
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
                data = encode(request)
            except Exception as e:
                names = ", ".join(f"{m}.{a}" for m, a, _ in context) or "none"
                raise TypeError(
                    f"the call to '{name}' cannot be sent to its worker process (arguments, "
                    f"or the context_vars values: {names}): {e}"
                ) from None
            if run.settled:  # stopped while we prepared: the kill found no worker yet
                raise asyncio.CancelledError
            try:
                await worker.send(data)
                worker.knows.add(tool_id)
            except OSError:
                pass  # it died: its EOF says how
            message = await reply
        except asyncio.CancelledError:
            self._killed(run, worker, run.stop_reason or "cancelled")
            pool.lost(worker)
            raise WorkerKilled() from None
        except BaseException:
            pool.release(worker)
            raise
        finally:
            if watch is not None:
                watch.cancel()
            with self._lock:
                # Only ours: a retry of the run may be on another worker already.
                if self._serving.get(run) is worker:
                    del self._serving[run]
            worker.on_message = None
        kind = message.get("kind")
        if kind == "ok":
            pool.release(worker)
            return output_of(message)
        if kind == "raised":
            pool.release(worker)
            raise remote_error(message)
        if kind == "crashed":  # it said why (a limit), or the CPU watch did
            worker.kill("lost")
            pool.lost(worker)
            raise ToolCrashed(f"Tool '{name}' crashed: {message.get('why')}", retry=False)
        if worker.killed:
            pool.lost(worker)
            raise WorkerKilled()
        # The connection closed: its zygote says how it ended (at once, if it did).
        try:
            status = await asyncio.wait_for(asyncio.shield(worker.status), _STATUS_TIMEOUT)
            why, limit = describe_exit(status, memory, cpu)
        except TimeoutError:
            why, limit = "its worker process closed its connection to toolbus; it was killed", False
        except asyncio.CancelledError:
            worker.kill("lost")
            pool.lost(worker)
            raise WorkerKilled() from None
        worker.kill("lost")  # of no more use, whatever it was doing
        pool.lost(worker)
        # Over a limit it would be over it again: not worth a retry.
        raise ToolCrashed(f"Tool '{name}' crashed: {why}", retry=not limit)


def _fraction(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
