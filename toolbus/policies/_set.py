"""Which policies guard which tool, for one executor.

`Executor(policies=...)` first (those whose `applies_to(tool)` is True; one
that raises or answers anything but True or False refuses the tool's calls), then
the tool's own; but the policies with `first = True` (approvals) before all
the others, wherever they were given. Worked out once per tool and kept, so a call of a tool without
policies pays one dictionary lookup.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import error_text
from .._interrupts import interrupts_caller
from .._options import timeout_seconds
from ..masking import Scrubber, SecretKeys, mask_arguments, mask_paths
from ..models import ErrorCode, ToolCall, ToolResult
from ._keyed import parsed_arguments
from ._protocol import (
    Admit,
    BasePolicy,
    Halt,
    Reject,
    check_policies,
    halt_text,
    policy_name,
    rejection_text,
    untold_text,
)
from ._signals import asking, done_asking

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Guard", "PolicySet", "Refusal", "never_submitted"]

log = logging.getLogger("toolbus")


Refusal = tuple[ErrorCode, str]


@dataclass(frozen=True, slots=True)
class Guard:
    """The policies of one tool: asked before it runs, at submission, and for
    its timeout. `refusal`: why none of its calls may run (a policy's
    `applies_to` raised), or None."""

    tool: Tool
    chain: tuple[Any, ...]
    at_submission: tuple[Any, ...]
    timing: tuple[Any, ...]
    refusal: Refusal | None = None
    # The policies that check an `ok` result before it is final (`check_output`:
    # output guardrails), in order; asked by `pipeline.check_outputs`.
    output_checks: tuple[Any, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.chain or self.at_submission or self.timing or self.refusal)


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
            return found or None
        with self._lock:
            # A policy's applies_to is user code: asked once per tool, not per call.
            mine = []
            for p in self.policies:
                try:
                    applies = _applies(p, tool)
                except BaseException as e:  # (any: as a policy's `admit`'s, see extending.md)
                    if interrupts_caller(e):
                        raise  # Ctrl-C, on the caller's thread: nothing was handed on yet
                    # Whether it guards the tool is unknown: fail closed, as a
                    # guard that raises in `admit` does. Not kept: asked again
                    # by the next call, in case the failure was passing.
                    log.warning(
                        "policy %s failed in applies_to(%r): %s",
                        policy_name(p),
                        tool.name,
                        error_text(e),
                    )
                    why = f"its applies_to raised {error_text(e)}"
                    return Guard(tool, (), (), (), _failed(tool.name, p, why))
                if applies is not True and applies is not False:
                    # Neither yes nor no (None, a set, "no"): whether it guards
                    # the tool is unknown, as when it raises; refused alike.
                    why = f"its applies_to returned {type(applies).__name__}, not True/False"
                    log.warning("policy %s for %r: %s", policy_name(p), tool.name, why)
                    return Guard(tool, (), (), (), _failed(tool.name, p, why))
                if applies:
                    mine.append(p)
            given = tuple(mine) + tuple(getattr(tool, "policies", ()) or ())
            # Approvals first, whatever their level: nothing may answer (a
            # cache), count (a limit) or let through a call that a person has
            # not approved yet. The order is otherwise as given.
            every = tuple(p for p in given if _first(p)) + tuple(p for p in given if not _first(p))
            found = Guard(
                tool,
                tuple(p for p in every if not getattr(p, "at_submission", False)),
                tuple(p for p in every if getattr(p, "at_submission", False)),
                tuple(p for p in every if _sets_timeouts(p)),
                output_checks=tuple(p for p in every if callable(getattr(p, "check_output", None))),
            )
            self._guards[id(tool)] = found
        return found or None

    def all_tools(self) -> Sequence[Tool]:
        """Tools the executor's policies bring along (a spill's `read_artifact`)."""
        return tuple(t for p in self.policies for t in _tools(p))


def _sets_timeouts(policy: Any) -> bool:
    """Whether `policy` has a `timeout` of its own (BasePolicy's returns the default)."""
    method = getattr(type(policy), "timeout", None)
    return callable(method) and method is not BasePolicy.timeout


def _first(policy: Any) -> bool:
    """Whether `policy` is asked before the others (`first = True`: an approval)."""
    return getattr(policy, "first", False) is True


def _applies(policy: Any, tool: Tool) -> Any:
    """`policy.applies_to(tool)` as it answered (True without the method)."""
    applies = getattr(policy, "applies_to", None)
    return True if applies is None else applies(tool)


def _tools(policy: Any) -> Sequence[Tool]:
    tools = getattr(policy, "tools", None)
    return tuple(tools()) if callable(tools) else ()


def _failed(tool: str, policy: Any, why: str) -> Refusal:
    return (
        ErrorCode.TOOL_UNAVAILABLE,
        f"Tool '{tool}' is unavailable: its policy {policy_name(policy)} failed ({why})",
    )


def timeout_for(guard: Guard, default: float | None) -> float | Refusal | None:
    """The deadline of `guard.tool`'s attempts, as its policies set it (None:
    no deadline); or, when a policy's `timeout` raised or gave what is not a
    timeout, why the call is refused.

    A policy's answer is held to what `timeout=` accepts anywhere: None or
    `math.inf` (no deadline) or a number > 0. Anything else (a string, 0, a
    negative number, NaN) would end every call at once unrun, or never."""
    timeout = default
    for policy in guard.timing:
        try:
            given = policy.timeout(guard.tool, timeout)
        except BaseException as e:  # (any: as a policy's `admit`'s)
            if interrupts_caller(e):
                raise  # (as `applies_to`'s)
            why = f"its timeout() raised {error_text(e)}"
        else:
            try:
                timeout = timeout_seconds(given, "its timeout()")
            except (TypeError, ValueError) as e:
                why = str(e)
            else:
                if timeout == math.inf:
                    timeout = None
                continue
        log.warning(
            "policy %s: no usable timeout for %r: %s", policy_name(policy), guard.tool.name, why
        )
        return _failed(guard.tool.name, policy, why)
    return timeout


def submission_scrubber(call: ToolCall, tool: Tool, keys: SecretKeys) -> Scrubber:
    """What the default masking (`keys`) and the tool's secret-typed paths hide
    of `call`'s raw arguments: all that is known of its secrets before
    admission (and a masker of the executor's own) has masked them."""
    raw = parsed_arguments(call.arguments)
    return Scrubber(mask_arguments(raw, keys)[1] + mask_paths(None, raw, tool.secret_paths)[1])


def admit_at_submission(
    guard: Guard,
    call: ToolCall,
    now: float,
    scrubber: Scrubber,
    batch_id: str | None = None,
    admitted: list[Any] | None = None,
) -> tuple[ErrorCode, str] | None:
    """Ask the policies that decide at submission; why the call is refused, or
    None. Those that admitted it are added to `admitted` (they are told how it
    ends, refused by a later one or not).

    The arguments are not masked yet: `scrubber` (`submission_scrubber`) is
    what the policies mask a key with (`scrub`), and the refusal is scrubbed
    with it. Nothing is announced at submission."""
    admitted = admitted if admitted is not None else []
    try:
        token = asking(None, batch_id, None, scrubber)
        try:
            refusal = _ask_at_submission(guard, call, now, admitted)
        finally:
            done_asking(token)
        if refusal is not None and scrubber:
            return refusal[0], scrubber.text(refusal[1])
        return refusal
    except BaseException:  # the caller's interrupt (a policy's own failure is a refusal)
        # The call is never handed on: those that admitted it so far hear so.
        never_submitted(admitted, call, scrubber, batch_id)
        admitted.clear()
        raise


def never_submitted(
    admitted: Sequence[Any], call: ToolCall, scrubber: Scrubber, batch_id: str | None = None
) -> None:
    """Tell the policies that admitted `call` at submission (innermost first)
    that it ended `cancelled` before its first attempt: its submission was
    cut short (the caller's Ctrl-C) before the call was handed on, so it will
    never run nor end otherwise. A quota gives its unit back."""
    if not admitted:
        return
    result = ToolResult(
        call_id=call.id,
        name=call.name,
        status="cancelled",
        error="its submission was interrupted",
        error_code=ErrorCode.CANCELLED,
        attempts=0,
    )
    token = asking(None, batch_id, None, scrubber)
    try:
        for policy in reversed(admitted):
            try:
                policy.on_result(call, result, time.monotonic())
            except BaseException as e:  # told while an interrupt unwinds: it goes on
                log.warning(
                    "policy %s failed on call %s, whose submission was interrupted: %s",
                    policy_name(policy),
                    call.id,
                    scrubber.text(error_text(e)),
                )
    finally:
        done_asking(token)


def _ask_at_submission(
    guard: Guard, call: ToolCall, now: float, admitted: list[Any]
) -> tuple[ErrorCode, str] | None:
    for policy in guard.at_submission:
        try:
            decision = policy.admit(call, guard.tool, now)
        except BaseException as e:  # (any: as when it is asked before the attempt)
            if interrupts_caller(e):
                raise  # (as `applies_to`'s)
            return _failed(call.name, policy, type(e).__name__)
        if type(decision) is Admit:
            admitted.append(policy)
            continue
        kind = type(decision)
        if (kind is Reject and isinstance(decision.code, ErrorCode)) or kind is Halt:
            try:
                if kind is Halt:
                    return ErrorCode.HALTED, halt_text(decision.reason, policy)
                return decision.code, rejection_text(decision.message, call.name, policy)
            except BaseException as e:  # its text's own `__str__` (user code)
                if interrupts_caller(e):
                    raise  # (as `applies_to`'s)
                return _failed(call.name, policy, untold_text(decision, e))
        return (
            ErrorCode.TOOL_UNAVAILABLE,
            f"Tool '{call.name}' is unavailable: its policy {policy_name(policy)}, asked at "
            f"submission, returned {type(decision).__name__} (only Admit, Reject or Halt may be)",
        )
    return None
