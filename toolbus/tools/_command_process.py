"""A command tool's process as its event loop watches it: output, exit, the kill.

No thread and no await to set up, so no cancellation can find a started
command unwatched: its pipes are read by loop readers, its exit is seen through
a pidfd (Linux; elsewhere a thread waits for it), and it is killed with its
process group and session (`killpg`, then what moved to a group of its own:
see `_process_group`), before it is reaped. A command still running when this
process exits normally (`atexit`: an executor never closed) is killed so too;
one this process leaves by dying (SIGKILL, a crash) is not: nothing of ours
runs then.
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import contextlib
import os
import subprocess
import threading
from collections.abc import Callable

from .._process_group import kill_group, kill_session
from ._command_secrets import Redactor

__all__ = ["Watch", "start"]

_CHUNK = 65536
# How long close() waits for a command it has just SIGKILLed, to reap it.
_REAP_WAIT = 1.0
# The commands started and not yet let go of (`Watch.close`), killed at this
# process's exit. A command is started and put here under `_starting`, which
# the exit sweep takes too: the sweep never falls between the two (a command
# started, its files written, the agent exiting, and nothing to kill).
_started: set[subprocess.Popen[bytes]] = set()
_starting = threading.Lock()
_exiting = False


def start(popen: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Start a command with `popen`, registered at once for the exit sweep;
    RuntimeError if this process is exiting."""
    with _starting:
        if _exiting:
            raise RuntimeError("the interpreter is exiting: no command is started")
        proc = popen()
        _started.add(proc)
    return proc


class _Capture:
    """One pipe's output: its first `limit` bytes kept, and `lookahead` more
    to scrub a secret that straddles the cut; the rest dropped."""

    __slots__ = ("data", "keep", "limit", "size")

    def __init__(self, limit: int, lookahead: int = 0) -> None:
        self.limit = limit
        self.keep = limit + lookahead
        self.data = bytearray()
        self.size = 0  # bytes read in all

    def add(self, chunk: bytes) -> None:
        room = self.keep - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.size += len(chunk)

    @property
    def cut(self) -> bool:
        return self.size > self.limit

    def text(self, redactor: Redactor | None = None) -> str:
        """Its first `limit` bytes as text, scrubbed by `redactor` before they
        are cut: no part of a secret is left where the cut falls."""
        data = bytes(self.data)
        if not self.cut:
            text = _decode(data, final=True)
            return redactor.scrub(text) if redactor else text
        # Cut output may end inside a character: drop that part, not a U+FFFD.
        head = _decode(data[: self.limit], final=False)
        if not redactor:
            return head
        whole = _decode(data, final=self.size == len(data))
        if not whole.startswith(head):  # not expected of UTF-8: scrub what is kept
            whole = head
        return redactor.head(whole, len(head))


def _decode(data: bytes, *, final: bool) -> str:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=final)


class Watch:
    """A started command as its event loop watches it, with no thread and no
    await to set up: its output taken as it arrives (never paused, so the
    command never blocks on a full pipe), its exit seen through a pidfd
    (Linux; elsewhere a thread waits for it).

    `exited`: the command itself ended, what it left running in its session
    was killed (`leftovers`: whether there was any), and it was reaped
    (`cpu_time`: the CPU seconds it used, when the system says). `closed`: no process holds
    its pipes any longer. `close()` kills what is still running, reaps it and
    lets go of everything."""

    def __init__(self, proc: subprocess.Popen[bytes], limit: int, lookahead: int = 0) -> None:
        self.proc = proc
        self.loop = loop = asyncio.get_running_loop()
        self.out, self.err = _Capture(limit, lookahead), _Capture(limit, lookahead)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.leftovers = False
        self.cpu_time: float | None = None
        self._fds: list[int] = []
        for pipe, capture in ((proc.stdout, self.out), (proc.stderr, self.err)):
            assert pipe is not None
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._read, fd, capture)
            self._fds.append(fd)
        self._pidfd = -1
        try:
            self._pidfd = os.pidfd_open(proc.pid)
            loop.add_reader(self._pidfd, self._on_exit)
        except (AttributeError, OSError):  # no pidfds here
            threading.Thread(target=self._wait, name="toolbus-command", daemon=True).start()

    def _read(self, fd: int, capture: _Capture) -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            capture.add(chunk)
            return
        self.loop.remove_reader(fd)
        self._fds.remove(fd)
        if not self._fds and not self.closed.done():
            self.closed.set_result(None)

    def _wait(self) -> None:
        try:  # until it exits, leaving it unreaped (see _on_exit)
            os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
        except AttributeError:  # no waitid here: reaped now, its leftovers spared
            self.proc.wait()
        except ChildProcessError:
            pass  # reaped by close()
        with contextlib.suppress(RuntimeError):  # its loop closed: nobody is waiting
            self.loop.call_soon_threadsafe(self._on_exit)

    def _on_exit(self) -> None:
        """On the loop: the command has exited (it is a zombie, or reaped already)."""
        if self._pidfd >= 0:
            self.loop.remove_reader(self._pidfd)
        if self.proc.returncode is None:
            # Killed while its zombie still holds the group and session id, so
            # the kill cannot reach a new group or session that took it over.
            in_group = kill_group(self.proc.pid)
            self.leftovers = kill_session(self.proc.pid) > 0 or in_group
            self._reap()
        if not self.exited.done():
            self.exited.set_result(None)

    def _reap(self) -> None:
        """Reap the command, which has exited, noting the CPU time it used
        (`wait4`'s resource usage: the command's, and its reaped children's)."""
        try:
            _, status, usage = os.wait4(self.proc.pid, 0)  # it has exited: no wait
        except (AttributeError, ChildProcessError):  # no wait4, or reaped already
            self.proc.wait()
            return
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_time = usage.ru_utime + usage.ru_stime

    def close(self) -> None:
        if self.proc.returncode is None:  # cancelled twice, closed or collected
            kill_group(self.proc.pid)
            kill_session(self.proc.pid)  # unreaped: the id is still its own
            # SIGKILLed: it is gone in moments. Reaped here, as nobody else will.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(_REAP_WAIT)
        for fd in [*self._fds, self._pidfd]:
            if fd >= 0:
                with contextlib.suppress(Exception):  # its loop may be closed
                    self.loop.remove_reader(fd)
        self._fds.clear()
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        _started.discard(self.proc)


@atexit.register
def _kill_watched() -> None:
    """At this process's exit: kill the commands still running (unreaped, so
    their ids are still theirs), with their sessions."""
    global _exiting
    with _starting:
        _exiting = True
        procs = list(_started)
    for proc in procs:
        if proc.returncode is None:
            kill_group(proc.pid)
            kill_session(proc.pid)
