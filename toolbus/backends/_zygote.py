"""The zygote: a small process that forks a tool's worker processes on request.

Forking toolbus's own process is unsafe (it has threads) and spawning a fresh
interpreter per worker costs an import of toolbus each time. So each process
backend starts one zygote: a fresh, single-threaded interpreter that imports
toolbus (and each tool's module, when asked) once and then forks workers,
which are ready at once.

It is also where workers are reaped. It is a child subreaper, so whatever a
killed worker left behind is reparented to it and reaped too: no zombie
remains. It tells the parent how each worker ended ("exited", pid, status), so
a crash can be named. When the parent goes away (its end of the control socket
closes), the zygote kills every worker's process group and exits.

Control messages are pickles over a SOCK_SEQPACKET socket (one message each);
a new worker's socket travels with its "forked" reply as SCM_RIGHTS.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import pickle
import select
import signal
import socket
import sys
import traceback
from typing import Any

__all__ = ["main"]

_PR_SET_CHILD_SUBREAPER = 36
_M_ARENA_MAX = -8


def _libc_call(name: str, *args: int) -> None:
    with contextlib.suppress(Exception):
        getattr(ctypes.CDLL(None, use_errno=True), name)(*args)


def _send(ctrl: socket.socket, message: Any, fds: list[int] | None = None) -> None:
    data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    if fds:
        socket.send_fds(ctrl, [data], fds)
    else:
        ctrl.send(data)


def _fork_worker(ctrl: socket.socket, wake: tuple[int, int], memory_limit_mb: int | None) -> int:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the worker
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            ctrl.close()
            ours.close()
            for fd in wake:
                os.close(fd)
            from ._worker import serve

            serve(theirs, memory_limit_mb)
        finally:
            os._exit(1)
    theirs.close()
    try:
        _send(ctrl, ("forked", pid), [ours.fileno()])
    finally:
        ours.close()
    return pid


def _reap(ctrl: socket.socket, workers: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in workers:
            workers.discard(pid)
            with contextlib.suppress(OSError):
                _send(ctrl, ("exited", pid, status))


def _kill_all(workers: set[int]) -> None:
    for pid in workers:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def main(fd: int) -> None:
    ctrl = socket.socket(fileno=fd)
    _libc_call("prctl", _PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _libc_call("mallopt", _M_ARENA_MAX, 2)
    wake = os.pipe()
    os.set_blocking(wake[0], False)
    os.set_blocking(wake[1], False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    workers: set[int] = set()
    hello = pickle.loads(ctrl.recv(1 << 20))
    sys.path[:] = hello["path"]
    with contextlib.suppress(OSError):
        os.chdir(hello["cwd"])
    import toolbus  # noqa: F401  # what every worker needs, imported once here

    _send(ctrl, ("ready", os.getpid()))
    try:
        while True:
            try:
                readable, _, _ = select.select([ctrl.fileno(), wake[0]], [], [])
            except InterruptedError:
                continue
            if wake[0] in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake[0], 4096)
                _reap(ctrl, workers)
            if ctrl.fileno() not in readable:
                continue
            try:
                data = ctrl.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                return  # the parent has gone
            kind, *args = pickle.loads(data)
            if kind == "fork":
                workers.add(_fork_worker(ctrl, wake, *args))
            elif kind == "preload":
                module, path = args
                sys.path[:] = path
                error = None
                try:
                    importlib.import_module(module)
                except BaseException as e:
                    error = f"{type(e).__name__}: {e}"
                _send(ctrl, ("preloaded", module, error))
    except BaseException:
        traceback.print_exc()
    finally:
        _kill_all(workers)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, 0):
                pass


if __name__ == "__main__":
    main(int(sys.argv[1]))
