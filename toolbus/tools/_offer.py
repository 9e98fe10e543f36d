"""Which tools a caller is offered: by the scopes its token grants, then by
whether each is enabled at this step of the agent run.

A tool's `scopes` are what a caller's OAuth token must grant before the tool
is listed for it or called by it (the MCP server over HTTP with OAuth,
`toolbus.mcp`). The decision is a pure function of the tool and what was
granted, so a listing and a call can never disagree: a tool not offered to
a token is a tool that token cannot call.

`granted` carries what the served call's token grants into the call's
context, so the calls it makes in turn (a sequence's steps, a tool calling
another) are held to it too, and an unknown tool's error names only tools
the token is offered.

A tool's `is_enabled` (True, False, or a function of a `StepContext`) says
whether it is offered at a step: the scope check comes first, then this. An
executor's `prepare` may then drop tools or change what they say
(`Executor.offered`). Whoever offers tools for a step (`run_agent`, each
turn; `Executor.offer`) sets `offering` to what was offered, and a call the
model makes of a tool not among them ends `TOOL_NOT_OFFERED`; so does a call
of a tool not enabled, offered or not. A function that raises, or answers
anything but True or False, does not offer the tool: a broken guard fails closed.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..agent_runs import AGENT_RUN, check_agent_run

if TYPE_CHECKING:
    from ._tool import Tool

__all__ = [
    "Offer",
    "StepContext",
    "check_enabled",
    "check_scopes",
    "check_step",
    "enabled",
    "granted",
    "missing_scopes",
    "offered",
    "offering",
    "scope_name",
    "step_in",
]

log = logging.getLogger("toolbus")


@dataclass(frozen=True, slots=True)
class StepContext:
    """The step tools are offered for: what a tool's `is_enabled` and an
    executor's `prepare` decide from.

    `agent_run`: the run's identity (`toolbus.agent_runs`); `step`: which
    model turn of the run, from 1 (0: not in an agent loop); `context`: your
    own (what you passed `run_agent(context=...)`, a framework's run context)."""

    agent_run: str | None = None
    step: int = 0
    context: Any = None

    def __post_init__(self) -> None:
        if self.agent_run is not None:
            check_agent_run(self.agent_run, "StepContext")
        if isinstance(self.step, bool) or not isinstance(self.step, int):
            raise TypeError(f"StepContext: step must be an int, got {type(self.step).__name__}")
        if self.step < 0:
            raise ValueError(f"StepContext: step must be 0 or more, got {self.step}")


@dataclass(frozen=True, slots=True)
class Offer:
    """What was offered at a step: its context and the names of the tools
    offered (None: the tools were sent as given; each call is held to its
    tool's `is_enabled` at `step`)."""

    step: StepContext
    names: frozenset[str] | None


# The tools offered for the step whose calls are being made in this context
# (None: no offer made; each call is held to its tool's `is_enabled` alone).
offering: contextvars.ContextVar[Offer | None] = contextvars.ContextVar(
    "toolbus_offering", default=None
)

IsEnabled = bool | Callable[[StepContext], Any]

# What the token of the served call running in this context grants (None:
# no token, nothing checked). Set by the MCP server around a call.
granted: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "toolbus_granted_scopes", default=None
)


def check_scopes(value: object, owner: str) -> tuple[str, ...]:
    """`scopes` as a tool keeps them: a tuple of scope names (RFC 6749 3.3:
    printable ASCII without spaces, quotes or backslashes); one name alone is
    taken as a list of one."""
    try:
        names: tuple[object, ...] = (value,) if isinstance(value, str) else tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{owner}: scopes must be a list of scope names") from None
    for name in names:
        if not scope_name(name):
            raise ValueError(
                f"{owner}: scope {name!r} is not a scope name (printable ASCII without spaces, "
                "double quotes or backslashes)"
            )
    return tuple(dict.fromkeys(str(n) for n in names))


def scope_name(name: object) -> bool:
    """Whether `name` is a scope name: RFC 6749's scope-token (%x21 / %x23-5B / %x5D-7E)."""
    return (
        isinstance(name, str)
        and bool(name)
        and all(c == "!" or "#" <= c <= "[" or "]" <= c <= "~" for c in name)
    )


def missing_scopes(tool: Tool, granted: Set[str] | None) -> tuple[str, ...]:
    """The scopes `tool` needs that `granted` lacks (None: nothing is checked,
    as for a caller in this process or behind a shared token)."""
    if granted is None or not tool.scopes:
        return ()
    return tuple(s for s in tool.scopes if s not in granted)


def check_enabled(value: object, owner: str) -> IsEnabled:
    """`is_enabled` as a tool keeps it: True, False, or a function of a `StepContext`."""
    if value is True or value is False or callable(value):
        return value
    raise TypeError(
        f"{owner}: is_enabled must be True, False or a function of a StepContext, got {value!r}"
    )


def step_in(agent_run: str | None, context: Any) -> StepContext:
    """`StepContext(agent_run=agent_run, context=context)` for the current
    agent run's id (checked when it was set), made without the frozen
    dataclass's two frames (0.7 µs): an export makes one for every call."""
    step: StepContext = object.__new__(StepContext)
    object.__setattr__(step, "agent_run", agent_run)
    object.__setattr__(step, "step", 0)
    object.__setattr__(step, "context", context)
    return step


def current_step() -> StepContext:
    """The step calls are made for here: the offer's, else one of the current agent run."""
    offer = offering.get()
    return offer.step if offer is not None else StepContext(agent_run=AGENT_RUN.get())


def check_step(step: object) -> None:
    """A `TypeError` unless `step` is a `StepContext` or None."""
    if step is not None and not isinstance(step, StepContext):
        raise TypeError(f"step must be a StepContext or None, got {type(step).__name__}")


def enabled(tool: Tool, step: StepContext | None = None) -> bool:
    """Whether `tool` is enabled at `step` (None: `current_step()`); a function
    that raises or answers anything but a bool says no."""
    check_step(step)
    flag = tool.is_enabled
    if flag is True or flag is False:
        return flag
    try:
        answer = flag(step if step is not None else current_step())
    except BaseException as e:  # user code: it must take no listing or call down with it
        log.warning("tool %r: is_enabled raised %s: not offered", tool.name, type(e).__name__)
        return False
    if answer is True or answer is False:
        return answer
    close = getattr(answer, "close", None)
    if inspect.iscoroutine(answer) and callable(close):
        close()  # an async is_enabled: never awaited here (the exports are sync)
    log.warning(
        "tool %r: is_enabled returned %s, not True/False: not offered",
        tool.name,
        type(answer).__name__,
    )
    return False


def offered(
    tools: Iterable[Tool], granted: Set[str] | None, step: StepContext | None = None
) -> list[Tool]:
    """The tools a caller granted `granted` may see and call at `step`
    (None: `current_step()`): scopes first, then `is_enabled`."""
    check_step(step)
    # The common tool (no scopes asked, always enabled) is taken without a
    # frame: an export offers the registry's tools again for every call.
    return [
        t
        for t in tools
        if (granted is None or not t.scopes or not missing_scopes(t, granted))
        and (t.is_enabled is True or (t.is_enabled is not False and enabled(t, step)))
    ]


def not_offered(tool: Tool) -> str | None:
    """Why the model may not call `tool` here (None: it may): not among the
    tools offered for this step, or not enabled at it."""
    offer = offering.get()
    if offer is not None and offer.names is not None and tool.name not in offer.names:
        return _not_offered_text(tool.name, sorted(offer.names))
    if tool.is_enabled is not True and not enabled(tool, offer.step if offer else None):
        return _not_offered_text(tool.name, None)
    return None


def _not_offered_text(name: str, available: list[str] | None) -> str:
    text = f"Tool '{name}' is not offered at this step"
    if available is None:
        return text
    listed = ", ".join(available[:20])
    return text + (f". Available tools: {listed}" if listed else ": no tools are available")
