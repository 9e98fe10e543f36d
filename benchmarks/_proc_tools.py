"""What scenario 11 runs in worker processes: module-level, so a worker can import it.

The warm-call case runs `benchmarks._common.noop` itself, the very function the
`ProcessPoolExecutor` baseline submits; the timeout cases run `stall`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from toolbus import ToolContext


def stall(hang: bool, note: str, ctx: ToolContext) -> dict[str, float]:
    """Hang forever if `hang`, after writing this worker's pid and the attempt's
    deadline (`time.monotonic()` clock) to the file `note`. Otherwise return this
    worker's pid and when the call started running here, on the same clock
    (CLOCK_MONOTONIC: one clock for every process of the machine, on Linux)."""
    started = time.monotonic()
    if hang:
        Path(note).write_text(f"{os.getpid()} {ctx.deadline!r}")
        while True:
            time.sleep(1000)
    return {"pid": os.getpid(), "started": started}
