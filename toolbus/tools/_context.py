"""What a running tool may know about its call, and how it reports progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .._sync import Latch

__all__ = ["ToolContext"]

ProgressSink = Callable[["ToolContext", str, float | None, dict[str, Any]], None]


def _no_progress(
    ctx: ToolContext, message: str, fraction: float | None, data: dict[str, Any]
) -> None:
    return None


class ToolContext:
    """Handed to a tool that declares a parameter annotated `ToolContext`.

    It is left out of the tool's parameter schema. `deadline` is a
    `time.monotonic()` value (None when there is no timeout); `cancelled` turns
    true when the caller no longer wants the result (timeout, cancellation,
    abort), so a cooperative tool can stop early.

    `idempotency_key` is the same for every attempt of the call and across a
    restart, so a mutating tool can hand it to the service it calls (a payment
    API's `Idempotency-Key` header) to have retries deduplicated there. It is
    `ToolCall.idempotency_key` when the caller set one; otherwise it is derived
    from the tool, the arguments as the model sent them, and the model's call
    id. A call whose id toolbus made up (the model gave none) has a key made of
    its tool and arguments alone: two distinct calls with the same arguments
    (`charge(card, 10)` in two turns) then share one key, and a service that
    deduplicates on it would drop the second charge. Where that matters, have
    the caller set `ToolCall.idempotency_key` (one per intended operation), or
    keep the model's call ids. See docs/journal.md.
    """

    __slots__ = ("_cancel", "_sink", "attempt", "call_id", "deadline", "idempotency_key", "tool")

    def __init__(
        self,
        *,
        call_id: str,
        tool: str,
        attempt: int = 1,
        deadline: float | None = None,
        cancel: Latch | threading.Event | None = None,
        sink: ProgressSink | None = None,
        idempotency_key: str = "",
    ) -> None:
        self.call_id = call_id
        self.tool = tool
        self.attempt = attempt
        self.deadline = deadline
        self._cancel = cancel if cancel is not None else Latch()
        self._sink = sink or _no_progress
        # The same for every attempt of the call and across a restart: a
        # mutating tool can hand it to the service it calls to dedupe retries.
        self.idempotency_key = idempotency_key

    @property
    def cancelled(self) -> bool:
        """True once the result of this attempt is no longer wanted."""
        return self._cancel.is_set()

    @property
    def remaining(self) -> float | None:
        """Seconds left before the deadline, or None without a deadline."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block up to `timeout` seconds until cancelled; True if cancelled."""
        return self._cancel.wait(timeout)

    def progress(self, message: str, fraction: float | None = None, **data: Any) -> None:
        """Publish a `tool:progress` signal (the stage the call is at) for this call."""
        self._sink(self, message, fraction, data)
