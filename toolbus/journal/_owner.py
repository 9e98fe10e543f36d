"""Who wrote a journal record, and whether that writer is gone.

An owner is one executor's *session* in one process. While it is open it holds
an exclusive `flock` on a file of its own beside the journal
(`<journal>-owners/<session>`); the kernel drops the lock the moment the
process dies, however it dies (kill -9 included), whichever pid namespace or
container it ran in. So whoever can take the lock knows its owner is gone,
with no pid to confuse.

A session is gone when:

- it was closed (`Executor.close()`); or
- it holds a lock file, and the lock is free (or the file was removed); or,
  where no lock could be taken (a file system without `flock`):
- it ran on this machine (same boot id and pid namespace) and its process is
  dead, a zombie, or the pid now belongs to a process that started at another
  time (`/proc/<pid>/stat`'s start time, so a reused pid is not taken for the
  owner); or
- it ran elsewhere (another host, another container): its process cannot be
  checked from here, so it is gone once its heartbeat (refreshed by its writer
  every few seconds while it is open) is older than `stale_after` seconds.

Without `/proc` (not Linux) the fallback checks the pid alone.

The lock's file descriptor is close-on-exec, and a forked child closes its
copy at once (`os.register_at_fork`): a child that outlives the agent (a
background job started with `os.fork` or multiprocessing's "fork") must not
keep its sessions alive, or their calls would never show as in doubt. The
child only closes its descriptor; the lock stays the parent's.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["Here", "OwnerLock", "SessionInfo", "gone", "here", "lock_dir", "lock_free"]

_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Here:
    """This process, as an owner of journal records."""

    pid: int
    host: str
    machine: str  # boot id and pid namespace: who shares this process table
    start_ticks: int | None  # when this process started, in clock ticks since boot
    started: float | None  # the same in epoch seconds, for people


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session as the journal stored it."""

    session: str
    pid: int
    host: str
    machine: str
    start_ticks: int | None
    lock: str | None  # its lock file's name in lock_dir, if it took one
    opened: float
    heartbeat: float
    closed: float | None


def lock_dir(journal: Path) -> Path:
    """Where the sessions of the journal at `journal` keep their lock files."""
    return journal.with_name(journal.name + "-owners")


class OwnerLock:
    """The lock an open session holds for as long as its process lives."""

    def __init__(self, directory: Path, session: str) -> None:
        self.name: str | None = None
        self._path = directory / session
        self._fd = -1
        if fcntl is None:
            return
        _LOCKS.add(self)  # from before the descriptor exists: a fork may come any time
        try:
            directory.mkdir(mode=0o700, exist_ok=True)
            self._fd = os.open(self._path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError:
            return  # the fallback checks (pid, heartbeat) apply
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._forget()
            with contextlib.suppress(OSError):
                self._path.unlink()
            return
        self.name = session

    def release(self) -> None:
        """Let go (the session is closed): remove the file, then drop the lock."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            self._path.unlink()
        self._forget()

    def _forget(self) -> None:
        """Close our descriptor (never unlock: in a forked child that would
        drop the parent's lock, which shares the open file)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


# Every lock this process holds, so that a forked child can close its copies.
_LOCKS: weakref.WeakSet[OwnerLock] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for lock in list(_LOCKS):
        lock._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def lock_free(path: Path) -> bool | None:
    """True if nobody holds `path`'s lock (or it is gone), False if someone
    does, None if that cannot be told."""
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    else:
        return True  # closing the file drops the shared lock we just took
    finally:
        os.close(fd)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start ticks) of a process from /proc/<pid>/stat; None if it has none."""
    text = _read(_PROC / str(pid) / "stat")
    if text is None:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19])  # field 3 (state) and field 22 (starttime)
    except (IndexError, ValueError):
        return None


def _machine() -> str:
    boot = (_read(_PROC / "sys/kernel/random/boot_id") or "").strip()
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    return f"{boot}/{pidns}" if boot or pidns else ""


def _boot_time() -> float | None:
    for line in (_read(_PROC / "stat") or "").splitlines():
        if line.startswith("btime "):
            with contextlib.suppress(ValueError):
                return float(line.split()[1])
    return None


def here() -> Here:
    """This process's identity."""
    pid = os.getpid()
    stat = _stat(pid)
    ticks = stat[1] if stat is not None else None
    started: float | None = None
    boot = _boot_time()
    if ticks is not None and boot is not None:
        started = boot + ticks / os.sysconf("SC_CLK_TCK")
    return Here(pid, socket.gethostname(), _machine(), ticks, started)


def _alive(pid: int, start_ticks: int | None) -> bool:
    """Whether the process that recorded `start_ticks` for `pid` still runs here."""
    if (_PROC / "self").exists():
        stat = _stat(pid)
        if stat is None:
            return False  # no such process
        state, ticks = stat
        if state in ("Z", "X", "x"):
            return False  # dead, only not reaped yet
        return start_ticks is None or ticks == start_ticks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def gone(
    session: SessionInfo,
    me: Here,
    locks: Path,
    stale_after: float,
    now: float | None = None,
) -> bool:
    """Whether `session`'s owner can no longer finish what it started (see the module)."""
    if session.closed is not None:
        return True
    if session.lock is not None:
        free = lock_free(locks / session.lock)
        if free is not None:
            return free
    if session.machine and session.machine == me.machine:
        return not _alive(session.pid, session.start_ticks)
    now = time.time() if now is None else now
    return now - session.heartbeat > stale_after
