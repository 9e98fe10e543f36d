"""The process backend: where a hung tool is killed, not abandoned.

Each tool gets a pool of warm worker processes (`_procpool.py`, `_procs.py`),
forked by a zygote (`_zygote.py`), that run its calls one at a time
(`_worker.py`). The call's steps (hooks, masking, events, retries) stay in
this process; only the tool itself crosses, by import reference, with its
arguments and result as pickles. Waiting for a worker holds no thread: a warm
call whose steps run no user code before the tool is sent from the thread
that dispatches it and finished by its reply on the executor's event loop
(`_direct.py`); any other runs there as a task. A call's round trip:
`_process_calls.py`.

At a deadline or a cancellation the supervisor calls `cancel`, which sends
SIGKILL to the worker's process group, so everything the tool started dies
with it (what moved to a group of its own is killed by the worker's zygote as
it reaps the worker: it is still in the worker's session); the call gets its
`timeout`/`cancelled` result as usual, the kill is announced as
`tool:killed`, and a replacement worker is started at once. A worker that dies
by itself (`os._exit`, a signal, the kernel's OOM killer, a limit) ends the
call `error`/`TOOL_CRASHED`; the host lives on.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import logging
import os
import subprocess
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._options import check_cpu_limit, check_memory_limit, positive_int, positive_number
from ._process_calls import WorkerCalls
from ._procpool import Pool, Sources
from ._procs import START_TIMEOUT, WorkerProcess, Zygote, _retrieved, start_root
from ._protocol import BackendUnavailable, Host, Job
from ._remote_base import refuse_process_local, var_home
from ._shipping import Shipped, check_shippable, ship

if TYPE_CHECKING:
    from ..pipeline import Run
    from ..tools import Tool

__all__ = ["ProcessBackend", "check_process_tool"]

log = logging.getLogger("toolbus.backends")


def _var_reference(var: contextvars.ContextVar[Any]) -> tuple[str, str]:
    """Where a worker imports `var` from: the module attribute that holds it."""
    home = var_home(var, "ProcessBackend")
    if home is None:
        raise ValueError(
            f"ProcessBackend: ContextVar {var.name!r} is not a module-level attribute of an "
            "imported module (not __main__), so a worker process could not find it"
        )
    return home


def check_process_tool(tool: Tool) -> None:
    """ValueError, saying why, if `tool` could never run in a worker process."""
    refuse_process_local(tool, "in a worker process")
    check_shippable(tool)


class ProcessBackend(WorkerCalls):
    """Runs each tool's attempts in its own pool of worker processes.

    `memory_limit_mb` (RLIMIT_AS, virtual memory: at least 256 is advisable)
    and `cpu_limit_s` (RLIMIT_CPU per call, counted in whole seconds by the
    kernel) are the defaults for its tools; a tool's own `memory_limit_mb` /
    `cpu_limit_s` win. `max_workers` caps each tool's pool (default: the CPU
    count; a tool's `max_concurrency` lowers it). A worker idle for
    `idle_timeout` seconds (default 60) exits, except the one each tool keeps
    warm. `context_vars` lists the module-level ContextVars whose values travel
    with each call: no others do.
    """

    name = "process"
    enforces_limits = True
    _owner = "ProcessBackend"
    _stopped_text = "the process backend has stopped"

    def __init__(
        self,
        memory_limit_mb: int | None = None,
        cpu_limit_s: float | None = None,
        max_workers: int | None = None,
        context_vars: Iterable[contextvars.ContextVar[Any]] = (),
        idle_timeout: float = 60.0,
    ) -> None:
        owner = "ProcessBackend"
        self.idle_timeout = positive_number(idle_timeout, "idle_timeout", owner)
        self.memory_limit_mb = check_memory_limit(memory_limit_mb, owner)
        self.cpu_limit_s = check_cpu_limit(cpu_limit_s, owner)
        self.max_workers = (
            None if max_workers is None else positive_int(max_workers, "max_workers", owner)
        )
        variables = tuple(context_vars)
        self._vars = [(var, *_var_reference(var)) for var in variables]
        super().__init__(variables)
        self._root: asyncio.Future[Zygote] | None = None  # the loop thread's
        self._root_proc: subprocess.Popen[bytes] | None = None
        self._sources = Sources(self._ready_root)
        self._seqs = itertools.count(1)  # requests' tags (next() is atomic: any thread)
        self._pools: dict[int, Pool] = {}  # made on the loop thread; read anywhere
        self._shipped: dict[int, tuple[Tool, Shipped]] = {}

    # -- the Backend protocol (the supervisor's thread) ---------------------------

    def check(self, tool: Tool) -> None:
        check_process_tool(tool)

    def capacity(self, tool: Tool) -> int:
        """How many calls of `tool` may run at once: its pool's size."""
        size = self.max_workers or os.cpu_count() or 1
        return min(size, tool.max_concurrency) if tool.max_concurrency else size

    def _reset(self, host: Host) -> None:
        self._root = None
        self._sources = Sources(self._ready_root)
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    def _prepare(self, tool: Tool) -> None:
        known = self._shipped.get(id(tool))
        if known is None or known[0] is not tool:
            try:
                self._shipped[id(tool)] = (tool, ship(tool))
            except ValueError as e:
                raise BackendUnavailable(f"Tool '{tool.name}' is unavailable: {e}") from None

    def kill(self, job: Job) -> bool:
        """SIGKILL the process group of the worker running `job` (if one is)."""
        run = job.run
        reason = run.stop_reason or "cancelled"
        with self._lock:
            # Under the lock `_forget` takes: a worker let go of is never killed.
            worker = self._serving.get(run)
            killed = worker is not None and worker.kill(reason)
        if killed:
            assert worker is not None
            self._announce_kill(run, worker.pid, reason)
        return True

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
            raise RuntimeError(self._stopped_text)
        zygote, self._root_proc = start_root(asyncio.get_running_loop())
        try:
            await asyncio.wait_for(asyncio.shield(zygote.ready), START_TIMEOUT)
        except BaseException:
            zygote.close()
            raise
        if self._stopped:
            zygote.close()
            raise RuntimeError(self._stopped_text)
        return zygote

    def _killed(self, run: Run, worker: WorkerProcess, reason: str) -> None:
        if worker.kill(reason):
            self._announce_kill(run, worker.pid, reason)

    def _pool(self, tool: Tool) -> Pool:
        pool = self._pools.get(id(tool))
        if pool is None:
            shipped = self._shipped[id(tool)][1]
            memory = tool.memory_limit_mb or self.memory_limit_mb
            pool = self._pools[id(tool)] = Pool(
                functools.partial(self._sources.get, shipped.module),
                self.capacity(tool),
                memory,
                self.idle_timeout,
            )
        return pool
