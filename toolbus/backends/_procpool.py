"""The parent's side of worker processes: the zygote handle, workers and per-tool pools.

Everything here runs on the executor's event loop thread (readers registered
with `add_reader`, so waiting for a worker holds no thread), except `kill`,
which any thread may call: it is one `killpg`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections import deque
from typing import Any

from ._wire import Frames

__all__ = ["Pool", "WorkerProcess", "Zygote", "describe_exit"]

# How long to wait for the zygote to start (it imports toolbus).
_START_TIMEOUT = 60.0
# How long a crashed worker's exit status is waited for, to name the crash.
_STATUS_TIMEOUT = 2.0
EXIT_MEMORY = 86  # see _worker.py


def describe_exit(
    status: int | None, memory_limit_mb: int | None, cpu_limit_s: float | None
) -> tuple[str, bool]:
    """Why a worker died, in words a model (and a person) can act on, and
    whether it went over one of its limits."""
    if status is None:
        return "its worker process died", False
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return f"it went over its CPU limit (cpu_limit_s={cpu_limit_s}) and was killed", True
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        if sig == signal.SIGKILL:
            hint = f"; memory_limit_mb={memory_limit_mb}" if memory_limit_mb is not None else ""
            return f"its worker process was killed by SIGKILL (out of memory?{hint})", False
        return f"its worker process was killed by {name}", False
    code = os.WEXITSTATUS(status)
    if code == EXIT_MEMORY:
        return f"it went over its memory limit (memory_limit_mb={memory_limit_mb})", True
    return f"its worker process exited with code {code}", False


class WorkerProcess:
    """One worker: its pid (also its process group), its socket, its one call."""

    __slots__ = (
        "_kill_lock", "counted_out", "frames", "killed", "loop", "on_message", "pid", "sock",
        "status",
    )  # fmt: skip

    def __init__(self, pid: int, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.pid = pid
        self.sock = sock
        self.loop = loop
        self.frames = Frames()
        self.killed = ""  # why toolbus killed it, once it has
        self.counted_out = False  # its pool no longer counts it live
        self._kill_lock = threading.Lock()
        # Where its frames go while it serves a call (None: idle).
        self.on_message: Any = None
        self.status: asyncio.Future[int | None] = loop.create_future()
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._readable)

    @property
    def alive(self) -> bool:
        return not self.killed and self.sock.fileno() >= 0 and not self.status.done()

    def kill(self, reason: str) -> bool:
        """SIGKILL its process group, from any thread; False if it was killed already."""
        with self._kill_lock:
            if self.killed:
                return False
            self.killed = reason
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        return True

    def _readable(self) -> None:
        try:
            data = self.sock.recv(1 << 16)  # not 1 MiB: a buffer that size is an mmap per read
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.gone()
            return
        for body in self.frames.feed(data):
            try:
                message = pickle.loads(body)
            except Exception as e:
                message = ("raised", RuntimeError(f"a reply could not be read: {e}"))
            if self.on_message is not None:
                self.on_message(message)

    def gone(self) -> None:
        """Its connection ended (it died): close, and tell whoever waits on it."""
        if self.sock.fileno() < 0:
            return
        self.close()
        if self.on_message is not None:
            self.on_message(("eof",))

    async def send(self, data: bytes) -> None:
        await self.loop.sock_sendall(self.sock, data)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.sock.fileno())
            self.sock.close()


class Zygote:
    """The parent's handle on its zygote process (see `_zygote.py`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.proc: subprocess.Popen[bytes] | None = None
        self.ctrl: socket.socket | None = None
        self._ready: asyncio.Future[None] | None = None
        self._forks: deque[tuple[asyncio.Future[WorkerProcess], int | None]] = deque()
        self._preloads: dict[str, asyncio.Future[str | None]] = {}
        self.workers: dict[int, WorkerProcess] = {}
        self.closed = False

    async def ready(self) -> None:
        """Start the zygote if it is not running; return once it serves."""
        if self.closed:
            raise RuntimeError("the process backend has stopped")
        if self._ready is None:
            self._ready = self.loop.create_future()
            try:
                self._start()
            except BaseException as e:
                self._ready.set_exception(e)
        await asyncio.wait_for(asyncio.shield(self._ready), _START_TIMEOUT)

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        # Fewer malloc arenas: RLIMIT_AS counts every arena's reserve.
        env["MALLOC_ARENA_MAX"] = "2"
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "toolbus.backends._zygote", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            theirs.close()
        self.ctrl = ours
        ours.send(pickle.dumps({"path": list(sys.path), "cwd": os.getcwd()}))
        ours.setblocking(False)
        self.loop.add_reader(ours.fileno(), self._readable)

    def _readable(self) -> None:
        assert self.ctrl is not None
        try:
            data, fds, _, _ = socket.recv_fds(self.ctrl, 1 << 16, 4)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds = b"", []
        if not data:
            self._gone("the process backend's zygote exited")
            return
        kind, *args = pickle.loads(data)
        if kind == "ready":
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif kind == "forked":
            (pid,) = args
            sock = socket.socket(fileno=fds[0])
            worker = WorkerProcess(pid, sock, self.loop)
            self.workers[pid] = worker
            future, _ = self._forks.popleft()
            if future.done():  # nobody waits any more: let it go
                worker.kill("unused")
                worker.close()
            else:
                future.set_result(worker)
        elif kind == "exited":
            pid, status = args
            gone = self.workers.pop(pid, None)
            if gone is not None:
                if not gone.status.done():
                    gone.status.set_result(status)
                gone.gone()
        elif kind == "preloaded":
            module, error = args
            f = self._preloads.get(module)
            if f is not None and not f.done():
                f.set_result(error)

    def _gone(self, why: str) -> None:
        if self.ctrl is not None and self.ctrl.fileno() >= 0:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.ctrl.fileno())
            self.ctrl.close()
        error = RuntimeError(why)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
        while self._forks:
            f, _ = self._forks.popleft()
            if not f.done():
                f.set_exception(error)
        for worker in list(self.workers.values()):
            if not worker.status.done():
                worker.status.set_result(None)
            worker.gone()
        self.workers.clear()
        self._ready = None  # the next call starts a new one
        self._reap()

    def _reap(self) -> None:
        proc = self.proc
        if proc is not None:
            # A daemon thread, so a zygote that takes a moment to exit is
            # still reaped (never a zombie) and nobody waits for it.
            threading.Thread(target=proc.wait, name="toolbus-zygote-reaper", daemon=True).start()

    async def preload(self, module: str) -> str | None:
        """Import `module` in the zygote; the error text, or None."""
        await self.ready()
        f = self._preloads.get(module)
        if f is None:
            f = self._preloads[module] = self.loop.create_future()
            self._send(("preload", module))
        return await f

    async def fork(self, memory_limit_mb: int | None) -> WorkerProcess:
        await self.ready()
        f: asyncio.Future[WorkerProcess] = self.loop.create_future()
        self._forks.append((f, memory_limit_mb))
        self._send(("fork", memory_limit_mb))
        return await f

    def _send(self, message: Any) -> None:
        assert self.ctrl is not None
        try:
            self.ctrl.send(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
        except OSError as e:
            self._gone(f"the process backend's zygote is gone ({e})")

    def kill_all(self, reason: str) -> None:
        """Any thread: kill every worker's process group now."""
        for worker in list(self.workers.values()):
            worker.kill(reason)

    def close(self) -> None:
        """On the loop: stop (the zygote kills what is left and exits)."""
        self.closed = True
        self.kill_all("closed")
        self._gone("the process backend has stopped")


class Pool:
    """One tool's warm workers, at most `size`, started as calls need them."""

    def __init__(self, zygote: Zygote, size: int, memory_limit_mb: int | None, module: str) -> None:
        self.zygote = zygote
        self.size = size
        self.memory_limit_mb = memory_limit_mb
        self.module = module
        self.idle: list[WorkerProcess] = []
        self.live = 0  # forked and not dead (idle or serving)
        self.starting = 0
        self.waiting: deque[asyncio.Future[WorkerProcess]] = deque()
        self.started = 0
        self.preload_error: str | None = None
        self._preloaded = False

    async def acquire(self) -> WorkerProcess:
        """A worker of this pool, for one call; waits for one to be free."""
        if not self._preloaded:
            self.preload_error = await self.zygote.preload(self.module)
            self._preloaded = True
        while self.idle:
            w = self.idle.pop()
            if w.alive:
                return w
            self.lost(w)
        f: asyncio.Future[WorkerProcess] = self.zygote.loop.create_future()
        self.waiting.append(f)
        self.fill()
        return await f

    def fill(self) -> None:
        """Start workers for the calls waiting, up to the pool's size."""
        while self.live + self.starting < self.size and self.starting < len(self.waiting):
            self.starting += 1
            self.zygote.loop.create_task(self._start_one())

    def prewarm(self) -> None:
        """Replace a worker that died, so the next call finds one ready."""
        if self.live + self.starting < self.size and not self.zygote.closed:
            self.starting += 1
            self.zygote.loop.create_task(self._start_one())

    async def _start_one(self) -> None:
        try:
            w = await self.zygote.fork(self.memory_limit_mb)
        except BaseException as e:
            self.starting -= 1
            while self.waiting:
                f = self.waiting.popleft()
                if not f.done():
                    f.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
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
        self.idle.append(w)

    def lost(self, w: WorkerProcess) -> None:
        """`w` is dead or killed: count it out (once) and replace it."""
        w.close()
        if w.counted_out:
            return
        w.counted_out = True
        self.live -= 1
        if self.waiting:
            self.fill()
        else:
            self.prewarm()
