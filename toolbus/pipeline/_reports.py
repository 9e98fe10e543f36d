"""What a running tool reports about its call: progress (`tool:progress`
events) and log messages (`ctx.log`), each scrubbed and scanned with the
call's own scrubber, whichever thread or process it comes from (a worker's
arrive over its channel: `logged`)."""

from __future__ import annotations

import math
from typing import Any

from .._json import detached
from ..bus import _signals as sig
from ..bus._events import Progress
from ..masking import Scrubber
from ..tools import LogLevel, ToolContext
from ..tools._context import write_log
from ..tools._peer import LOG_LEVELS
from ._make import log_contained
from ._run import Run
from ._services import Services

__all__ = ["CallLogs", "logged", "progress_fraction", "progress_sink", "publish_progress"]


def publish_progress(
    run: Run, svc: Services, message: str, fraction: float | None, data: dict[str, Any]
) -> None:
    """Announce a tool's progress, scrubbed; the progress channel of every
    backend. Not once the call has its result: a tool let go at its deadline
    or cancellation may run on, and its progress would follow the call's
    `tool:finished`. `fraction` is published within 0..1 (None if it is no
    number)."""
    em = svc.emitter
    if em.listening[sig.PROGRESS] and run.result is None:
        if fraction is not None:
            fraction = progress_fraction(fraction)
        s = run.scrubber
        event = Progress(
            run.call.id,
            run.call.name,
            run.batch_id,
            run.attempt,
            s.text(message),
            fraction,
            # A copy: the tool may change `data` before the event is delivered.
            s.value(detached(data)),
            parent_call_id=run.parent_call_id,
            _run=run.token,
        )
        run.while_open(lambda: em.emit(sig.PROGRESS, event))


def progress_fraction(value: Any) -> float | None:
    """A progress fraction as the event promises it: a number within 0..1
    (a tool's 1.0000001 or 7 is 1.0), or None (NaN, not a number, an integer
    past a float's range). Every backend's, whatever process it came from."""
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if math.isnan(f):
        return None
    return 0.0 if f < 0.0 else 1.0 if f > 1.0 else f


class CallLogs:
    """A call's `ctx.log`: scrubbed and scanned with the call's own scrubber,
    from whatever thread the tool logs on (and, through a worker's channel,
    from another process). Never fails the call."""

    __slots__ = ("run",)

    def __init__(self, run: Run) -> None:
        self.run = run

    @property
    def scrubber(self) -> Scrubber:
        return self.run.scrubber

    def __call__(
        self, level: LogLevel, message: str, logger: str | None, data: dict[str, Any]
    ) -> None:
        run = self.run
        try:
            write_log(run.scrubber, run.call.id, run.call.name, level, message, logger, data)
        except Exception as e:
            log_contained(f"a log message of call {run.call.id} was lost", e, run.scrubber)


def logged(run: Run, message: dict[str, Any]) -> None:
    """A log message a worker sent for `run` (off the wire): written as the
    tool's `ctx.log` would have been here."""
    level = message.get("level")
    logger, data = message.get("logger"), message.get("data")
    CallLogs(run)(
        level if level in LOG_LEVELS else "info",
        str(message.get("message", "")),
        logger if isinstance(logger, str) else None,
        data if isinstance(data, dict) else {},
    )


def progress_sink(svc: Services, run: Run) -> Any:
    def sink(ctx: ToolContext, message: str, fraction: float | None, data: dict[str, Any]) -> None:
        publish_progress(run, svc, message, fraction, data)

    return sink
