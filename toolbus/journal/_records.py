"""What the journal tells about a call: `JournalRecord` and its parts.

Frozen pydantic models, like the rest of toolbus's public data. Arguments are
the masked ones (the only ones the journal ever stores); the result is the
one that was published (scrubbed of secrets), bounded in size.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..models import ToolResult

__all__ = ["JournalAttempt", "JournalOwner", "JournalRecord", "RecordState"]

RecordState = Literal["running", "in_doubt", "ended", "acknowledged"]
"""running: no outcome yet and its owner is still there; in_doubt: no outcome
and its owner is gone; ended: it has an outcome; acknowledged: it was in doubt
and someone said it was dealt with."""


class JournalOwner(BaseModel):
    """The executor session that ran a call: its process and where it ran."""

    model_config = ConfigDict(frozen=True)

    session: str
    """Random per executor."""
    pid: int
    host: str
    process_started: float | None = None
    """When the process started (epoch seconds), as it recorded it."""
    opened: float
    """When the session began (epoch seconds)."""
    closed: float | None = None
    """When its executor was closed; None if it never was (still open, or it died)."""


class JournalAttempt(BaseModel):
    """One attempt of a journaled call."""

    model_config = ConfigDict(frozen=True)

    n: int
    status: Literal["ok", "error", "timeout"]
    duration: float
    at: float
    """When it ended (epoch seconds)."""


class JournalRecord(BaseModel):
    """One mutating call the journal knows of.

    `id` is the record's own number in the journal (call ids need not be unique
    across sessions). `status` and `result` are None until the call has an
    outcome; `result` is the published `ToolResult` (its output cut down to
    the journal's size limit when it was larger, with `truncated` True).
    `replay_of` is the record whose result this call returned without running.
    """

    model_config = ConfigDict(frozen=True)

    id: int
    call_id: str
    tool: str
    arguments: Any
    """Masked, as published in events."""
    idempotency_key: str
    batch_id: str | None = None
    started: float
    """When the intent was recorded (epoch seconds), just before the tool's first attempt."""
    owner: JournalOwner
    state: RecordState
    attempts: tuple[JournalAttempt, ...] = ()
    status: str | None = None
    error_code: str | None = None
    result: ToolResult | None = None
    truncated: bool = False
    ended: float | None = None
    acknowledged: float | None = None
    replay_of: int | None = None
    remote_task: str | None = None
    """The handle of the call's work running elsewhere (an MCP server's task),
    as its tool recorded it: after a crash, the call picks it up again."""
    arguments_digest: str | None = None
    """An HMAC of the call's arguments under the journal's secret (None for a
    call recorded before schema version 2): tells a call with other arguments
    under the same key apart."""

    @property
    def in_doubt(self) -> bool:
        return self.state == "in_doubt"
