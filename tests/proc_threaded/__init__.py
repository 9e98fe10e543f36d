"""A tool module that starts a thread (holding a lock) at import: never forked from."""

from __future__ import annotations

import _thread
import threading
import time

from toolbus import ToolRegistry

registry = ToolRegistry()
_lock = threading.Lock()


def _hold() -> None:
    # Held nearly all the time (so a fork would copy it held), but let go for a
    # moment each turn: a waiting tool gets it within milliseconds. Without
    # that moment, the unfair lock could be taken straight back for longer
    # than the tool's timeout on a busy machine.
    while True:
        with _lock:
            time.sleep(0.01)
        time.sleep(0.001)


_thread.start_new_thread(_hold, ())  # a thread `threading` does not see
time.sleep(3.0)  # a slow import: it must not count against a call's deadline


# 2.5 s: less than the import takes, so an import on the clock still shows,
# and room for the call itself on a busy machine (0.8 s, against a 1 s
# import, left too little).
@registry.tool(backend="process", timeout=2.5)
def locked() -> str:
    with _lock:
        return "got the lock"
