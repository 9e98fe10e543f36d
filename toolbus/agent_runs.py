"""Which agent run a call belongs to: an identity that run limits count by and a halt stops.

An agent run is one task an agent works on, over many model turns and tool
calls: `run_agent` gives each run an identity of its own (`AgentResult.agent_run`,
kept when a stopped run is resumed); a caller of its own gives one with
`execute*(..., agent_run="...")`, or for every call made in a block:

    with agent_run("ticket-4711"):
        executor.execute_batch(calls)

The identity is a context variable, so the calls a tool makes in turn belong
to the run of the call that made them. `toolbus.policies.run_limit` counts
calls per run; a halt (`Executor.halt`, a run limit or a guardrail that
halts) ends every unfinished call of the run and refuses its later ones
(`ErrorCode.HALTED`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["agent_run", "check_agent_run", "current_agent_run"]

# The agent run of the calls submitted in this context (None: none).
AGENT_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "toolbus_agent_run", default=None
)

MAX_LENGTH = 200
"""An agent run's identity is at most this many characters (it is published)."""


def check_agent_run(value: object, where: str) -> str:
    """`value` if it can name an agent run (a non-empty string of at most
    `MAX_LENGTH` characters); else a `TypeError` or `ValueError` naming `where`."""
    if not isinstance(value, str):
        raise TypeError(f"{where}: agent_run must be a string, got {type(value).__name__}")
    if not value or len(value) > MAX_LENGTH:
        raise ValueError(
            f"{where}: agent_run must be 1 to {MAX_LENGTH} characters, got {len(value)}"
        )
    return value


def current_agent_run() -> str | None:
    """The agent run of calls submitted here now (None: none). A policy asked
    about a call reads the call's run with it: at submission, where the caller
    submits; before a run, where its tool runs (the same run, copied along)."""
    return AGENT_RUN.get()


@contextmanager
def agent_run(run_id: str) -> Iterator[str]:
    """Every call submitted inside the block (and every call those calls make
    in turn) belongs to the agent run `run_id`."""
    token = AGENT_RUN.set(check_agent_run(run_id, "agent_run()"))
    try:
        yield run_id
    finally:
        AGENT_RUN.reset(token)
