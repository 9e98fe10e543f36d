"""Executor names: `executor-1`, `executor-2`, ... none repeating a name in use.

A name is in use while its executor is alive (closed or not, until it is
garbage collected): the executors are held weakly, so one that is gone frees
its name. A name given explicitly is taken as it is, even if in use.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Protocol

__all__ = ["take_name"]


class Named(Protocol):
    name: str


_executor_numbers = itertools.count(1)
# Every executor alive in this process (not yet garbage collected), for the
# names a default name must not repeat; added to under the lock.
_named_executors: weakref.WeakSet[Named] = weakref.WeakSet()
_names_lock = threading.Lock()


def take_name(executor: Named, name: str | None) -> str:
    """Set `executor.name` to `name`, or to the next `executor-N` no live
    executor has; either is then in use until `executor` is garbage collected."""
    with _names_lock:
        if name is None:
            taken = {ex.name for ex in _named_executors}
            name = f"executor-{next(_executor_numbers)}"
            while name in taken:
                name = f"executor-{next(_executor_numbers)}"
        executor.name = name
        _named_executors.add(executor)
    return name
