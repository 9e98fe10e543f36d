"""Each tool's warm worker processes, and the zygotes they are forked from.

Everything here runs on the executor's event loop thread, except `Pool.take`
and `Pool.give_back`, which the thread that dispatches a call sent from there
calls (`_direct.py`): a list's `pop` and `append` are atomic, so an idle worker
is taken once, by one call.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from ._procs import START_TIMEOUT, WorkerProcess, Zygote, _retrieved
from ._retire import Retirement

__all__ = ["Pool", "Sources"]


class Sources:
    """Where each tool module's workers are forked from: its module zygote, made
    once per module and shared by that module's tools; or, for a module that
    starts threads at import, the root, the workers importing it themselves."""

    def __init__(self, root: Callable[[], Awaitable[Zygote]]) -> None:
        self.root = root  # the backend's ready root zygote
        self._made: dict[str, asyncio.Future[tuple[Zygote, str | None]]] = {}

    async def get(self, module: str) -> tuple[Zygote, str | None]:
        """The zygote to fork from, and the module a new worker must import itself."""
        f = self._made.get(module)
        if f is None or (f.done() and (f.exception() is not None or f.result()[0].closed)):
            f = self._made[module] = asyncio.ensure_future(self._make(module))
            f.add_done_callback(_retrieved)
        # Shielded: a call cancelled while the module imports must not cancel
        # the import for everyone else.
        return await asyncio.shield(f)

    async def _make(self, module: str) -> tuple[Zygote, str | None]:
        root = await self.root()
        child = await asyncio.wait_for(asyncio.shield(root.spawn(module)), START_TIMEOUT)
        try:
            ready = await asyncio.wait_for(asyncio.shield(child.ready), START_TIMEOUT)
        except TimeoutError:
            child.close()
            raise ImportError(
                f"the module {module!r} did not finish importing within {START_TIMEOUT:.0f}s"
            ) from None
        except BaseException:
            child.close()
            raise
        if ready.get("error"):
            child.close()
            raise ImportError(f"the module {module!r} failed to import: {ready['error']}")
        if ready.get("threaded"):
            child.close()
            return root, module
        return child, None


class Pool:
    """One tool's warm workers, at most `size`, started as calls need them; a
    worker idle for `idle_timeout` seconds retires, but for one (`_retire.py`)."""

    def __init__(
        self,
        source: Callable[[], Awaitable[tuple[Zygote, str | None]]],
        size: int,
        memory_limit_mb: int | None,
        idle_timeout: float,
    ) -> None:
        self.source = source  # the zygote its workers are forked from
        self.size = size
        self.memory_limit_mb = memory_limit_mb
        self.idle: list[WorkerProcess] = []
        self.live = 0  # forked and not dead (idle or serving)
        self.starting = 0
        self.waiting: deque[asyncio.Future[WorkerProcess]] = deque()
        self.started = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.retirement = Retirement(idle_timeout, self._idle_workers, self._retire)

    async def acquire(self) -> WorkerProcess:
        """A worker of this pool, for one call; waits for one to be free."""
        self.loop = asyncio.get_running_loop()
        await self.source()
        while True:
            try:
                w = self.idle.pop()  # not `while self.idle`: `take` pops from any thread
            except IndexError:
                break
            if w.alive:
                return w
            self.lost(w)
        f: asyncio.Future[WorkerProcess] = asyncio.get_running_loop().create_future()
        self.waiting.append(f)
        self.fill()
        try:
            return await f
        except asyncio.CancelledError:
            if f.done() and not f.cancelled() and f.exception() is None:
                self.release(f.result())  # handed over just as we were cancelled
            raise

    def take(self) -> WorkerProcess | None:
        """Any thread: an idle worker, alive, for a call sent from there; None
        if there is none. (A dead one is left for the loop to count out.)"""
        try:
            w = self.idle.pop()
        except IndexError:
            return None
        if w.alive:
            return w
        self.idle.append(w)
        return None

    def give_back(self, w: WorkerProcess) -> None:
        """Any thread: `w`, taken but not used, is free again (released on the loop)."""
        loop = self.loop
        if loop is None:
            return
        if asyncio._get_running_loop() is loop:
            self.release(w)
            return
        try:
            loop.call_soon_threadsafe(self.release, w)
        except RuntimeError:
            pass  # the loop is closed: so is the backend

    def fill(self) -> None:
        """Start workers for the calls waiting, up to the pool's size."""
        while self.live + self.starting < self.size and self.starting < len(self.waiting):
            self._start()

    def prewarm(self) -> None:
        """Replace a worker that died, so the next call finds one ready."""
        if self.live + self.starting < self.size and self.loop is not None:
            self._start()

    def _start(self) -> None:
        assert self.loop is not None
        self.starting += 1
        self.loop.create_task(self._start_one())

    async def _start_one(self) -> None:
        try:
            source, module = await self.source()
            w = await source.fork(self.memory_limit_mb, module)
            try:
                problem = await asyncio.wait_for(asyncio.shield(w.ready), START_TIMEOUT)
            except TimeoutError:
                problem = f"it was not ready within {START_TIMEOUT:.0f}s"
            if problem is not None:
                w.kill("lost")
                w.close()
                raise ImportError(f"a worker could not load the tool's module: {problem}")
        except BaseException as e:
            self.starting -= 1
            error = e if isinstance(e, Exception) else RuntimeError(str(e))
            while self.waiting:
                f = self.waiting.popleft()
                if not f.done():
                    f.set_exception(error)
            return
        self.starting -= 1
        self.live += 1
        self.started += 1
        self.release(w)

    def release(self, w: WorkerProcess) -> None:
        """`w` is free again (or dead: then it is counted out and replaced)."""
        if not w.alive:
            self.lost(w)
            return
        while self.waiting:
            f = self.waiting.popleft()
            if not f.done():
                f.set_result(w)
                return
        w.idle_since = w.loop.time()
        self.idle.append(w)
        self.retirement.idle(w.loop)

    def _idle_workers(self) -> tuple[list[WorkerProcess], int]:
        return list(self.idle), self.live

    def _retire(self, w: WorkerProcess) -> bool:
        """Stop `w`, idle too long, without replacing it; False if it was taken."""
        try:
            self.idle.remove(w)  # atomic: `take` may pop it from another thread
        except ValueError:
            return False
        if w.alive:  # a dead one's pid may be another process's by now
            w.kill("retired")
        self.lost(w, replace=False)
        return True

    def close(self) -> None:
        """Any thread: the backend starts over; no more retirements."""
        self.retirement.stop()

    def lost(self, w: WorkerProcess, *, replace: bool = True) -> None:
        """`w` is dead or killed: count it out (once) and replace it."""
        w.close()
        if w.counted_out:
            return
        w.counted_out = True
        self.live -= 1
        if not replace:
            return
        if self.waiting:
            self.fill()
        else:
            self.prewarm()
