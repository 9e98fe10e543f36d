"""SIGKILL a process group, a session, or a process, whatever state it is in.

Both the process backend's workers and command tools' commands are session
leaders: each runs in a session (and process group) of its own, and everything
it starts shares its session id unless it starts a session of its own. A kill
is a `killpg` of the leader's group, which ends most of what it started at
once, then `kill_session`, which finds in `/proc` what moved to a group of its
own (`setpgid`: coreutils `timeout`, job-control shells) and kills that too.
A process that starts a new session (`setsid`, a daemon) is out of reach.

A group or process that is already gone, or one this process may not signal,
is not an error: the kill's purpose is served either way.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Collection

__all__ = ["kill_group", "kill_process", "kill_session", "kill_sessions"]

# The most scans one `kill_sessions` makes. A killed process can no longer
# fork, so each scan finds only what was forked before the previous scan's
# kills landed; two or three scans end it in practice.
_MAX_SCANS = 50
_PROC = "/proc"
_STAT_BYTES = 4096  # a whole /proc/<pid>/stat line, with room to spare


def kill_group(pgid: int, *, or_process: bool = False) -> bool:
    """SIGKILL every process of group `pgid`; False if there was none to signal.

    `or_process`: a process that has not made its own group yet (just forked)
    is no group leader: kill the process `pgid` itself then.

    The caller makes sure `pgid` is still its own (the group's leader is
    unreaped: running, or a zombie), so the id cannot name another group."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        if or_process:
            kill_process(pgid)
        return False
    except PermissionError:
        return False
    return True


def kill_process(pid: int) -> None:
    """SIGKILL the process `pid`, if it is there and may be signalled."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def kill_session(sid: int) -> int:
    """SIGKILL every live process of session `sid`, whatever group it is in;
    how many were signalled (zombies are not counted: they are dead already).

    See `kill_sessions`."""
    return kill_sessions((sid,))


def kill_sessions(sids: Collection[int]) -> int:
    """SIGKILL every live process whose session is one of `sids`; how many
    were signalled.

    Linux only (it reads `/proc/<pid>/stat`); elsewhere, and where `/proc`
    cannot be read, it does nothing and returns 0. It scans, kills what it
    found, and scans again until a scan finds nothing it has not signalled:
    a process forks nothing once it is SIGKILLed, so a scan that starts after
    the kills sees every child forked before them. This process is never
    signalled.

    As with `kill_group`, the caller makes sure each id is still its own:
    the session's leader is unreaped, or the id is held by the session's
    other members (an id is never reused while a session has it)."""
    wanted = frozenset(sids)
    if not wanted:
        return 0
    me = os.getpid()
    signalled: set[tuple[int, int]] = set()  # (pid, start time): a reused pid is another
    for _ in range(_MAX_SCANS):
        found = [p for p in _members(wanted) if p not in signalled and p[0] != me]
        if not found:
            break
        for pid, start in found:
            kill_process(pid)
            signalled.add((pid, start))
    return len(signalled)


def _members(sids: frozenset[int]) -> list[tuple[int, int]]:
    """The live processes (not zombies) of sessions `sids`: (pid, start time)."""
    try:
        names = os.listdir(_PROC)
    except OSError:
        return []
    found = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"{_PROC}/{name}/stat", os.O_RDONLY)
            try:
                data = os.read(fd, _STAT_BYTES)
            finally:
                os.close(fd)
        except OSError:
            continue  # gone while we looked
        # "pid (comm) state ppid pgrp session ... starttime ...": the command
        # name may hold spaces and parentheses, so split after the last ")".
        fields = data[data.rfind(b")") + 2 :].split()
        try:
            if int(fields[3]) in sids and fields[0] not in (b"Z", b"X"):
                found.append((int(name), int(fields[19])))
        except (IndexError, ValueError):
            continue
    return found
