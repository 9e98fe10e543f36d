"""Composite tools: `sequence(name, [a, b, c])` runs its steps one after another.

Seed 003's SequentialFlow, on an executor. The model sees one tool, whose
parameters are the first step's; each step's output is the next one's input,
and the last step's output is the sequence's. On an executor each step is a
call of its own, run as a nested call of the sequence's: with its own
timeout, retries, hooks and events (step `i` of call `c` is call `c.i`, its
events carry `parent_call_id="c"`), and on the sequence's slot of
`max_parallel`, so a sequence takes one slot however many steps it has.

The sequence is an async tool: while a step runs it holds no thread, only a
task waiting for the step's result.

Approvals: a step cannot end its sequence `deferred` (a tool's call ends with
what the tool returns or raises), so a step that would wait for a person
could never be approved. Instead the sequence asks first: if a step given as
a `Tool` is guarded by `requires_approval`, the sequence gets a
`requires_approval()` of its own, so its call is `deferred` before any step
runs, with a request for the sequence's arguments; approved, it runs, and its
steps' `requires_approval` policies are satisfied by that approval (the
executor leaves them out of the steps' calls). A person approves the whole
run: these arguments, through these steps. It finds its executor through the call it
runs in (`pipeline.current_run`); called without one (`Tool.execute`), it runs
its steps' own `aexecute` instead, without deadlines or retries.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .. import _json
from .._errors import ArgumentError, ToolFailure
from ..models import ErrorCode, ToolCall, ToolOutput, ToolResult, idempotency_key_problem
from ..policies._protocol import check_policies
from ..retry import RetryPolicy
from ._context import ToolContext
from ._offer import check_scopes
from ._running import RunningCall, current_run
from ._tool import Tool

__all__ = ["SequenceTool", "sequence"]

# How a step's call is run: through the executor, or the tool's own aexecute;
# to its result and the output it hands the next step (its tool's, unscrubbed).
_CallStep = Callable[[Tool, ToolCall], Awaitable[tuple[ToolResult, Any]]]


class SequenceTool(Tool):
    """A tool that runs `steps` in order, each step's output the next one's input.

    Made by `toolbus.tools.sequence`; see there. `steps` holds the `Tool`
    objects and registered tools' names as given.
    """

    # It holds no thread while its steps run, and never leaves this process:
    # it runs its steps on the executor that runs it.
    backend = "loop"
    process_local = True

    def __init__(
        self,
        name: str,
        steps: Sequence[Tool | str],
        *,
        description: str | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        policies: Sequence[Any] = (),
        scopes: Sequence[str] = (),
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"sequence: name must be a non-empty string, got {name!r}")
        self.name = name
        self.steps: tuple[Tool | str, ...] = _check_steps(name, steps)
        first = self.steps[0]
        assert isinstance(first, Tool)  # checked: its schema is needed now
        self._first = first
        self.type = first.type
        # What the model is shown: the first step's parameters (without its
        # injected ones). Copied: exports may not share the step's dict.
        self.parameters = copy.deepcopy(first.schema) if first.type == "function" else None
        # A registered tool's name is only looked up when the sequence runs:
        # until then it might be anything, so it counts as mutating.
        tools = [s for s in self.steps if isinstance(s, Tool)]
        complete = len(tools) == len(self.steps)
        self.read_only = complete and all(t.read_only for t in tools)
        self.idempotent = complete and all(t.read_only or t.idempotent for t in tools)
        # What its steps given as tools need (a step named is held to the
        # caller's token when it runs, `toolbus.tools._offer.granted`).
        own = check_scopes(scopes, f"sequence {name!r}")
        self.scopes = tuple(dict.fromkeys((*own, *(s for t in tools for s in t.scopes))))
        self.timeout = timeout
        self.retry = retry
        self.description = description if description is not None else _describe(self.steps)
        self.policies = check_policies(policies, f"sequence {name!r}")
        needs = _needing_approval(tools)
        if needs and not _asks_always(self.policies):
            # Asked before any step runs; its approval covers the steps' own.
            from ..policies import requires_approval

            steps_text = ", ".join(f"'{n}'" for n in needs)
            verb = "needs" if len(needs) == 1 else "need"
            reason = f"it runs {steps_text}, which {verb} approval"
            self.policies = (*self.policies, requires_approval(reason=reason))
        self._setup()
        # The sequence's arguments are the first step's: mask what it masks.
        self.secret_paths = tuple(dict.fromkeys((*self.secret_paths, *first.secret_paths)))

    def validate(self, arguments: dict[str, Any]) -> Any:
        """Check the arguments as the first step will (so bad ones are rejected
        here, `INVALID_ARGUMENTS`), and hand them on as they came."""
        first = self._first
        if first.injected_required:
            # Filled in for the step's own call: missing here, as they should be.
            return arguments
        try:
            first.validate(arguments)
        except ArgumentError as e:
            text = str(e).replace(f"'{first.name}'", f"'{self.name}'", 1)
            raise ArgumentError(text) from None
        return arguments

    async def run(self, params: Any, ctx: ToolContext) -> Any:
        """Run the steps in order; the last step's output is the sequence's."""
        here = current_run.get()
        nested = here[0].nested if here is not None else None
        if here is None or nested is None or here[1].tool is not self:
            # Not run by an executor (`execute`, `aexecute` of the tool itself).
            return await self._chain(params, ctx.call_id or "direct", _direct, None)
        run = here[1]

        def call_step(tool: Tool, call: ToolCall) -> Awaitable[tuple[ToolResult, Any]]:
            return nested.call(tool, call, run)

        return await self._chain(params, run.call.id, call_step, nested.tool, run)

    async def _chain(
        self,
        arguments: dict[str, Any] | str,
        call_id: str,
        call_step: _CallStep,
        lookup: Callable[[str], Tool | None] | None,
        run: RunningCall | None = None,
    ) -> ToolOutput:
        key = run.origin.idempotency_key if run is not None else None
        steps: list[dict[str, Any]] = []
        last: ToolResult | None = None
        passed: Any = None
        for i, step in enumerate(self.steps):
            tool = step if isinstance(step, Tool) else _look_up(self.name, i, step, lookup, steps)
            if last is not None:
                arguments = self._input(i, tool, passed, steps)
            call = ToolCall(
                id=f"{call_id}.{i}",
                name=tool.name,
                arguments=arguments,
                idempotency_key=_step_key(key, i),
            )
            result, passed = await call_step(tool, call)
            steps.append(_summary(i, result))
            if not result.ok:
                code = result.error_code.value if result.error_code else result.status
                hint = ""
                if result.status == "deferred":
                    hint = (
                        f"; a step's approval cannot be asked for by the sequence as it runs: "
                        f"give '{self.name}' policies=[requires_approval()], whose approval "
                        "covers its steps"
                    )
                raise ToolFailure(
                    f"Step {i} ('{tool.name}') of '{self.name}' ended {result.status}: "
                    f"{result.error} ({code}){hint}",
                    # A crash stays a crash (retried only if safe); anything else
                    # is the sequence's error, the step's code in its metadata.
                    code=ErrorCode.TOOL_CRASHED
                    if result.error_code is ErrorCode.TOOL_CRASHED
                    else ErrorCode.TOOL_ERROR,
                    metadata={"failed_step": i, "failed_tool": tool.name, "steps": steps},
                )  # retry=False: the step had its own retries; a rerun would redo the others
            last = result
        assert last is not None  # a sequence has at least one step
        return ToolOutput(
            # As its last step's tool gave it: the sequence's own result is
            # scrubbed of every secret its steps knew (theirs are its own
            # now), and a sequence that is a step hands it on raw.
            content=passed,
            attachments=last.attachments,
            metadata={**last.metadata, "steps": steps},
        )

    def _input(
        self, i: int, tool: Tool, output: Any, steps: list[dict[str, Any]]
    ) -> dict[str, Any] | str:
        """Step `i`'s arguments from the previous step's output: a dict is its
        keyword arguments, anything else its one parameter's value."""
        if tool.type == "custom":  # one free-text parameter
            return output if isinstance(output, str) else _json.dumps(output).decode()
        if isinstance(output, dict):
            return output
        name, takes = _single_parameter(tool.schema)
        if name is None:
            raise ToolFailure(
                f"Step {i} ('{tool.name}') of '{self.name}' cannot take the output of step "
                f"{i - 1}: it is {_kind(output)}, not an object, and '{tool.name}' takes "
                f"{takes}; have step {i - 1} return a dict of '{tool.name}''s arguments",
                metadata={"failed_step": i, "failed_tool": tool.name, "steps": steps},
            )
        return {name: output}


def sequence(
    name: str,
    steps: Sequence[Tool | str],
    *,
    description: str | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    policies: Sequence[Any] = (),
    scopes: Sequence[str] = (),
) -> SequenceTool:
    """A tool that runs `steps` one after another; register it like any tool.

    `steps`: `Tool` objects (registered or not), or registered tools' names,
    looked up on the executor's registry when the sequence runs; the first
    must be a `Tool`: its parameters are the sequence's. Each step's output is
    the next one's input: a dict becomes its keyword arguments, anything else
    the value of its one parameter (its only required one, or its only one).
    The last step's output (and attachments) is the sequence's; its metadata
    lists every step's result (`"steps"`: call id, tool, status, attempts,
    duration, and the error of a failed one).

    On an executor, step `i` of call `c` runs as call `c.i`, a nested call of
    `c` with its own timeout, retries, hooks and events (`parent_call_id="c"`),
    on `c`'s slot of `max_parallel`. The first step that does not end `ok`
    ends the sequence: an `error` naming the step's index and tool and
    carrying its error (`metadata["failed_step"]`, `["failed_tool"]`),
    never retried as a whole.

    `policies`: the sequence's own, asked before any step runs (its steps
    keep theirs). A step given as a `Tool` guarded by `requires_approval`
    makes the sequence require approval itself (a `requires_approval()` is
    added unless `policies` has one without `when`); the approval of the
    sequence's call then covers its steps' (docs/extending.md, Composite tools).
    `scopes`: what a served caller's OAuth token must grant (`Tool.scopes`),
    with those of every step given as a `Tool`; a step given by name is held
    to the caller's token when it runs.

    Read-only only if every step is a read-only `Tool`; `idempotent` if every
    step is read-only or idempotent. `timeout` (default: the executor's)
    bounds the whole sequence, `retry` (default: the executor's) applies to a
    timed-out sequence; a failed step never retries the sequence.
    """
    return SequenceTool(
        name,
        steps,
        description=description,
        timeout=timeout,
        retry=retry,
        policies=policies,
        scopes=scopes,
    )


# -- helpers ---------------------------------------------------------------------------


def _check_steps(name: str, steps: Any) -> tuple[Tool | str, ...]:
    if isinstance(steps, str | Tool) or not isinstance(steps, Sequence):
        raise TypeError(f"sequence {name!r}: steps must be a list of tools or tool names")
    checked = tuple(steps)
    if not checked:
        raise ValueError(f"sequence {name!r} needs at least one step")
    for i, step in enumerate(checked):
        if not (isinstance(step, Tool) or (isinstance(step, str) and step)):
            raise TypeError(
                f"sequence {name!r}: step {i} must be a Tool or a registered tool's name, "
                f"got {type(step).__name__}"
            )
    if not isinstance(checked[0], Tool):
        raise TypeError(
            f"sequence {name!r}: the first step must be a Tool, not a name: its parameters "
            "are the sequence's and are needed now (later steps may be names)"
        )
    return checked


def _asks_always(policies: Sequence[Any]) -> bool:
    from ..policies import requires_approval

    return any(isinstance(p, requires_approval) and p.when is None for p in policies)


def _needing_approval(tools: list[Tool]) -> list[str]:
    """The names of the steps guarded by `requires_approval` (a sequence's
    own counts: a sequence of sequences asks once, at the top)."""
    from ..policies import requires_approval

    return list(
        dict.fromkeys(
            t.name for t in tools if any(isinstance(p, requires_approval) for p in t.policies)
        )
    )


def _describe(steps: tuple[Tool | str, ...]) -> str:
    names = [s.name if isinstance(s, Tool) else s for s in steps]
    return "Runs " + ", then ".join(names) + ": each step's output is the next one's input."


async def _direct(tool: Tool, call: ToolCall) -> tuple[ToolResult, Any]:
    """A step without an executor: the tool's own template method."""
    result = await tool.aexecute(call.arguments, call_id=call.id)
    return result, result.output


def _look_up(
    name: str,
    i: int,
    step: str,
    lookup: Callable[[str], Tool | None] | None,
    steps: list[dict[str, Any]],
) -> Tool:
    found = lookup(step) if lookup is not None else None
    if found is None:
        where = "registered" if lookup is not None else "known without an executor"
        raise ToolFailure(
            f"Step {i} ('{step}') of '{name}': no tool of that name is {where} "
            f"({ErrorCode.TOOL_NOT_FOUND.value})",
            metadata={"failed_step": i, "failed_tool": step, "steps": steps},
        )
    return found


def _step_key(key: str | None, i: int) -> str | None:
    """Step `i`'s idempotency key from the sequence call's (None: derived as
    for any call, from the step's own id): the same sequence call, the same
    steps, so a journal answers a step that already ended ok."""
    if key is None:
        return None
    mine = f"{key}.{i}"
    if idempotency_key_problem(mine) is None:
        return mine
    return hashlib.sha256(mine.encode("utf-8", "surrogatepass")).hexdigest()  # too long


def _summary(i: int, result: ToolResult) -> dict[str, Any]:
    """A step's result as the sequence's metadata lists it (no output: the
    outputs went on to the next step, and may be large)."""
    summary: dict[str, Any] = {
        "index": i,
        "call_id": result.call_id,
        "tool": result.name,
        "status": result.status,
        "attempts": result.attempts,
        "duration": result.duration,
    }
    if not result.ok:
        summary["error"] = result.error
        summary["error_code"] = result.error_code.value if result.error_code else None
    return summary


def _single_parameter(schema: dict[str, Any]) -> tuple[str | None, str]:
    """The one parameter a non-dict value goes to (its only required one, or
    its only one), or None and what the tool takes instead."""
    properties = schema.get("properties")
    names = list(properties) if isinstance(properties, dict) else []
    listed = schema.get("required")
    required = [n for n in listed if n in names] if isinstance(listed, list) else []
    if len(required) == 1:
        return required[0], ""
    if not required and len(names) == 1:
        return names[0], ""
    if not names:
        return None, "no parameters"
    if required:
        return None, f"{len(required)} required parameters ({', '.join(required)})"
    return None, f"{len(names)} parameters, none of them required"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"
