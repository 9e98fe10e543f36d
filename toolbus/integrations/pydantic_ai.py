"""pydantic-ai, both ways (needs the `pydantic-ai` extra: `pip install 'toolbus[pydantic-ai]'`).

toolbus's tools in an agent, every call run by an `Executor`:

    from toolbus.integrations.pydantic_ai import ToolbusToolset

    agent = Agent(model, toolsets=[ToolbusToolset(registry, executor)])

pydantic-ai's tools (or plain functions, described the way pydantic-ai
describes them) in a registry:

    registry.add_pydantic_ai(get_weather)          # or a pydantic_ai.Tool

How results reach the model (see docs/integrations.md):

- `ok`: the tool's output as the tool's return value (a `ToolReturn` carrying
  the result's metadata, and its attachments listed in the text, when it has
  any); an output longer than `max_length` as JSON text goes as the text
  every other path gives the model (`format_result_for_context`: cut, with a
  note), and a lone surrogate in it as U+FFFD;
- `INVALID_ARGUMENTS` and `TOOL_NOT_FOUND` (the call can be fixed): a
  `ModelRetry`, so pydantic-ai sends its retry prompt and counts the retry
  against the tool's `max_retries` (past it, pydantic-ai ends the run with
  `UnexpectedModelBehavior`, as for its own tools); its text cut alike;
- anything else (`error`, `timeout`, `cancelled`, `rejected` for another
  reason): a `ToolFailed` with the text toolbus gives every model,
  `Error: <what> (<ERROR_CODE>)`, which pydantic-ai hands back as a failed tool
  result; it does not spend the retry budget (toolbus has already retried
  what its policy retries).

Arguments that are not a JSON object never reach toolbus: pydantic-ai asks the
model to fix them itself (a retry prompt), before any tool is called.

One piece (so past 400 lines): both directions of the integration, imported
(with pydantic-ai) only by those who use it; they share pydantic-ai's schema
and run context.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Unpack

import orjson
from pydantic import ValidationError
from pydantic_ai import ModelRetry, RunContext
from pydantic_ai import Tool as PAITool
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ToolReturn
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from .. import _json
from .._keywords import refuse_unknown
from .._text import encodable, text_of
from ..agent_runs import MAX_LENGTH, current_agent_run
from ..executor import Executor
from ..formatting import _cut, check_max_length
from ..models import ErrorCode, ToolCall, ToolOutput, ToolResult
from ..providers._common import DEFAULT_MAX_LENGTH, result_text
from ..tools import ArgumentError, StepContext, Tool, ToolContext, ToolError, ToolRegistry
from ..tools._injected import injected_parameters
from ..tools._names import check_tool_name
from ..tools._offer import Offer, offering
from ..tools._tool import STANDARD_INVOKES, format_validation_error
from ..tools._tool_options import PYDANTIC_AI_KEYWORDS, PydanticAIOptions, adopt

log = logging.getLogger("toolbus.integrations")

__all__ = ["PydanticAITool", "ToolbusToolset", "from_pydantic_ai", "tool_definition"]

# The model's arguments must be a JSON object; toolbus validates the rest, so
# that its errors (and its events) are the ones the model and observers see.
_OBJECT = SchemaValidator(
    core_schema.dict_schema(
        keys_schema=core_schema.str_schema(), values_schema=core_schema.any_schema()
    )
)

# Results the model can fix by calling again: they become pydantic-ai's retry prompt.
_RETRY_CODES = frozenset({ErrorCode.INVALID_ARGUMENTS, ErrorCode.TOOL_NOT_FOUND})


class ToolbusToolset(AbstractToolset[Any]):
    """An `AbstractToolset` of a registry's tools, each call run by `executor.aexecute`.

    Lists every function tool of `registry` (custom, free-text tools have no
    JSON schema and are left out) with its name, description and JSON schema as
    toolbus has them. Mutating tools are `sequential=True`, so pydantic-ai runs
    them as barriers, as toolbus would: calls before one finish first, calls
    after it wait. Read-only tools run in parallel, within the executor's
    `max_parallel` and each tool's `max_concurrency`. At each run step it
    lists what `executor.offered(StepContext(run, run_step, ctx))` offers
    (`Tool.is_enabled`, the executor's `prepare`; then an imported pydantic-ai
    tool's own `prepare`), and holds that step's calls to it; the calls count
    in the agent run of the context, else pydantic-ai's `run_id`. Each `ToolDefinition`
    carries `metadata={"toolbus": {"read_only": ...}}` (for pydantic-ai's
    `filtered`) and no `timeout`: toolbus's governs.

    `registry` must be the executor's registry (the tools listed are the tools
    it runs). `max_retries` is each tool's retry budget for calls the model can
    fix; None takes the agent's. The listing follows the registry: tools
    registered or removed later appear or disappear at the next run step.

    A result reaches pydantic-ai as a value (the output itself) where it fits
    in `max_length` characters of JSON; one longer, as the text every other
    path gives the model, cut after `max_length` characters with a note, as
    are the texts of failures and retry prompts (docs/integrations.md).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        executor: Executor,
        *,
        id: str | None = None,
        max_retries: int | None = None,
        max_length: int = DEFAULT_MAX_LENGTH,
    ) -> None:
        if executor.registry is not registry:
            raise ValueError(
                "ToolbusToolset: registry must be the executor's registry "
                "(the executor runs the tools of its own registry)"
            )
        if max_retries is not None and (
            isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0
        ):
            raise ValueError(
                f"ToolbusToolset: max_retries must be an integer >= 0, got {max_retries!r}"
            )
        self.registry = registry
        self.max_length = check_max_length(max_length, "ToolbusToolset")
        self.executor = executor
        self.max_retries = max_retries
        self._id = id
        # One ToolsetTool per (tool, retry budget), kept while the tool is registered.
        self._listed: dict[tuple[Tool, int], ToolsetTool[Any]] = {}
        # What each recent step was offered, by (run id, step): its calls are held to it.
        self._offers: dict[tuple[str | None, int], Offer] = {}

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        budget = self.max_retries if self.max_retries is not None else ctx.max_retries
        listed = self._listed
        current: dict[tuple[Tool, int], ToolsetTool[Any]] = {}
        tools: dict[str, ToolsetTool[Any]] = {}
        step = _step(ctx)
        for t in self.executor.offered(step):
            if t.type != "function":
                continue
            tool_def = tool_definition(t)
            prepare = getattr(t, "pydantic_ai_prepare", None)
            if prepare is not None:  # a pydantic-ai tool's own, given this run's context
                try:
                    prepared = prepare(ctx, tool_def)
                    if inspect.isawaitable(prepared):
                        prepared = await prepared
                except Exception as e:  # a broken guard fails closed: left out, logged
                    log.warning("tool %r: its prepare raised %s: not offered", t.name, e)
                    continue
                if not isinstance(prepared, ToolDefinition):
                    continue  # not offered at this step (None), or not a definition
                # Its calls come back by name: toolbus knows it by its own.
                tool_def = prepared if prepared.name == t.name else replace(prepared, name=t.name)
            key = (t, budget)
            entry = listed.get(key) if t is self.registry.get(t.name) and prepare is None else None
            if entry is None:
                entry = ToolsetTool(
                    toolset=self, tool_def=tool_def, max_retries=budget, args_validator=_OBJECT
                )
            current[key] = entry
            tools[tool_def.name] = entry
        self._listed = current
        self._offers[(ctx.run_id, ctx.run_step)] = Offer(step, frozenset(tools))
        while len(self._offers) > _OFFERS_KEPT:
            self._offers.pop(next(iter(self._offers)))
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        call_id = ctx.tool_call_id
        # Built without validation: a str name and id, and the dict args_validator made.
        call = (
            ToolCall.model_construct(id=call_id, name=name, arguments=tool_args)
            if isinstance(call_id, str) and call_id
            else ToolCall.model_construct(name=name, arguments=tool_args)
        )
        # Held to what this step was offered (and counted in this agent run).
        offer = self._offers.get((ctx.run_id, ctx.run_step))
        if offer is None:  # (a step this toolset did not list: what it offers now)
            step = _step(ctx)
            offer = Offer(step, frozenset(t.name for t in self.executor.offered(step)))
        shown = offering.set(offer)
        try:
            result = await self.executor.aexecute(call, agent_run=_run_of(ctx))
        finally:
            offering.reset(shown)
        if result.status == "ok":
            if not result.attachments and not result.metadata:
                return _returned(result, self.max_length)
            return _tool_return(result, self.max_length)
        if result.error_code in _RETRY_CODES:
            text = result.error or "the call cannot be run as given"
            raise ModelRetry(text_of(_cut(text, self.max_length)))
        raise ToolFailed(result_text(result, self.max_length))


# Offers kept for the steps whose calls may still come (the latest ones).
_OFFERS_KEPT = 256


def _in_pydantic_ai(step: StepContext) -> bool:
    """`is_enabled` of a tool with a pydantic-ai `prepare`: where it can be asked."""
    return isinstance(step.context, RunContext)


def _run_of(ctx: RunContext[Any]) -> str | None:
    """The agent run of `ctx`'s calls: the context's own, else pydantic-ai's run id."""
    run = current_agent_run()
    if run is not None:
        return run
    rid = getattr(ctx, "run_id", None)
    return rid[:MAX_LENGTH] if isinstance(rid, str) and rid else None


def _step(ctx: RunContext[Any]) -> StepContext:
    """The step of a pydantic-ai run as toolbus's `is_enabled` and `prepare` see it."""
    return StepContext(agent_run=_run_of(ctx), step=ctx.run_step, context=ctx)


def tool_definition(tool: Tool) -> ToolDefinition:
    """The `ToolDefinition` pydantic-ai shows the model for a toolbus function tool."""
    return ToolDefinition(
        name=tool.name,
        description=tool.description or None,
        parameters_json_schema=copy.deepcopy(tool.schema),
        sequential=not tool.read_only,
        metadata={"toolbus": {"read_only": tool.read_only}},
    )


def _returned(result: ToolResult, max_length: int) -> Any:
    """What pydantic-ai is handed for an `ok` result: its output, as a value
    pydantic-ai writes into the model's request itself, where that is at most
    `max_length` characters of JSON; else the model's text of it, cut as on
    every other path. A lone surrogate, which no request can carry (pydantic
    refuses to write it), as U+FFFD."""
    output = result.output
    if isinstance(output, str):  # (most tools; a text is its own JSON, near enough)
        return text_of(output) if len(output) <= max_length else result_text(result, max_length)
    if output is None or isinstance(output, float):
        return output  # at most 24 characters
    if isinstance(output, int) and output.bit_length() <= 64:  # (bools too)
        return output  # at most 20
    try:
        # Bytes, at least as many as the characters: a value under the limit is.
        size = len(orjson.dumps(output, option=orjson.OPT_NON_STR_KEYS))
    except TypeError:  # an integer beyond 64 bits, a lone surrogate: rare
        return _rare(result, max_length)
    return output if size <= max_length else result_text(result, max_length)


def _rare(result: ToolResult, max_length: int) -> Any:
    """`_returned` for an output orjson alone cannot write."""
    output = result.output
    option = orjson.OPT_NON_STR_KEYS
    try:
        size = len(_json.dumps(output, default=str, option=option))
    except TypeError as e:
        if _json.SURROGATES not in str(e):
            return result_text(result, max_length)
        output = encodable(output, str)
        size = len(_json.dumps(output, default=str, option=option))
    return output if size <= max_length else result_text(result, max_length)


def _tool_return(result: ToolResult, max_length: int) -> ToolReturn[Any]:
    # With attachments, the model's text of it (they are listed there).
    value = result_text(result, max_length) if result.attachments else _returned(result, max_length)
    return ToolReturn(return_value=value, metadata=_metadata(result.metadata) or None)


def _metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """`metadata` as pydantic-ai can write it into the run's messages: a lone
    surrogate (a path decoded with `surrogateescape`) as the output's is
    (`encodable`), checked by orjson first so other metadata pays nothing."""
    try:
        orjson.dumps(metadata, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as e:
        if _json.SURROGATES in str(e):
            written: dict[str, Any] = encodable(metadata, str)
            return written
    return metadata


# -- pydantic-ai's tools in a registry ------------------------------------------------


# Where a pydantic-ai tool's own name cannot name a toolbus tool: what to do.
_PASS_NAME = " (it is the pydantic-ai tool's name: pass name=)"


class PydanticAITool(Tool):
    """A pydantic-ai tool run by toolbus.

    Its name, description and JSON schema are pydantic-ai's (the docstring's
    parameter descriptions included); its arguments are validated by
    pydantic-ai's own validator (the same coercions as in an agent; a tool made
    with `Tool.from_schema`, which has none, is validated against its JSON
    schema). It is mutating unless `read_only=True`; its `timeout` is
    pydantic-ai's unless given. A `ModelRetry` it raises becomes a
    `ToolError` with its message (not retried by toolbus: the same arguments
    would fail again), a `ToolFailed` too; a `ToolReturn`'s value and metadata
    become the output (its extra `content` for the model is dropped). Its
    options (`PydanticAIOptions`): `name`, `description`, `read_only`,
    `timeout`, `retry`, `max_concurrency`, `groups`, `idempotent`.

    Its `prepare` function (it takes a `RunContext`) is asked where toolbus
    runs inside pydantic-ai (`ToolbusToolset`, at each step; one that raises
    leaves the tool out). Elsewhere it cannot be asked, so the tool is not
    offered there (`TOOL_NOT_OFFERED`), unless `is_enabled=` says otherwise.

    Refused with a `TypeError` saying why: a tool whose first parameter is a
    `RunContext` (there is no pydantic-ai run to take it from), one with an
    `args_validator` function (it takes a `RunContext`), and one that
    `requires_approval` (toolbus would run it unapproved).
    """

    def __init__(
        self, source: PAITool[Any] | Callable[..., Any], **options: Unpack[PydanticAIOptions]
    ) -> None:
        refuse_unknown(options, PYDANTIC_AI_KEYWORDS, "PydanticAITool.__init__")
        pa = source if isinstance(source, PAITool) else _as_pydantic_ai_tool(source)
        _check_supported(pa)
        schema = pa.function_schema
        self.source = pa
        self.name = options.get("name") or check_tool_name(pa.name, hint=_PASS_NAME)
        description = options.get("description")
        self.description = description if description is not None else (pa.description or "")
        self.parameters = copy.deepcopy(schema.json_schema)
        adopt(self, options)
        if self.timeout is None:
            self.timeout = pa.timeout
        # Asked by `ToolbusToolset` at each step (with pydantic-ai's RunContext);
        # elsewhere it cannot be, so the tool is offered only there by default.
        self.pydantic_ai_prepare = pa.prepare
        if pa.prepare is not None and "is_enabled" not in options:
            self.is_enabled = _in_pydantic_ai
        self._function = schema.function
        self._validator = schema.validator
        self._positional = tuple(schema.positional_fields)
        self._var_positional = schema.var_positional_field
        self._async = schema.is_async
        # `Tool.from_schema` tools come with a validator that accepts anything.
        self._by_schema = _accepts_anything(schema.validator)
        # toolbus's `Annotated[..., Injected]` parameters: left out of the
        # schema toolbus exports, refused from the model, supplied by
        # `Executor(inject=...)`, validated by pydantic-ai with the rest.
        self.injected = injected_parameters(schema.function)
        super().__init__()

    def _target(self) -> Callable[..., Any]:
        return self._arun if self._async else self._run

    def _target_wants_context(self) -> bool:
        return False

    def validate(self, arguments: dict[str, Any]) -> Any:
        if self._by_schema:
            return super().validate(arguments)
        try:
            return self._validator.validate_python(arguments)
        except ValidationError as e:
            raise ArgumentError(format_validation_error(self.name, e)) from None

    def invoke(self, params: Any, ctx: ToolContext) -> Any:
        return self._arun(params) if self._async else self._run(params)

    def _call(self, params: dict[str, Any]) -> Any:
        kwargs = dict(params)
        args = [kwargs.pop(n) for n in self._positional]
        if self._var_positional is not None:
            args.extend(kwargs.pop(self._var_positional))
        return self._function(*args, **kwargs)

    def _run(self, params: dict[str, Any]) -> Any:
        try:
            return _output(self._call(params))
        except (ModelRetry, ToolFailed) as e:
            raise ToolError(e.message, retryable=False) from None

    async def _arun(self, params: dict[str, Any]) -> Any:
        try:
            value = self._call(params)
            if inspect.isawaitable(value):
                value = await value
            return _output(value)
        except (ModelRetry, ToolFailed) as e:
            raise ToolError(e.message, retryable=False) from None


STANDARD_INVOKES.add(PydanticAITool.invoke)


# `ToolRegistry.add_pydantic_ai` makes its tools with this.
from_pydantic_ai = PydanticAITool


def _as_pydantic_ai_tool(function: Callable[..., Any]) -> PAITool[Any]:
    if not callable(function):
        raise TypeError(
            f"add_pydantic_ai takes a pydantic_ai.Tool or a function, got {type(function).__name__}"
        )
    return PAITool(function)


def _check_supported(pa: PAITool[Any]) -> None:
    what = f"pydantic-ai tool {pa.name!r}"
    if pa.takes_ctx:
        raise TypeError(
            f"{what} takes a RunContext as its first parameter: toolbus runs it outside any "
            "pydantic-ai run, so there is no RunContext to give it. Drop the parameter "
            "(a toolbus tool may take a ToolContext instead), or keep the tool in the agent"
        )
    if getattr(pa, "args_validator", None) is not None:
        raise TypeError(
            f"{what} has an args_validator function, which takes a RunContext: toolbus has "
            "none to give it. Remove it, or keep the tool in the agent"
        )
    if pa.requires_approval:
        raise TypeError(
            f"{what} requires approval, which toolbus cannot ask for: it would run unapproved. "
            "Keep it in the agent (with its deferred-tool approval flow)"
        )


def _accepts_anything(validator: Any) -> bool:
    try:
        validator.validate_python(_Probe())
    except ValidationError:
        return False
    except Exception:  # a validator of another kind: treat as a real one
        return False
    return True


class _Probe:
    """A value no real arguments validator accepts."""


def _output(value: Any) -> Any:
    if isinstance(value, ToolReturn):
        metadata = value.metadata if isinstance(value.metadata, dict) else {}
        if value.metadata is not None and not metadata:
            metadata = {"metadata": value.metadata}
        return ToolOutput(content=value.return_value, metadata=metadata)
    return value
