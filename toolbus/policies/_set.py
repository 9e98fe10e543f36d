"""Which policies guard which tool, for one executor.

`Executor(policies=...)` first (those whose `applies_to(tool)` is true), then
the tool's own. Worked out once per tool and kept, so a call of a tool without
policies pays one dictionary lookup.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..masking import Scrubber, SecretKeys, mask_arguments, mask_paths
from ..models import ErrorCode, ToolCall
from ._keyed import parsed_arguments
from ._protocol import Admit, BasePolicy, Reject, check_policies, policy_name
from ._signals import asking, done_asking

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Guard", "PolicySet"]


@dataclass(frozen=True, slots=True)
class Guard:
    """The policies of one tool: asked before it runs, at submission, and for
    its timeout."""

    tool: Tool
    chain: tuple[Any, ...]
    at_submission: tuple[Any, ...]
    timing: tuple[Any, ...]


_NONE: tuple[Any, ...] = ()


class PolicySet:
    """An executor's policies, resolved per tool."""

    def __init__(self, policies: Any) -> None:
        self.policies = check_policies(policies, "Executor")
        self._guards: dict[int, Guard] = {}
        self._lock = threading.Lock()

    def guard(self, tool: Tool) -> Guard | None:
        """`tool`'s policies, or None when it has none (the common case)."""
        found = self._guards.get(id(tool))
        if found is not None and found.tool is tool:
            return found if found.chain or found.at_submission or found.timing else None
        with self._lock:
            # A policy's applies_to is user code: asked once per tool, not per call.
            mine = tuple(p for p in self.policies if _applies(p, tool))
            every = mine + tuple(getattr(tool, "policies", ()) or ())
            found = Guard(
                tool,
                tuple(p for p in every if not getattr(p, "at_submission", False)),
                tuple(p for p in every if getattr(p, "at_submission", False)),
                tuple(p for p in every if _sets_timeouts(p)),
            )
            self._guards[id(tool)] = found
        return found if found.chain or found.at_submission or found.timing else None

    def all_tools(self) -> Sequence[Tool]:
        """Tools the executor's policies bring along (a spill's `read_artifact`)."""
        return tuple(t for p in self.policies for t in _tools(p))


def _sets_timeouts(policy: Any) -> bool:
    """Whether `policy` has a `timeout` of its own (BasePolicy's returns the default)."""
    method = getattr(type(policy), "timeout", None)
    return callable(method) and method is not BasePolicy.timeout


def _applies(policy: Any, tool: Tool) -> bool:
    applies = getattr(policy, "applies_to", None)
    return True if applies is None else bool(applies(tool))


def _tools(policy: Any) -> Sequence[Tool]:
    tools = getattr(policy, "tools", None)
    return tuple(tools()) if callable(tools) else ()


def timeout_for(guard: Guard, default: float | None) -> float | None:
    """The deadline of `guard.tool`'s attempts, as its policies set it."""
    timeout = default
    for policy in guard.timing:
        timeout = policy.timeout(guard.tool, timeout)
    return timeout


def submission_scrubber(call: ToolCall, tool: Tool, keys: SecretKeys) -> Scrubber:
    """What the default masking (`keys`) and the tool's secret-typed paths hide
    of `call`'s raw arguments: all that is known of its secrets before
    admission (and a masker of the executor's own) has masked them."""
    raw = parsed_arguments(call.arguments)
    return Scrubber(mask_arguments(raw, keys)[1] + mask_paths(None, raw, tool.secret_paths)[1])


def admit_at_submission(
    guard: Guard, call: ToolCall, now: float, scrubber: Scrubber, batch_id: str | None = None
) -> tuple[ErrorCode, str] | None:
    """Ask the policies that decide at submission; why the call is refused, or None.

    The arguments are not masked yet: `scrubber` (`submission_scrubber`) is
    what the policies mask a key with (`scrub`), and the refusal is scrubbed
    with it. Nothing is announced at submission."""
    token = asking(None, batch_id, None, scrubber)
    try:
        refusal = _ask_at_submission(guard, call, now)
    finally:
        done_asking(token)
    if refusal is not None and scrubber:
        return refusal[0], scrubber.text(refusal[1])
    return refusal


def _ask_at_submission(guard: Guard, call: ToolCall, now: float) -> tuple[ErrorCode, str] | None:
    for policy in guard.at_submission:
        try:
            decision = policy.admit(call, guard.tool, now)
        except Exception as e:
            return (
                ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{call.name}' is unavailable: its policy {policy_name(policy)} failed "
                f"({type(e).__name__})",
            )
        if type(decision) is Admit:
            continue
        if type(decision) is Reject and isinstance(decision.code, ErrorCode):
            return decision.code, str(decision.message)
        return (
            ErrorCode.TOOL_UNAVAILABLE,
            f"Tool '{call.name}' is unavailable: its policy {policy_name(policy)}, asked at "
            f"submission, returned {type(decision).__name__} (only Admit or Reject may be)",
        )
    return None
