"""A tool module that starts a thread (holding a lock) at import: never forked from."""

from __future__ import annotations

import _thread
import threading
import time

from toolbus import ToolRegistry

registry = ToolRegistry()
_lock = threading.Lock()


def _hold() -> None:
    while True:
        with _lock:
            time.sleep(0.01)


_thread.start_new_thread(_hold, ())  # a thread `threading` does not see
time.sleep(0.3)  # a slow import: it must not count against a call's deadline


@registry.tool(backend="process", timeout=0.25)
def locked() -> str:
    with _lock:
        return "got the lock"
