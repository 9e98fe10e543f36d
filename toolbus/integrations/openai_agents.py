"""The OpenAI Agents SDK, both ways (needs the `openai-agents` extra:
`pip install 'toolbus[openai-agents]'`).

toolbus's tools in an agent, every call run by an `Executor`:

    from toolbus.integrations.openai_agents import function_tools

    agent = Agent(name="assistant", tools=function_tools(registry, executor))

The SDK's function tools in a registry:

    registry.add_openai_agents(get_weather)        # a FunctionTool (@function_tool)

The SDK's Runner invokes each tool call of a turn on its own, concurrently
(`asyncio` tasks): toolbus sees single calls, never the turn as a batch. So
`max_parallel`, each tool's `max_concurrency`, timeouts, retries, masking and
events hold, but barrier order does not: a mutating call may overlap the calls
the model emitted around it. To keep a turn's calls in order, run them one at
a time with `RunConfig(tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1))`.

One piece: both directions of the integration, imported (with the SDK) only
by those who use it; they share the SDK's schema and context handling.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import inspect
import logging
import threading
import typing
import weakref
from typing import Any, Unpack

from agents import FunctionTool, RunContextWrapper, UserError
from agents.strict_schema import ensure_strict_json_schema
from agents.tool_context import ToolContext as AgentsToolContext
from pydantic import BaseModel

from .. import _json
from .._keywords import refuse_unknown
from .._text import text_of
from ..agent_runs import current_agent_run
from ..executor import Executor
from ..formatting import check_max_length, output_text
from ..models import ToolCall
from ..providers._common import (
    DEFAULT_MAX_LENGTH,
    StrictSchemaError,
    result_text,
    strict_schema,
    without_strict_nulls,
)
from ..tools import StepContext, Tool, ToolContext, ToolRegistry, parse_json_arguments
from ..tools._injected import injected_parameters
from ..tools._names import check_provider_name, check_tool_name
from ..tools._offer import Offer, offering, step_in
from ..tools._tool_options import OPENAI_AGENTS_KEYWORDS, OpenAIAgentsOptions, adopt

__all__ = ["OpenAIAgentsTool", "from_openai_agents", "function_tool_for", "function_tools"]

log = logging.getLogger("toolbus.integrations")


# -- toolbus's tools for the SDK ----------------------------------------------------------


class _Invoke:
    """A `FunctionTool.on_invoke_tool`: the call goes through `executor.aexecute`,
    and every result comes back as text (errors as `Error: ... (CODE)`), never
    as an exception, so no tool failure ends the run."""

    __slots__ = ("executor", "max_length", "name", "schema")

    def __init__(
        self, executor: Executor, name: str, schema: dict[str, Any] | None, max_length: int
    ) -> None:
        self.executor = executor
        self.name = name
        # The tool's own schema when the strict one made optional fields nullable:
        # the nulls the model then sends for "not given" are removed against it.
        self.schema = schema
        self.max_length = max_length

    async def __call__(self, ctx: AgentsToolContext[Any], input: str) -> str:
        arguments: dict[str, Any] | str = input
        if self.schema is not None:
            try:
                parsed = parse_json_arguments(input)
                arguments = without_strict_nulls(parsed, self.schema, self.schema)
            except (ValueError, RecursionError):
                pass  # handed on as it is: toolbus rejects it, with the reason
        fields: dict[str, Any] = {"name": self.name, "arguments": arguments}
        call_id = getattr(ctx, "tool_call_id", None)
        if isinstance(call_id, str) and call_id:
            fields["id"] = call_id
        # Validated where it is text or a dict: pydantic's core checks it
        # faster than `model_construct`'s Python sets it (1.4 against 2.4 µs).
        # Anything else (never from the SDK's Runner) is handed on as it is,
        # for toolbus to answer.
        call = (
            ToolCall(**fields)
            if isinstance(arguments, str | dict)
            else ToolCall.model_construct(**fields)
        )
        # Held to what the executor offers at this step of the SDK's run.
        shown = offering.set(_offer(self.executor, ctx))
        try:
            result = await self.executor.aexecute(call)
        finally:
            offering.reset(shown)
        if result.status == "ok" and not result.attachments:
            # `result_text`'s text, built without its lines (the usual result):
            # the output whole, a lone surrogate as U+FFFD (`text_of`, as there).
            output = result.output
            text = output if isinstance(output, str) else output_text(output)
            if text and len(text) <= self.max_length:
                return text_of(text)
        return result_text(result, self.max_length)


def function_tools(
    registry: ToolRegistry,
    executor: Executor,
    *,
    strict: bool = True,
    max_length: int = DEFAULT_MAX_LENGTH,
) -> list[FunctionTool]:
    """One `agents.FunctionTool` per function tool of `registry` (custom, free-text
    tools are left out), each call run by `executor.aexecute`.

    Every result reaches the model as text: a success as its output (strings
    as they are, anything else as JSON, cut after `max_length` characters with
    a note), a failure as `Error: <what went wrong> (<ERROR_CODE>)`; nothing is
    raised into the Runner. The SDK's own `timeout_seconds` is left unset, so
    the tool's (or the executor's) timeout governs, and a toolbus timeout comes
    back as an error text like any failure.

    With `strict=True` (the SDK's default), schemas are strict: a schema the
    SDK would send unchanged is sent as it is; otherwise toolbus's
    `strict_schema` makes every optional field required and nullable (null
    meaning "not given": those nulls are removed before the call reaches
    toolbus, so defaults apply). A schema strict mode cannot express (free-form
    keys: `dict[str, ...]`, `additionalProperties`) is sent non-strict for that
    tool, and logged.

    Checked here, before any tool runs: `max_length` (an integer >= 1), and
    each tool's name, which must be one OpenAI takes (1 to 64 ASCII letters,
    digits, `_` or `-`; toolbus also allows `.` and up to 128): ValueError
    naming the tool otherwise, as `to_openai` raises.
    """
    if executor.registry is not registry:
        raise ValueError(
            "function_tools: registry must be the executor's registry "
            "(the executor runs the tools of its own registry)"
        )
    check_max_length(max_length, "function_tools")
    return [
        function_tool_for(t, executor, strict=strict, max_length=max_length)
        for t in registry.list()
        if t.type == "function"
    ]


def _step(ctx: RunContextWrapper[Any]) -> StepContext:
    """A step of the SDK's run as toolbus's `is_enabled` and `prepare` see it:
    its context is the SDK's `RunContextWrapper` (your context in `.context`)."""
    return step_in(current_agent_run(), ctx)


def _offer(executor: Executor, ctx: RunContextWrapper[Any]) -> Offer:
    step = _step(ctx)
    return Offer(step, frozenset([t.name for t in executor.offered(step)]))


class _Enabled:
    """A `FunctionTool.is_enabled` for a toolbus tool: whether the executor
    offers it at this step (`Tool.is_enabled`, then the executor's `prepare`)."""

    __slots__ = ("executor", "name")

    def __init__(self, executor: Executor, name: str) -> None:
        self.executor = executor
        self.name = name

    def __call__(self, ctx: RunContextWrapper[Any], agent: Any) -> bool:
        return self.name in (_offer(self.executor, ctx).names or ())


def function_tool_for(
    tool: Tool, executor: Executor, *, strict: bool = True, max_length: int = DEFAULT_MAX_LENGTH
) -> FunctionTool:
    """The `agents.FunctionTool` for one toolbus function tool (see `function_tools`).

    Always enabled when the tool is and the executor has no `prepare`;
    otherwise its `is_enabled` asks the executor at each step whether it
    offers the tool (`StepContext.context` is the SDK's `RunContextWrapper`).
    `max_length` and the tool's name are checked as `function_tools` says."""
    max_length = check_max_length(max_length, "function_tool_for")
    check_provider_name(tool.name, "OpenAI", hint=_RENAME)
    schema = tool.schema
    if tool.is_enabled is True and executor._prepare is None:
        enabled: Any = True
    else:
        enabled = _Enabled(executor, tool.name)
    if strict:
        made = _strict(tool.name, schema)
        if made is not None:
            params, nulls = made
            invoke = _Invoke(executor, tool.name, schema if nulls else None, max_length)
            try:
                return FunctionTool(
                    name=tool.name,
                    description=tool.description,
                    params_json_schema=params,
                    on_invoke_tool=invoke,
                    strict_json_schema=True,
                    is_enabled=enabled,
                )
            except UserError as e:
                log.warning("tool %r is offered non-strict: %s", tool.name, e)
    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=copy.deepcopy(schema),
        on_invoke_tool=_Invoke(executor, tool.name, None, max_length),
        strict_json_schema=False,
        is_enabled=enabled,
    )


# What a tool whose name the Agents SDK's models refuse may do instead.
_RENAME = "Register it under another name (name=)"


def _strict(name: str, schema: dict[str, Any]) -> tuple[dict[str, Any], bool] | None:
    """(the strict schema, whether it made optional fields nullable); None if it cannot be."""
    try:
        if ensure_strict_json_schema(copy.deepcopy(schema)) == schema:
            return copy.deepcopy(schema), False
    except UserError:
        pass
    try:
        return strict_schema(schema), _has_optional(schema)
    except StrictSchemaError as e:
        log.warning("tool %r is offered non-strict: %s", name, e)
        return None


def _has_optional(node: Any) -> bool:
    """Whether an object anywhere in `node` has a property it does not require
    (strict mode makes those nullable, and the model sends null for them)."""
    if isinstance(node, list):
        return any(_has_optional(n) for n in node)
    if not isinstance(node, dict):
        return False
    properties = node.get("properties")
    if isinstance(properties, dict) and set(properties) - set(node.get("required") or ()):
        return True
    return any(_has_optional(v) for v in node.values() if isinstance(v, dict | list))


# -- the SDK's tools in a registry ------------------------------------------------------

_UNSET: Any = object()


class OpenAIAgentsTool(Tool):
    """An Agents SDK `FunctionTool` run by toolbus.

    Its name, description and JSON schema are the SDK's, as it sends them to
    the model; toolbus validates the arguments against that schema, then calls
    the tool's own `on_invoke_tool` (the SDK's validation, defaults and
    function) with a `ToolContext` carrying the call's id. It is async when its
    function is; a sync function makes it a sync tool, run on toolbus's worker
    threads (the SDK's invoker runs on a private event loop in that thread,
    whose "thread pool" is the thread itself), within the executor's thread
    budget. It is mutating unless `read_only=True`; its `timeout` is the SDK's
    `timeout_seconds` unless given. Its options (`OpenAIAgentsOptions`): `name`,
    `description`, `read_only`, `timeout`, `retry`, `max_concurrency`, `groups`,
    `idempotent`, `context`.

    Failures reach toolbus as exceptions, so its error codes, retries and
    scrubbing apply: the tool is invoked through a copy whose
    `failure_error_function` is off (the SDK would otherwise turn every error
    into a successful text). A returned value becomes the output: strings,
    JSON-able values and pydantic models (`ToolOutputText`, ...) as they are,
    anything else as `str(value)`, as the SDK would send it.

    `context` is the run context (`ToolContext.context`) the tool's function
    receives if it takes one; a tool whose function takes a `RunContextWrapper`
    or `ToolContext` is refused without it. Refused too, with a `TypeError`
    saying why: tools that need approval (toolbus would run them unapproved),
    tools with input or output guardrails (the Runner runs those, not the
    tool), and tools with an async `is_enabled`. A sync callable `is_enabled`
    becomes the tool's (`Tool.is_enabled`), asked with a `RunContextWrapper`
    of the step's context (the SDK's own when toolbus runs inside its Runner)
    and no agent.
    """

    def __init__(self, function_tool: FunctionTool, **options: Unpack[OpenAIAgentsOptions]) -> None:
        refuse_unknown(options, OPENAI_AGENTS_KEYWORDS, "OpenAIAgentsTool.__init__")
        context = options.get("context", _UNSET)
        if not isinstance(function_tool, FunctionTool):
            raise TypeError(
                "add_openai_agents takes an agents.FunctionTool, "
                f"got {type(function_tool).__name__}"
            )
        _check_supported(function_tool, context is not _UNSET)
        self.source = function_tool
        self.name = options.get("name") or check_tool_name(
            function_tool.name, hint=" (it is the Agents SDK tool's name: pass name=)"
        )
        description = options.get("description")
        self.description = description if description is not None else function_tool.description
        self.parameters = copy.deepcopy(function_tool.params_json_schema)
        adopt(self, options)
        if "is_enabled" not in options and function_tool.is_enabled is not True:
            given = function_tool.is_enabled
            self.is_enabled = _SDKEnabled(given, context) if callable(given) else bool(given)
        if self.timeout is None:
            self.timeout = function_tool.timeout_seconds
        self._context = None if context is _UNSET else context
        self._invoke = _raising(function_tool).on_invoke_tool
        # A sync function: the SDK's invoker would hand it to its event loop's
        # default thread pool; toolbus runs it on its own worker threads.
        self._sync = _is_sync(function_tool)
        # toolbus's `Annotated[..., Injected]` parameters of its function: left
        # out of the schema toolbus exports, refused from the model, supplied
        # by `Executor(inject=...)` (as JSON: the SDK's invoker takes JSON text).
        self.injected = _injected_parameters(function_tool)
        super().__init__()

    def _target(self) -> Any:
        return self.run_sync if self._sync else self.run

    def _target_wants_context(self) -> bool:
        return True

    def invoke(self, params: Any, ctx: ToolContext) -> Any:
        return self.run_sync(params, ctx) if self._sync else self.run(params, ctx)

    def _sdk_call(self, params: dict[str, Any], ctx: ToolContext) -> tuple[Any, str]:
        text = _json.dumps(params).decode()
        tool_ctx = AgentsToolContext(
            self._context,
            tool_name=self.source.name,
            tool_call_id=ctx.call_id,
            tool_arguments=text,
        )
        return tool_ctx, text

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> Any:
        tool_ctx, text = self._sdk_call(params, ctx)
        return _output(await self._invoke(tool_ctx, text))

    def run_sync(self, params: dict[str, Any], ctx: ToolContext) -> Any:
        """A sync function tool, run in the calling thread (a toolbus worker):
        the SDK's own invoker (validation, defaults, output checks) on a
        private event loop whose thread pool is this very thread."""
        tool_ctx, text = self._sdk_call(params, ctx)
        return _output(_run_here(self._invoke(tool_ctx, text)))


# `ToolRegistry.add_openai_agents` makes its tools with this.
from_openai_agents = OpenAIAgentsTool


class _SDKEnabled:
    """An Agents SDK tool's callable `is_enabled` as toolbus asks it: with the
    SDK's `RunContextWrapper` when the step comes from an SDK run (toolbus's
    tools in an agent), else one around the step's context (or the `context`
    the tool was added with). The agent, which toolbus does not have, is None.
    An answer that is not a bool (an awaitable included) does not enable it."""

    __slots__ = ("context", "fn")

    def __init__(self, fn: Any, context: Any) -> None:
        self.fn = fn
        self.context = None if context is _UNSET else context

    def __call__(self, step: StepContext) -> bool:
        given = step.context
        wrapper = (
            given
            if isinstance(given, RunContextWrapper)
            else RunContextWrapper(context=given if given is not None else self.context)
        )
        answer = self.fn(wrapper, None)
        if inspect.isawaitable(answer):
            close = getattr(answer, "close", None)
            if callable(close):
                close()
            return False
        return answer is True


def _check_supported(ft: FunctionTool, has_context: bool) -> None:
    what = f"Agents SDK tool {ft.name!r}"
    if ft.needs_approval is not False:
        raise TypeError(
            f"{what} needs approval, which toolbus cannot ask for: it would run unapproved. "
            "Keep it in the agent (with the Runner's approval flow)"
        )
    if ft.tool_input_guardrails or ft.tool_output_guardrails:
        raise TypeError(
            f"{what} has guardrails, which the Runner runs, not the tool: toolbus would skip "
            "them. Keep it in the agent, or check its input in a toolbus pre-call hook"
        )
    if callable(ft.is_enabled) and inspect.iscoroutinefunction(ft.is_enabled):
        raise TypeError(
            f"{what} has an async is_enabled: toolbus asks whether a tool is enabled "
            "synchronously (its exports are). Make it a plain function"
        )
    if not has_context and _takes_context(ft):
        raise TypeError(
            f"{what} takes a RunContextWrapper/ToolContext: pass the run context it should "
            "see, add_openai_agents(tool, context=...), or keep the tool in the agent"
        )


def _takes_context(ft: FunctionTool) -> bool:
    try:
        fn = ft.__wrapped__
    except AttributeError:
        return False  # a hand-made FunctionTool: its invoker gets a ToolContext anyway
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    first = params[0]
    ann = hints.get(first.name, first.annotation)
    if isinstance(ann, str):
        return ann.split("[", 1)[0].rsplit(".", 1)[-1] in ("RunContextWrapper", "ToolContext")
    origin = typing.get_origin(ann) or ann
    return isinstance(origin, type) and issubclass(origin, RunContextWrapper)


def _injected_parameters(ft: FunctionTool) -> tuple[str, ...]:
    try:
        fn = ft.__wrapped__
    except AttributeError:
        return ()  # a hand-made FunctionTool: no function to read
    return injected_parameters(fn)


def _is_sync(ft: FunctionTool) -> bool:
    """Whether the tool's function is sync (the SDK would run it with `asyncio.to_thread`)."""
    if getattr(ft.on_invoke_tool, "__agents_sync_function_tool__", False):
        return True
    try:
        fn = ft.__wrapped__
    except AttributeError:
        return False  # a hand-made FunctionTool: its invoker is its own, and async
    return callable(fn) and not inspect.iscoroutinefunction(fn)


class _HereExecutor(concurrent.futures.ThreadPoolExecutor):
    """The default "thread pool" of `_run_here`'s loops: it runs what it is given
    at once, in the thread that runs the loop (never starting a thread)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # the tool's own: the invoker raises it
            future.set_exception(e)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass  # shared by every loop; it holds no thread


_HERE = _HereExecutor(max_workers=1)


class _Loop(threading.local):
    """One private event loop per worker thread, closed with the thread."""

    loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> asyncio.AbstractEventLoop:
        loop = self.loop
        if loop is None or loop.is_closed():
            loop = self.loop = asyncio.new_event_loop()
            loop.set_default_executor(_HERE)
            weakref.finalize(threading.current_thread(), loop.close)
        return loop


_loops = _Loop()


def _run_here(coro: Any) -> Any:
    """Run the SDK invoker's coroutine to its end in this thread."""
    loop = _loops.get()
    try:
        return loop.run_until_complete(coro)
    finally:
        # Whatever the invoker left running (none, usually) ends with the call.
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def _raising(ft: FunctionTool) -> FunctionTool:
    """A copy of `ft` whose failures raise instead of becoming a successful text."""
    try:
        from agents.tool import set_function_tool_failure_error_function
    except ImportError:  # pragma: no cover - another SDK version: failures stay texts
        return ft
    inner = copy.copy(ft)
    set_function_tool_failure_error_function(inner, None)
    return inner


def _output(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool | dict | list | BaseModel):
        return value
    return str(value)
