"""Guardrails: a check of a call's arguments before its tool runs, or of its
output after, that lets it pass, refuses it, replaces the output, or trips a
wire that halts the agent run.

    @guardrail
    def no_production(call: ToolCall) -> Verdict | None:
        if call.arguments.get("env") == "production":
            return Trip("a deploy to production was attempted")
        return None                      # (or Pass()): the call goes on

    @guardrail(stage="output")
    async def no_card_numbers(call: ToolCall, result: ToolResult) -> Verdict | None:
        if await classifier.has_card_number(result.output):
            return Replace("[withheld: a card number]")

A guardrail is a policy (give it to a tool or to the executor, in order with
the others); the check may be sync or async. An input guardrail is asked as
any policy's `admit` is (after validation, off the deadline's clock):
`Refuse(message)` ends the call `rejected` (`TOOL_NOT_ALLOWED`), unrun;
`Replace(output)` answers it without running it. An output guardrail is asked
about every `ok` result its tool's run made (not about a result another policy
gave, a cache hit: that was checked when it was made), after the post-call
hooks, bounded as they are (`hook_grace`): `Refuse(message)` withholds the
output (`rejected`, `CONTENT_BLOCKED`), `Replace(output)` replaces it. At
either stage `Trip(reason)` halts the call's agent run (as `Halt` does: the
call and every unfinished call of the run end `HALTED`) and announces
`tool:guardrail-tripped`. A check that raises, or returns anything else,
fails closed: the call is refused, naming the guardrail. A check that cannot
be called as its stage calls it (`check(call)`, `check(call, result)`) is
refused when the guardrail is made.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

from .._output import normalize_output
from ..bus._events import CallEvent
from ..bus._signals import define_signal
from ..models import ErrorCode, ToolCall, ToolResult
from ._protocol import ADMIT, BasePolicy, Decision, Halt, Reject, Respond
from ._signals import announce

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = [
    "GUARDRAIL_TRIPPED",
    "Guardrail",
    "GuardrailTripped",
    "Pass",
    "Refuse",
    "Replace",
    "Trip",
    "Verdict",
    "guardrail",
]

GUARDRAIL_TRIPPED = "tool:guardrail-tripped"
define_signal(
    GUARDRAIL_TRIPPED,
    "A guardrail tripped on a call (its arguments or its output): the agent run is halted.",
)


@dataclass(frozen=True, slots=True)
class GuardrailTripped(CallEvent):
    """`guardrail`: its name; `stage`: "input" or "output"; `reason`: why (masked
    like the call's arguments)."""

    guardrail: str
    stage: str
    reason: str


@dataclass(frozen=True, slots=True)
class Pass:
    """The call goes on (as returning None does)."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse the call (input: unrun) or its output (withheld); `message` is what
    the model reads."""

    message: str = ""


@dataclass(frozen=True, slots=True)
class Replace:
    """Answer with `output` instead: without running the tool (input), or in
    place of what it returned (output)."""

    output: Any


@dataclass(frozen=True, slots=True)
class Trip:
    """Trip the wire: the agent run is halted for `reason`."""

    reason: str = ""


Verdict: TypeAlias = Pass | Refuse | Replace | Trip
Stage = Literal["input", "output"]


class Guardrail(BasePolicy):
    """An input guardrail: `check(call)` asked before the tool runs (`admit`)."""

    stage: Stage = "input"

    def __init__(self, check: Callable[..., Any], name: str | None = None) -> None:
        if not callable(check):
            raise TypeError(f"guardrail: the check must be callable, got {check!r}")
        self._check = check
        given = name if name is not None else getattr(check, "__name__", None)
        if not isinstance(given, str) or not given:
            raise TypeError(f"guardrail: give it a name (name=...), got {given!r}")
        self.name = given
        _check_signature(check, given, self.stage)

    def __call__(self, *args: Any) -> Any:
        """The check itself (a decorated function stays callable)."""
        return self._check(*args)

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision | Awaitable[Decision]:
        verdict = self._ask(call)
        if inspect.isawaitable(verdict):
            return self._admit_later(verdict, call)
        return self._decide(verdict, call)

    async def _admit_later(self, verdict: Awaitable[Any], call: ToolCall) -> Decision:
        return self._decide(await verdict, call)

    def _ask(self, call: ToolCall) -> Any:
        return self._check(call)

    def _decide(self, verdict: Any, call: ToolCall) -> Decision:
        kind = type(verdict)
        if verdict is None or kind is Pass:
            return ADMIT
        if kind is Refuse:
            return Reject(
                ErrorCode.TOOL_NOT_ALLOWED, refused_text(self, call.name, verdict, "input")
            )
        if kind is Replace:
            try:
                output, attachments, metadata = normalize_output(verdict.output)
            except Exception as e:  # (OutputError: not JSON, a cycle, ...)
                return Reject(
                    ErrorCode.TOOL_UNAVAILABLE,
                    f"Tool '{call.name}' is unavailable: its guardrail {self.name} gave an "
                    f"output toolbus cannot send ({type(e).__name__})",
                )
            return Respond(
                ToolResult(
                    call_id=call.id,
                    name=call.name,
                    status="ok",
                    output=output,
                    attachments=attachments,
                    metadata=metadata,
                )
            )

        if kind is Trip:
            return Halt(tripped(self, call, verdict, "input"))
        return Reject(ErrorCode.TOOL_UNAVAILABLE, failed_text(self, call.name, verdict))


class OutputGuardrail(Guardrail):
    """An output guardrail: `check(call, result)` asked about an `ok` result
    (`check_output`, which the pipeline asks after the post-call hooks)."""

    stage: Stage = "output"

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        return ADMIT

    def check_output(self, call: ToolCall, result: ToolResult, now: float) -> Any:
        """The verdict on `result` (or an awaitable of it); a `Trip` is announced here."""
        verdict = self._check(call, result)
        if inspect.isawaitable(verdict):
            return self._announced(verdict, call)
        return self._announce(verdict, call)

    async def _announced(self, verdict: Awaitable[Any], call: ToolCall) -> Any:
        return self._announce(await verdict, call)

    def _announce(self, verdict: Any, call: ToolCall) -> Any:
        if type(verdict) is Trip:
            return Trip(tripped(self, call, verdict, "output"))
        return verdict


# How each stage calls its check.
_CALLED_AS: dict[str, tuple[str, ...]] = {"input": ("call",), "output": ("call", "result")}


def _check_signature(check: Callable[..., Any], name: str, stage: Stage) -> None:
    """Refuse (TypeError) a check that cannot be called as its stage calls it:
    `check(call)`, or `check(call, result)`. Read with `inspect.signature`, so
    a bound method, a `functools.partial` and an object's `__call__` count as
    called; defaults, `*args` and `**kwargs` are fine. A decorated check
    (`functools.wraps`) is read as its wrapper, the function called, not the
    function it wraps. A check whose signature cannot be read (some builtins)
    is taken on trust."""
    try:
        signature = inspect.signature(check, follow_wrapped=False)
    except Exception:  # (ValueError, TypeError; or a __signature__ of its own that raised)
        return
    names = _CALLED_AS[stage]
    try:
        signature.bind(*names)
    except TypeError as e:
        raise TypeError(
            f"guardrail {name!r}: an {stage} guardrail's check is called as "
            f"check({', '.join(names)}), which {_shown(check)}{signature} cannot take ({e})"
        ) from None


def _shown(check: Any) -> str:
    """How an error names a check: its qualified name (a partial's function's)."""
    if isinstance(check, functools.partial):
        return f"functools.partial({_shown(check.func)}, ...)"
    name = getattr(check, "__qualname__", None)
    return name if isinstance(name, str) else type(check).__qualname__


def tripped(guard: Guardrail, call: ToolCall, verdict: Trip, stage: Stage) -> str:
    """Announce `tool:guardrail-tripped`; return the halt's reason."""
    reason = verdict.reason or "its wire was tripped"
    text = reason if isinstance(reason, str) else str(reason)
    announce(
        GUARDRAIL_TRIPPED,
        lambda batch_id: GuardrailTripped(call.id, call.name, batch_id, 0, guard.name, stage, text),
    )
    return f"guardrail {guard.name}: {text}"


def refused_text(guard: Guardrail, tool: str, verdict: Refuse, stage: Stage) -> str:
    message = verdict.message
    why = message if isinstance(message, str) else "" if message is None else str(message)
    if stage == "input":
        head = f"Tool '{tool}' was not called: guardrail {guard.name} refused the call"
    else:
        head = f"Tool '{tool}' ran, but guardrail {guard.name} withheld its result"
    return f"{head}: {why}" if why else head


def failed_text(guard: Guardrail, tool: str, verdict: Any) -> str:
    return (
        f"Tool '{tool}' is unavailable: its guardrail {guard.name} returned "
        f"{type(verdict).__name__}, not Pass, Refuse, Replace, Trip or None"
    )


@overload
def guardrail(check: Callable[..., Any], /) -> Guardrail: ...


@overload
def guardrail(
    check: None = None, /, *, stage: Stage = "input", name: str | None = None
) -> Callable[[Callable[..., Any]], Guardrail]: ...


def guardrail(
    check: Callable[..., Any] | None = None,
    /,
    *,
    stage: Stage = "input",
    name: str | None = None,
) -> Guardrail | Callable[[Callable[..., Any]], Guardrail]:
    """A guardrail policy from `check`: `check(call)` for `stage="input"` (the
    default), `check(call, result)` for `stage="output"`, sync or async,
    returning a `Verdict` or None (pass). Named after the function unless
    `name` is given. Use it as a decorator, with or without options."""
    if stage not in ("input", "output"):
        raise ValueError(f"guardrail: stage must be 'input' or 'output', got {stage!r}")

    def make(fn: Callable[..., Any]) -> Guardrail:
        return OutputGuardrail(fn, name) if stage == "output" else Guardrail(fn, name)

    return make(check) if check is not None else make
