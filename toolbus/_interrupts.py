"""Whether an exception is the user's interrupt, to reach the caller.

Python runs a signal's handler on the main thread only, between two steps of
whatever that thread runs: the `KeyboardInterrupt` of Ctrl-C (or the
`SystemExit` of a handler that calls `sys.exit`) may be raised inside code
toolbus calls there, a policy's or a submission hook's included. On the main
thread it is the user's, and reaches the caller; anywhere else a signal's
handler never runs, so it is that code's own exception, handled as any other
it raises.
"""

from __future__ import annotations

import threading

__all__ = ["INTERRUPTS", "interrupts_caller"]

# What a signal's handler raises.
INTERRUPTS = (KeyboardInterrupt, SystemExit)

_MAIN = threading.main_thread()


def interrupts_caller(error: BaseException) -> bool:
    """True for a `KeyboardInterrupt` or `SystemExit` raised on the main thread."""
    return isinstance(error, INTERRUPTS) and threading.current_thread() is _MAIN
