"""The agent's side of worker processes: its handles on zygotes and workers.

Everything here runs on the executor's event loop thread (readers registered
with `add_reader`, so waiting for a worker holds no thread), except
`WorkerProcess.kill` (a `killpg`) and `Zygote.kill_all` (and a scan of /proc),
which any thread may call, and `WorkerProcess.send_now`, which the thread that
dispatches a call sends it from (`_direct.py`). Nothing a worker or zygote
sends is unpickled here: their messages are JSON (`_wire.reply`). Each tool's
workers are kept in a pool (`_procpool.py`).

One piece: a zygote's messages settle its workers' state (a fork hands over a
worker's socket and its count of requests read, an exit its status), and a
worker's end is read against both, on the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mmap
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

from .._process_group import kill_group, kill_process, kill_sessions
from ._wire import Frames, FrameTooLarge, parse

__all__ = ["START_TIMEOUT", "WorkerProcess", "Zygote", "describe_exit", "start_root"]

# How long a zygote may take to be ready (the root imports toolbus; a module
# zygote imports the tool's module).
START_TIMEOUT = 30.0
# The longest reply a worker may send (a result as JSON): beyond it the worker
# is killed and the call crashes, so a worker cannot make the agent's memory grow.
MAX_REPLY_BYTES = 128 * 1024 * 1024
EXIT_MEMORY = 86  # see _worker.py
_ALLOCATION_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT})
# The directory that holds the toolbus package this process runs: the root
# zygote imports the same one, whatever its working directory and path.
_TOOLBUS_ROOT = str(Path(__file__).resolve().parents[2])


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
        if memory_limit_mb is not None and sig in _ALLOCATION_SIGNALS:
            # Native code that cannot handle a failed allocation dies so.
            return (
                f"its worker process was killed by {name} (it may have gone over its memory "
                f"limit, memory_limit_mb={memory_limit_mb})",
                True,
            )
        return f"its worker process was killed by {name}", False
    code = os.WEXITSTATUS(status)
    if code == EXIT_MEMORY:
        return f"it went over its memory limit (memory_limit_mb={memory_limit_mb})", True
    return f"its worker process exited with code {code}", False


log = logging.getLogger("toolbus.backends")


class WorkerProcess:
    """One worker: its pid (also its process group), its socket, its one call."""

    __slots__ = (
        "_kill_lock", "counted_out", "frames", "idle_since", "killed", "knows", "loop",
        "mark", "on_message", "pid", "ready", "requests", "seq", "sock", "status", "unsent",
        "zygote",
    )  # fmt: skip

    def __init__(
        self,
        pid: int,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        zygote: Zygote,
        mark: mmap.mmap | None = None,
    ) -> None:
        self.pid = pid
        self.sock = sock
        self.loop = loop
        self.zygote = zygote
        self.frames = Frames(MAX_REPLY_BYTES)
        # Resolves when the worker says it is ready (its module imported), with
        # the import's error text or None.
        self.ready: asyncio.Future[str | None] = loop.create_future()
        self.ready.add_done_callback(_retrieved)
        self.killed = ""  # why toolbus killed it, once it has
        self.unsent = False  # a request to it could not be sent whole (see `send_now`)
        self.requests = 0  # requests sent to it; and how many it read whole (`reached`)
        self.mark = mark
        self._kill_lock = threading.Lock()
        self.counted_out = False  # its pool no longer counts it live
        self.idle_since = 0.0  # loop time it last went idle (`_retire.py`)
        self.seq = 0  # the request it serves: frames tagged otherwise are stale
        self.knows: set[int] = set()  # the tools it was sent (by the backend's ids)
        # Where its frames go while it serves a call (None: idle).
        self.on_message: Any = None
        self.status: asyncio.Future[int | None] = loop.create_future()
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._readable)

    @property
    def alive(self) -> bool:
        return (
            not self.killed
            and not self.unsent
            and self.sock.fileno() >= 0
            and not self.status.done()
        )

    def kill(self, reason: str) -> bool:
        """SIGKILL its group (its zygote kills the rest of its session), from any
        thread; False if it was killed already."""
        with self._kill_lock:
            if self.killed:
                return False
            self.killed = reason
        kill_group(self.pid, or_process=True)
        return True

    def _readable(self) -> None:
        self._take(draining=False)

    def _take(self, *, draining: bool) -> bool:
        """Read what has come and hand its frames on; whether more may be there now."""
        try:
            data = self.sock.recv(1 << 16)  # not 1 MiB: a buffer that size is an mmap per read
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            data = b""
        if not data:
            if not draining:
                self.gone()
            return False
        try:
            bodies = self.frames.feed(data)
        except FrameTooLarge as e:
            self.kill("lost")
            self.gone(f"it sent a reply too large to accept ({e})")
            return False
        for body in bodies:
            try:
                message = parse(body)
                if not isinstance(message, dict):
                    continue
            except ValueError as e:
                message = _garbled(body, e, self.seq)
            if message.get("kind") == "ready" and message.get("seq") == 0:
                if not self.ready.done():
                    error = message.get("error")
                    self.ready.set_result(str(error) if error else None)
                continue
            if message.get("seq") != self.seq:
                continue  # stale: a thread of an earlier call still talking
            if self.on_message is not None:
                try:
                    self.on_message(message)
                except Exception as e:
                    # Contained per message: the frames read with it still go
                    # where they belong. Its text is not logged (it may hold a
                    # secret, and no scrubber is at hand here).
                    log.warning(
                        "a %s message from worker process %d could not be handled (%s); dropped",
                        message.get("kind"),
                        self.pid,
                        type(e).__name__,
                    )
        return True

    def gone(self, why: str = "") -> None:
        """Its connection ended (it died, or closed it): close, and tell whoever waits."""
        if self.sock.fileno() < 0:
            return
        if not why:
            # What it sent before its end was seen still counts (a reply on its
            # way as its zygote died, and it was killed): read it first.
            for _ in range(64):
                if self.sock.fileno() < 0 or not self._take(draining=True):
                    break
            if self.sock.fileno() < 0:
                return
        self.close()
        if not self.ready.done():
            self.ready.set_result(why or "its worker process died before it was ready")
        if self.on_message is not None:
            self.on_message({"kind": "crashed", "why": why} if why else {"kind": "eof"})

    # A request the worker did not read whole never ran: it reads a request
    # whole before it runs it. One that could not be sent whole (the worker is
    # dead, or its stream cut mid-frame) marks it `unsent`, so it is not
    # `alive`; one sent as it died unread (killed while idle, just then) shows
    # in the count it keeps (`reached`). Either way its call goes to another
    # worker (`_process_calls.py`), not reported as a crash that may have run.

    def reached(self) -> bool:
        """Whether the worker read every request sent to it (True where it
        cannot tell: no count shared, `_zygote._mark`)."""
        if self.unsent:
            return False
        if self.mark is None:
            return True
        return int.from_bytes(self.mark[:8], sys.byteorder) >= self.requests

    def send_now(self, data: bytes) -> bool:
        """Any thread: send what the socket takes now; the rest goes from the
        loop. False if nothing could be sent (it is dead: `unsent`)."""
        self.requests += 1
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.unsent = True
            return False
        if sent < len(data):
            rest = data[sent:]
            try:
                self.loop.call_soon_threadsafe(self._send_rest, rest)
            except RuntimeError:
                pass  # the loop is closed: so is the backend
        return True

    def _send_rest(self, rest: bytes) -> None:
        task = self.loop.create_task(self._finish_send(rest))
        task.add_done_callback(_retrieved)

    async def _finish_send(self, rest: bytes) -> None:
        if not await self._send_all(rest):
            self.gone()  # its call hears it as an end, and sees `unsent`

    async def send(self, data: bytes) -> bool:
        """Send a request whole; False if it could not be (`unsent`)."""
        self.requests += 1
        return await self._send_all(data)

    async def _send_all(self, data: bytes) -> bool:
        try:
            # Most requests fit the socket's buffer: no loop turn for those.
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent < len(data):
                await self.loop.sock_sendall(self.sock, memoryview(data)[sent:])
        except OSError:
            self.unsent = True
            return False
        return True

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.sock.fileno())
            self.sock.close()


class Zygote:
    """The agent's handle on one zygote process (see `_zygote.py`)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, ctrl: socket.socket, pid: int | None = None
    ) -> None:
        self.loop = loop
        self.ctrl = ctrl
        self.pid = pid  # a module zygote's (the root's is the Popen's)
        self.ready: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.ready.add_done_callback(_retrieved)
        self._forks: deque[tuple[asyncio.Future[Any], str]] = deque()
        self.workers: dict[int, WorkerProcess] = {}
        self.children: dict[int, Zygote] = {}  # module zygotes (the root's)
        self.closed = False
        self.on_gone: list[Any] = []
        ctrl.setblocking(False)
        loop.add_reader(ctrl.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(self.ctrl, 1 << 16, 4)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds = b"", []
        if not data:
            self.gone("its zygote process exited")
            return
        try:
            message = json.loads(data)
            kind = message["kind"]
        except (ValueError, KeyError, TypeError):
            for fd in fds:
                os.close(fd)
            return
        if kind == "ready":
            if not self.ready.done():
                self.ready.set_result(message)
        elif kind == "forked":
            self._forked(int(message["pid"]), fds)
        elif kind == "exited":
            self._exited(int(message["pid"]), int(message["status"]))

    def _exited(self, pid: int, status: int) -> None:
        """The zygote reaped `pid`: a worker's or a module zygote's end is seen."""
        worker = self.workers.pop(pid, None)
        if worker is not None:
            if not worker.status.done():
                worker.status.set_result(status)
            worker.gone()
        child = self.children.pop(pid, None)
        if child is not None:
            child.gone("its zygote process exited")

    def _forked(self, pid: int, fds: list[int]) -> None:
        future, what = self._forks.popleft()
        if not fds:
            kill_group(pid, or_process=True)
            if not future.done():
                future.set_exception(RuntimeError("a zygote forked without a socket"))
            return
        sock = socket.socket(fileno=fds[0])
        mark = _mapped(fds[1]) if what == "worker" and len(fds) > 1 else None
        for extra in fds[1:]:
            os.close(extra)
        if what == "worker":
            worker = WorkerProcess(pid, sock, self.loop, self, mark)
            self.workers[pid] = worker
            if future.done():  # nobody waits any more: let it go
                worker.kill("unused")
                worker.close()
            else:
                future.set_result(worker)
        else:
            child = Zygote(self.loop, sock, pid)
            self.children[pid] = child
            if future.done():
                child.close()
            else:
                future.set_result(child)

    def gone(self, why: str) -> None:
        """The zygote is gone (or closing): kill its workers, fail whoever waits."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.ctrl.fileno())
        self.ctrl.close()
        error = RuntimeError(why)
        if not self.ready.done():
            self.ready.set_exception(error)
        while self._forks:
            f, _ = self._forks.popleft()
            if not f.done():
                f.set_exception(error)
        # Orphaned by a dead zygote: never leave them, nor what is left of their sessions.
        kill_sessions(list(self.workers))
        for worker in list(self.workers.values()):
            worker.kill("lost")
            if not worker.status.done():
                worker.status.set_result(None)
            worker.gone()
        self.workers.clear()
        for child in list(self.children.values()):
            child.gone(why)
        self.children.clear()
        for callback in self.on_gone:
            callback(self)

    def _request(self, message: dict[str, Any], what: str) -> asyncio.Future[Any]:
        f: asyncio.Future[Any] = self.loop.create_future()
        f.add_done_callback(_retrieved)
        if self.closed:
            f.set_exception(RuntimeError("its zygote process has stopped"))
            return f
        self._forks.append((f, what))
        try:
            self.ctrl.send(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
        except OSError as e:
            self.gone(f"its zygote process is gone ({e})")
        return f

    def fork(
        self, memory_limit_mb: int | None, module: str | None = None
    ) -> asyncio.Future[WorkerProcess]:
        """A new worker (resolves once it is a session leader); it imports
        `module` itself before it says it is ready, if one is given."""
        return self._request(
            {"kind": "fork", "memory_limit_mb": memory_limit_mb, "module": module}, "worker"
        )

    def spawn(self, module: str) -> asyncio.Future[Zygote]:
        """A module zygote that has imported `module` (the root only)."""
        return self._request({"kind": "zygote", "module": module, "path": list(sys.path)}, "zygote")

    def kill_all(self, reason: str) -> None:
        """Any thread: kill every worker's process group and session now (here:
        a module zygote may be killed before it has reaped them)."""
        for worker in list(self.workers.values()):
            worker.kill(reason)
        kill_sessions(list(self.workers))
        for child in list(self.children.values()):
            child.kill_all(reason)

    def close(self) -> None:
        """Stop: kill the workers; the zygote sees its socket close and exits (a
        module zygote is killed too: it may be stuck in its module's import)."""
        self.kill_all("closed")
        if self.pid is not None:
            kill_process(self.pid)
        self.gone("the process backend has stopped")


# How every message of a worker starts (`_worker.py` writes "seq" first, then
# "kind"): enough to tell an unreadable progress or log message, which its
# call outlives, from an unreadable reply, which ends it.
_HEAD = re.compile(rb'\{"seq":(\d{1,19}),"kind":"([a-z]{1,16})"')


def _garbled(body: bytes, error: ValueError, seq: int) -> dict[str, Any]:
    """What stands for a message that could not be read: its `seq` and kind
    ("of") if its start says, the current call's and "" if not."""
    head = _HEAD.match(body)
    of = ""
    if head is not None:
        seq, of = int(head[1]), head[2].decode()
    return {"kind": "garbled", "seq": seq, "of": of, "error": error}


def _mapped(fd: int) -> mmap.mmap | None:
    """A worker's count of requests read (`_zygote._mark`), mapped to read."""
    try:
        return mmap.mmap(fd, 8, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None


def _retrieved(f: asyncio.Future[Any]) -> None:
    # Marks a failure as seen: nobody may be left to await it (closed while starting).
    if not f.cancelled():
        f.exception()


def _stdout_fd() -> int | None:
    try:
        return sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return None  # not a file (captured, closed): inherit fd 1


def start_root(loop: asyncio.AbstractEventLoop) -> tuple[Zygote, subprocess.Popen[bytes]]:
    """Start a root zygote; await its `ready` before use."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = dict(os.environ)
    # Fewer malloc arenas: RLIMIT_AS counts every arena's reserve.
    env["MALLOC_ARENA_MAX"] = "2"
    code = (
        f"import sys; sys.path.insert(0, {_TOOLBUS_ROOT!r}); "
        f"from toolbus.backends._zygote import main; main({theirs.fileno()})"
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            # Where this process's `sys.stdout` writes now: a server that keeps
            # stdout for its protocol (MCP over stdio) redirects it to stderr.
            stdout=_stdout_fd(),
            env=env,
        )
    finally:
        theirs.close()
    ours.send(pickle.dumps({"path": list(sys.path), "cwd": os.getcwd()}))
    zygote = Zygote(loop, ours)

    def reap(_: Zygote) -> None:
        # A daemon thread, so a zygote that takes a moment to exit is still
        # reaped (never a zombie) and nobody waits for it.
        threading.Thread(target=proc.wait, name="toolbus-zygote-reaper", daemon=True).start()

    zygote.on_gone.append(reap)
    return zygote, proc
