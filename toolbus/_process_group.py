"""SIGKILL a process group, or a process, whatever state it is in.

Both the process backend (its workers, each the leader of its own group) and
command tools (each command runs in a session of its own) end what they
started with one `killpg`: everything the process started dies with it. A
group that is already gone, or one this process may not signal, is not an
error: the kill's purpose is served either way.
"""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["kill_group", "kill_process"]


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
