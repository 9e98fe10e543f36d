"""Zygotes: small processes that fork a tool's worker processes on request.

Forking the agent is unsafe (it has threads) and spawning a fresh interpreter
per worker costs an import of toolbus each time. So each process backend
starts a *root* zygote: a fresh, single-threaded interpreter that imports
toolbus and nothing of the user's. For each tool module it forks a *module*
zygote that imports that module once; workers are forked from it, ready at
once. Keeping modules apart means a module that hangs or crashes at import
affects only its own tools, and one tool's limits never count another's
imports. A module that starts threads at import cannot be forked from safely
(a lock held by such a thread is copied held): its module zygote says so and
exits, and its workers are forked from the root and import it themselves.

Zygotes reap: each is a child subreaper, so whatever a killed worker left behind
is reparented to it and reaped, and it tells the agent how each worker ended
("exited", pid, status) so a crash can be named. A worker is a session leader
before its zygote reports it (so a kill can never miss it) and dies with its
zygote; a module zygote dies with the root (`PR_SET_PDEATHSIG`). However a
worker ends (killed by the agent, crashed, retired), its zygote kills what is
left of its session before reaping it: its zombie holds the session's id until
then, so no other process can be taken for one of the session's. When the
agent goes away (its end of the control socket closes) a zygote kills every
worker's process group and session and exits.

Control messages from the agent are pickles; to the agent, JSON (a module
zygote has run user code at import). One message per SOCK_SEQPACKET packet; a
new socket travels with its "forked" reply as SCM_RIGHTS.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
from typing import Any

from .._process_group import kill_group, kill_session, kill_sessions

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_M_ARENA_MAX = -8
# How long the root gives module zygotes to clean up after the agent left.
_SHUTDOWN_GRACE = 1.0


def _libc_call(name: str, *args: int) -> None:
    with contextlib.suppress(Exception):
        getattr(ctypes.CDLL(None, use_errno=True), name)(*args)


def _die_with_parent(parent: int) -> None:
    _libc_call("prctl", _PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before we asked
        os._exit(0)


def _send(ctrl: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    with contextlib.suppress(OSError):  # the agent has gone: nothing to tell
        if fds:
            socket.send_fds(ctrl, [data], fds)
        else:
            ctrl.send(data)


class _Zygote:
    """One zygote's loop: fork on request, reap, report."""

    def __init__(self, ctrl: socket.socket, *, root: bool) -> None:
        self.ctrl = ctrl
        self.root = root
        self.workers: set[int] = set()  # session leaders: killed by group and session
        self.zygotes: set[int] = set()  # module zygotes (the root's)
        self.wake = os.pipe()
        os.set_blocking(self.wake[0], False)
        os.set_blocking(self.wake[1], False)
        signal.set_wakeup_fd(self.wake[1])
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent decides when we stop
        _libc_call("prctl", _PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def _child_setup(self) -> None:
        """In a fresh child: drop the zygote's signal set-up and control socket."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in self.wake:
            os.close(fd)
        self.ctrl.close()

    def fork_worker(self, memory_limit_mb: int | None, module: str | None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        mark = _mark()
        ready_r, ready_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker
            try:
                self._child_setup()
                ours.close()
                os.close(ready_r)
                os.setsid()
                _die_with_parent(parent)
                os.write(ready_w, b"1")  # a session leader now: the agent may kill it
                os.close(ready_w)
                from ._worker import serve

                serve(theirs, memory_limit_mb, module, mark)
            finally:
                os._exit(1)
        theirs.close()
        os.close(ready_w)
        with contextlib.suppress(OSError):
            os.read(ready_r, 1)  # empty if it died first: its exit is reported anyway
        os.close(ready_r)
        self.workers.add(pid)
        fds = [ours.fileno()] if mark is None else [ours.fileno(), mark]
        _send(self.ctrl, {"kind": "forked", "pid": pid}, fds)
        ours.close()
        if mark is not None:
            os.close(mark)  # the next worker forked must not inherit it

    def fork_zygote(self, module: str, path: list[str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the module zygote
            try:
                self._child_setup()
                ours.close()
                _die_with_parent(parent)
                _module_zygote(theirs, module, path)
            finally:
                os._exit(1)
        theirs.close()
        self.zygotes.add(pid)
        _send(self.ctrl, {"kind": "forked", "pid": pid}, [ours.fileno()])
        ours.close()

    def reap(self) -> None:
        while True:
            try:
                exited = _exited_child()
                if exited == 0:
                    return
                if exited in self.workers:
                    # Before it is reaped: its zombie holds its session's id,
                    # so what is left of the session (a descendant in a group
                    # of its own) is found, and nothing else can be.
                    kill_session(exited)
                pid, status = os.waitpid(exited, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.workers or pid in self.zygotes:
                self.workers.discard(pid)
                self.zygotes.discard(pid)
                _send(self.ctrl, {"kind": "exited", "pid": pid, "status": status})

    def loop(self) -> None:
        try:
            while True:
                try:
                    readable, _, _ = select.select([self.ctrl.fileno(), self.wake[0]], [], [])
                except InterruptedError:
                    continue
                if self.wake[0] in readable:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake[0], 4096)
                    self.reap()
                if self.ctrl.fileno() not in readable:
                    continue
                try:
                    data = self.ctrl.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    return  # the agent has gone
                message = pickle.loads(data)
                if message["kind"] == "fork":
                    self.fork_worker(message["memory_limit_mb"], message.get("module"))
                elif message["kind"] == "zygote" and self.root:
                    self.fork_zygote(message["module"], message["path"])
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        for pid in self.workers:
            kill_group(pid)
        # Unreaped (we reap below), so each id is still its session's.
        kill_sessions(self.workers)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # Module zygotes see the agent leave too and kill their own workers;
        # give them a moment, then go (what is left dies with us).
        deadline = time.monotonic() + _SHUTDOWN_GRACE
        while self.zygotes and time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.01)
            else:
                self.zygotes.discard(pid)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass


def _mark() -> int | None:
    """A worker's count of the requests it has read whole, shared with the
    agent (`_worker.serve`, `WorkerProcess.reached`): 8 bytes of a memfd; None
    where there is none (not Linux)."""
    try:
        fd = os.memfd_create("toolbus-worker", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None
    try:
        os.ftruncate(fd, 8)
    except OSError:
        os.close(fd)
        return None
    return fd


def _exited_child() -> int:
    """A child that has exited, left unreaped (0: none; -1: no `waitid` here,
    where exits are reaped as they come)."""
    try:
        found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except AttributeError:
        return -1
    return found.si_pid if found is not None else 0


def _threads() -> int:
    """This process's threads, all of them (`threading` does not see threads
    that native code or `_thread` started)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _module_zygote(ctrl: socket.socket, module: str, path: list[str]) -> None:
    sys.path[:] = path
    error = None
    try:
        importlib.import_module(module)
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
    threaded = _threads() > 1
    _send(ctrl, {"kind": "ready", "pid": os.getpid(), "error": error, "threaded": threaded})
    if error is not None or threaded:
        os._exit(0)  # nothing to fork from: the agent falls back or reports
    _Zygote(ctrl, root=False).loop()
    os._exit(0)


def main(fd: int) -> None:
    ctrl = socket.socket(fileno=fd)
    _libc_call("mallopt", _M_ARENA_MAX, 2)
    hello = pickle.loads(ctrl.recv(1 << 20))
    sys.path[:] = hello["path"]
    with contextlib.suppress(OSError):
        os.chdir(hello["cwd"])
    # What every worker needs (and, as its package, all of toolbus), imported
    # once here so that each forked worker starts with it.
    from . import _worker  # noqa: F401

    zygote = _Zygote(ctrl, root=True)
    _send(ctrl, {"kind": "ready", "pid": os.getpid(), "error": None, "threaded": False})
    zygote.loop()


if __name__ == "__main__":
    main(int(sys.argv[1]))
