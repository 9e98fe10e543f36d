"""The policy shape: what a policy decides about a call, and when it is asked.

A policy is a small strategy object, in the manner of tenacity's: `admit`
looks at a validated call and decides, `on_result` sees how the call ended.
Decisions are values (`Admit`, `Delay`, `Reject`, `Respond`,
`RequireApproval`, `Halt`); the pipeline carries them out. A policy's own state and the
`now` it is handed are all it decides from, so every built-in is unit-tested on
a fake clock without threads.

When the executor asks:
- `admit` after argument validation (and the pre-call hooks and authorization),
  off the call's deadline clock: a delay, or a slow decision, is queueing, not
  run time. The decision is bounded apart: policies that take as long as the
  call's timeout to decide end it `rejected` (TOOL_UNAVAILABLE), naming the
  one that did not answer.
  Executor policies first, then the tool's; those with `first = True` (an
  approval) before all of them. Once a policy has admitted a call it
  is not asked again for it, even when a later policy delays it.
- `admit` of a policy with `at_submission = True` (a quota) when the call is
  submitted, on the caller's thread, in the batch's order, before the batch
  fans out: it must be sync.
- `timeout(tool, default)` at submission: the deadline of the call's attempts.
- `on_result` once per call, with its terminal result, for every policy that
  admitted it, innermost (the tool's last) first; it may return a replacement.
  It runs where the call finishes (possibly the supervisor's thread): quick,
  and never blocking. Only for calls the policy admitted.
- `on_dropped(call, result, now)`, if the policy has it, once, for a call it
  was making wait (`Delay`) that ended while waiting (cancelled, the executor
  closed): so a policy that keeps places for waiting calls (a rate limiter's
  turns, a cache's followers) can give the place up. Its return is ignored;
  `on_result` is not called for that policy. Same thread rules.

A call is one `ToolCall` object from `admit` on: `admit` (each time it is
asked again after a delay), `on_result` and `on_dropped` get the same object.
A policy that keeps state per call knows the call by it (`id(call)`, holding
the object meanwhile), never by `call.id`, which a model may repeat. (One
asked at submission sees the call as submitted, before its arguments are
parsed and the pre-call hooks run: not the same object.)
"""

from __future__ import annotations

import concurrent.futures
import inspect
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..models import ErrorCode, ToolCall, ToolResult

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = [
    "Admit",
    "BasePolicy",
    "Decision",
    "Delay",
    "Halt",
    "Policy",
    "Reject",
    "RequireApproval",
    "Respond",
]


@dataclass(frozen=True, slots=True)
class Admit:
    """Let the call go on (to the next policy, then to its tool)."""


@dataclass(frozen=True, slots=True)
class Delay:
    """Ask again in `seconds` (or as soon as `until` is done, if sooner).

    The wait is a timer: it holds no thread and no capacity slot. `until` (a
    `concurrent.futures.Future`) lets a policy wake the call on an event, such
    as an identical call in flight finishing."""

    seconds: float
    reason: str = ""
    until: concurrent.futures.Future[Any] | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    """End the call `rejected` with `code` and `message` (for the model to read);
    it is not retried. Without a message (None or ""), the model reads that
    the policy, named, rejected the call."""

    code: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class Respond:
    """End the call with `result` without running its tool (a cache hit, say).

    The result's `call_id` and `name` are set to the call's, and `attempts` to 0."""

    result: ToolResult


@dataclass(frozen=True, slots=True)
class RequireApproval:
    """The call runs only with an approval of its exact arguments. Without one it
    ends `deferred` (`APPROVAL_REQUIRED`) with an `ApprovalRequest`; a denial
    ends it `rejected` (`TOOL_NOT_ALLOWED`)."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Halt:
    """End the call and halt its agent run (`toolbus.agent_runs`): the call
    and every unfinished call of the run end `cancelled` with
    `ErrorCode.HALTED` and `reason` (what the model, and `run_agent`, read),
    running ones interrupted as a cancellation does, and the run's later
    calls are refused so. A call with no agent run halts its batch alone."""

    reason: str = ""


Decision = Admit | Delay | Reject | Respond | RequireApproval | Halt

ADMIT = Admit()


@runtime_checkable
class Policy(Protocol):
    """What the executor asks of a policy. `BasePolicy` supplies the optional parts."""

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision | Awaitable[Decision]:
        """Decide about a validated `call` of `tool` at monotonic time `now`."""
        ...

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult | None:
        """See how an admitted call ended; return a replacement result or None."""
        ...


class BasePolicy:
    """A base for policies: every optional part with its default.

    - `name`: how errors and events name it.
    - `at_submission`: ask `admit` at submission (sync only), not before the run.
    - `first`: ask it before every other policy of the call, the executor's
      and the tool's alike (`requires_approval` is: nothing may answer, count
      or let through a call nobody approved yet). Policies with `first` keep
      their order among themselves, as the others do.
    - `applies_to(tool)`: given to an executor, whether it guards `tool`.
    - `check(tool)`: given to `tool`, raise `ValueError` if it cannot guard it
      (at registration).
    - `timeout(tool, default)`: the deadline of the tool's attempts.
    - `on_dropped(call, result, now)`: a call it delayed ended while waiting.
    - `tools()`: tools the policy brings along, registered beside it.
    - `never_blocks`: `admit` is sync, quick and never waits (no I/O, no code
      of the user's): a sync tool's worker that asks it then wakes no other
      worker until it answers, so calls it makes wait start no thread. A
      policy that does not override `admit` counts as one.
    - `stores_results`: `on_result` keeps results where they outlive the
      call (a file, a database): it is handed what is published (scanned by
      the executor's content scanner), not the model's copy, where the two
      differ (`ContentScanner(to_model=False)`). `spill` is one.
    """

    name: str = "policy"
    at_submission: bool = False
    first: bool = False
    never_blocks: bool = False
    stores_results: bool = False

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision | Awaitable[Decision]:
        return ADMIT

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult | None:
        return None

    def on_dropped(self, call: ToolCall, result: ToolResult, now: float) -> None:
        """A call this policy made wait (`Delay`) ended while waiting, with
        `result` (cancelled, say): forget whatever was kept for it. It was never
        admitted, so `on_result` is not called. Quick and never blocking."""

    def applies_to(self, tool: Tool) -> bool:
        return True

    def check(self, tool: Tool) -> None:
        return None

    def timeout(self, tool: Tool, default: float | None) -> float | None:
        return default

    def tools(self) -> Sequence[Tool]:
        return ()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def policy_name(policy: Any) -> str:
    """How messages name `policy`: its `name`, else its class."""
    name = getattr(policy, "name", None)
    return name if isinstance(name, str) and name else type(policy).__name__


def rejection_text(message: Any, tool: str, policy: Any) -> str:
    """A `Reject`'s message as the model reads it: a default naming the policy
    when it gave none (None, or empty), never the text "None"."""
    if message is None or message == "":
        return f"Tool '{tool}' was rejected by its policy {policy_name(policy)}"
    return message if isinstance(message, str) else str(message)


def halt_text(reason: Any, policy: Any) -> str:
    """A `Halt`'s reason as the model and `run_agent` read it: a default
    naming the policy when it gave none."""
    if reason is None or reason == "":
        return f"by the policy {policy_name(policy)}"
    return reason if isinstance(reason, str) else str(reason)


def approval_text(reason: Any) -> str:
    """A `RequireApproval`'s reason as text ("" for none)."""
    if reason is None or reason == "":
        return ""
    return reason if isinstance(reason, str) else str(reason)


def untold_text(decision: Any, error: BaseException) -> str:
    """Why a decision whose text (a `Reject`'s message, a `Halt`'s or a
    `RequireApproval`'s reason) could not be made (its `__str__` raised)
    refuses the call: the policy's failure, naming the exception's type only
    (its text may be what failed)."""
    what = "message" if type(decision) is Reject else "reason"
    return (
        f"the {what} of its {type(decision).__name__} could not be made text: "
        f"str() raised {type(error).__name__}"
    )


def check_policies(policies: Any, owner: str) -> tuple[Any, ...]:
    """`policies=` as a tuple of policies, or a TypeError naming `owner`."""
    if policies is None:
        return ()
    if isinstance(policies, str | bytes) or not hasattr(policies, "__iter__"):
        raise TypeError(f"{owner}: policies must be a list of policies, got {policies!r}")
    found = tuple(policies)
    for p in found:
        if not callable(getattr(p, "admit", None)) or not callable(getattr(p, "on_result", None)):
            raise TypeError(
                f"{owner}: {p!r} is not a policy (it needs admit(call, tool, now) and "
                "on_result(call, result, now); toolbus.policies.BasePolicy supplies both)"
            )
        for flag in ("first", "at_submission"):
            # Which policies are asked first, or at submission, is not left to
            # truthiness: an approval with `first = "yes"` would be asked last.
            value = getattr(p, flag, False)
            if not isinstance(value, bool):
                raise TypeError(
                    f"{owner}: policy {policy_name(p)!r}: {flag} must be True or False, "
                    f"got {value!r}"
                )
        if getattr(p, "at_submission", False) and inspect.iscoroutinefunction(p.admit):
            raise TypeError(
                f"{owner}: policy {policy_name(p)!r} is asked at submission, so its admit "
                "must not be async"
            )
    return found
