"""`ToolbusNode`: LangGraph's `ToolNode`, with toolbus running the tool calls.

    from toolbus.integrations.langgraph import ToolbusNode

    tools = ToolbusNode([search, book_table], read_only=["search"], timeout=10)
    graph.add_node("tools", tools)            # where ToolNode(tools) was
    graph.add_conditional_edges("agent", tools_condition)

It takes what `ToolNode` takes (a graph state with messages, a list of
messages, a list of tool calls, the Send API's payload; also a bare
`AIMessage`), reads the last `AIMessage`'s `tool_calls`, runs them as one
toolbus batch and answers with `ToolMessage`s carrying the same `tool_call_id`s
and names, in the same order, `status="error"` on every failure. Where
`ToolNode` runs every call in its own thread and re-raises what a tool raises,
toolbus gives deadlines, retries with backoff, limits (`max_parallel`, per tool,
groups), read-only calls in parallel and mutating ones in order, masking of
secrets, and the bus; and it never raises a tool's failure into the graph
(an `interrupt()` in a tool still reaches the graph, as with `ToolNode`).

Needs the `langgraph` extra: `pip install 'toolbus[langgraph]'`. See
docs/integrations.md.

One piece: the node, its reading of every input shape `ToolNode` takes and
its writing of `ToolMessage`s are one public module, imported (with
LangGraph) only by those who use it.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

try:
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.runnables import Runnable, RunnableConfig
    from langchain_core.tools import BaseTool, ToolException
    from langchain_core.tools import tool as make_langchain_tool
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "toolbus.integrations.langgraph needs LangGraph: pip install 'toolbus[langgraph]'"
    ) from e

from ..executor import Executor
from ..models import BatchResult, ErrorCode, ToolCall, ToolResult
from ..pipeline import tool_exception_filter
from ..tools import DuplicateToolError, StepContext, Tool, ToolRegistry
from ..tools._offer import Offer, offering
from .langchain import GRAPH_CALL, GraphCall, LangChainTool, tool_content

__all__ = ["ErrorHandler", "ToolCallFailed", "ToolbusNode"]

# ToolNode's texts (langgraph.prebuilt.tool_node), so that a model prompted for
# them reads the same.
_ERROR_TEMPLATE = "Error: {error}\n Please fix your mistakes."
_UNKNOWN_TOOL_TEMPLATE = (
    "Error: {requested_tool} is not a valid tool, try one of [{available_tools}]."
)

InputKind = Literal["dict", "list", "tool_calls"]

# Failures whose message a tool may write itself (handle_tool_error,
# handle_validation_error, a ToolMessage with status="error").
_OWN_ERRORS = frozenset((ErrorCode.TOOL_ERROR, ErrorCode.INVALID_ARGUMENTS))


class ToolCallFailed(ToolException):
    """What a `handle_tool_errors` callable receives: the call's failure as
    toolbus reports it. `str(error)` is the error text (secrets scrubbed);
    `error.result` is the `ToolResult` (`status`, `error_code`, ...)."""

    def __init__(self, result: ToolResult) -> None:
        super().__init__(result.error or result.status)
        self.result = result

    @property
    def code(self) -> ErrorCode | None:
        return self.result.error_code


ErrorHandler = bool | str | Callable[[ToolCallFailed], str]


class ToolbusNode(Runnable[Any, Any]):
    """A LangGraph node that runs the last `AIMessage`'s tool calls through toolbus.

    `registry_or_tools`: a `ToolRegistry`, or the tools `ToolNode` would take
    (LangChain tools, plain functions, which LangChain makes tools of, and
    toolbus `Tool`s). LangChain tools are mutating (run in order, as barriers)
    unless `read_only=True` or `read_only` is a collection holding their names.

    `executor`: the `Executor` to run on; its registry receives the tools (or
    is the registry given). The node runs only the tools it was given (every
    tool of a registry given): a call to another tool of a shared executor's
    registry is answered as `ToolNode` answers an unknown tool. Nodes may give
    a shared executor the same tool; another tool of a name already there is
    a `DuplicateToolError`. Without one, the node makes its own with
    `executor_options` (`timeout=`, `max_parallel=`, `retry=`, `inject=`, ...)
    and closes it in `close()` (and when the node is collected, or at exit).

    `handle_tool_errors` says what the `ToolMessage` of a failed call reads:
    `True` (ToolNode's "Error: ...\\n Please fix your mistakes."), `False` (the
    error text alone), a string (that string), or a callable of a
    `ToolCallFailed` that returns the text. Whatever it says, a failed call is
    a `ToolMessage` with `status="error"`: the node never raises a tool's failure.
    A call to an unknown tool reads as ToolNode's does.

    Refused at construction (`ValueError`): tools that need `InjectedStore` or a
    `ToolRuntime`, return a `Command`, or use `content_and_artifact`.
    `InjectedToolCallId` and `InjectedState` are filled from the node's input.

    `step`, a function of the node's input and config returning a
    `toolbus.tools.StepContext`, holds each run's calls to the tools the
    executor offers at that step (`executor.offered(step)`, which is also
    what to bind the model to); a call of another ends `TOOL_NOT_OFFERED`.
    Without it, each call is held to its tool's `is_enabled`.
    An `interrupt()` in any tool (LangChain's or toolbus's) reaches the graph.
    """

    def __init__(
        self,
        registry_or_tools: ToolRegistry | Sequence[BaseTool | Tool | Callable[..., Any]],
        executor: Executor | None = None,
        *,
        read_only: bool | Collection[str] = False,
        handle_tool_errors: ErrorHandler = True,
        name: str = "tools",
        tags: Sequence[str] | None = None,
        messages_key: str = "messages",
        step: Callable[[Any, RunnableConfig | None], StepContext] | None = None,
        **executor_options: Any,
    ) -> None:
        if not (isinstance(handle_tool_errors, bool | str) or callable(handle_tool_errors)):
            raise TypeError(
                "ToolbusNode: handle_tool_errors must be a bool, a string or a callable, "
                f"got {type(handle_tool_errors).__name__}"
            )
        if executor is not None and executor_options:
            raise TypeError(
                "ToolbusNode: executor options ("
                + ", ".join(sorted(executor_options))
                + ") go to the node's own executor; pass them to your Executor instead"
            )
        self.name = name
        self.tags = list(tags) if tags is not None else None
        self.messages_key = messages_key
        self.handle_tool_errors: ErrorHandler = handle_tool_errors
        if step is not None and not callable(step):
            raise TypeError(
                f"ToolbusNode: step must be a function of (input, config), got {step!r}"
            )
        self.step = step
        # The names of the tools this node runs: None for every tool of its
        # registry (a registry given), else the tools given. A call to any
        # other tool (one another node put in a shared executor's registry)
        # is answered as ToolNode answers an unknown tool, and never runs.
        self._own: tuple[str, ...] | None = None
        if isinstance(registry_or_tools, ToolRegistry):
            if read_only is not False:
                raise TypeError(
                    "ToolbusNode: read_only applies to LangChain tools the node imports; "
                    "a registry's tools say so themselves"
                )
            if executor is not None and executor.registry is not registry_or_tools:
                raise ValueError(
                    "ToolbusNode: the executor runs another registry than the one given"
                )
            registry = registry_or_tools
        else:
            registry = executor.registry if executor is not None else ToolRegistry()
            own = [
                _join(registry, t, item).name for item, t in _tools(registry_or_tools, read_only)
            ]
            self._own = tuple(dict.fromkeys(own))
        self.registry = registry
        self._owns_executor = executor is None
        self.executor = executor if executor is not None else Executor(registry, **executor_options)
        self._finalizer = (
            weakref.finalize(self, self.executor.close) if self._owns_executor else None
        )

    # -- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        """Close the node's own executor (not one that was given to it)."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> ToolbusNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- Runnable ------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        tool_calls, kind = self._parse_input(input)
        calls = [_toolbus_call(tc) for tc in tool_calls]
        graph = self._graph_call(input, kind, config)
        mine, foreign = self._split(calls)
        token = GRAPH_CALL.set(graph)
        seen = tool_exception_filter.set(graph.intercept)
        shown = offering.set(self._offer(input, config))
        try:
            if len(mine) == 1:
                results: Sequence[ToolResult] = (self.executor.execute(mine[0]),)
            elif mine:
                results = _results(self.executor.execute_batch(mine))
            else:
                results = ()
        finally:
            offering.reset(shown)
            tool_exception_filter.reset(seen)
            GRAPH_CALL.reset(token)
        return self._output(calls, _merged(results, foreign, len(calls)), graph, kind, foreign)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        tool_calls, kind = self._parse_input(input)
        calls = [_toolbus_call(tc) for tc in tool_calls]
        graph = self._graph_call(input, kind, config)
        mine, foreign = self._split(calls)
        token = GRAPH_CALL.set(graph)
        seen = tool_exception_filter.set(graph.intercept)
        shown = offering.set(self._offer(input, config))
        try:
            if len(mine) == 1:
                results: Sequence[ToolResult] = (await self.executor.aexecute(mine[0]),)
            elif mine:
                results = _results(await self.executor.aexecute_batch(mine))
            else:
                results = ()
        finally:
            offering.reset(shown)
            tool_exception_filter.reset(seen)
            GRAPH_CALL.reset(token)
        return self._output(calls, _merged(results, foreign, len(calls)), graph, kind, foreign)

    def _offer(self, input: Any, config: RunnableConfig | None) -> Offer | None:
        """What the executor offers at the node's step (`step`), which its
        calls are held to; None without `step` (each held to `is_enabled`)."""
        if self.step is None:
            return None
        at = self.step(input, config)
        if not isinstance(at, StepContext):
            raise TypeError(f"ToolbusNode: step returned {type(at).__name__}, not a StepContext")
        return Offer(at, frozenset(t.name for t in self.executor.offered(at)))

    def _split(self, calls: list[ToolCall]) -> tuple[list[ToolCall], dict[int, ToolResult]]:
        """The calls to run, and the answers to calls of tools that are not the node's."""
        own = self._own
        if own is None:
            return calls, {}
        foreign = {
            i: ToolResult(
                call_id=c.id,
                name=c.name,
                status="rejected",
                error=f"Unknown tool '{c.name}'",
                error_code=ErrorCode.TOOL_NOT_FOUND,
            )
            for i, c in enumerate(calls)
            if c.name not in own
        }
        if not foreign:
            return calls, foreign
        return [c for i, c in enumerate(calls) if i not in foreign], foreign

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools this node runs (every tool of its registry
        when it was given a registry)."""
        return list(self._own) if self._own is not None else self.registry.names()

    # -- input and output -------------------------------------------------------------------

    def _parse_input(self, input: Any) -> tuple[list[Any], InputKind]:
        """The tool calls to answer and the shape of the answer (as ToolNode parses)."""
        key = self.messages_key
        kind: InputKind
        if isinstance(input, AIMessage):
            return list(input.tool_calls), "list"
        if isinstance(input, list):
            if input and isinstance(input[-1], dict) and input[-1].get("type") == "tool_call":
                return list(input), "tool_calls"
            messages, kind = input, "list"
        elif isinstance(input, dict) and input.get("__type") == "tool_call_with_context":
            return [input["tool_call"]], "tool_calls"
        elif isinstance(input, dict) and input.get(key):
            messages, kind = input[key], "dict"
        elif not isinstance(input, dict) and getattr(input, key, None):
            messages, kind = getattr(input, key), "dict"
        else:
            raise ValueError("No message found in input")
        for message in reversed(messages):
            if isinstance(message, AIMessage):
                return list(message.tool_calls), kind
        raise ValueError("No AIMessage found in input")

    def _graph_call(self, input: Any, kind: InputKind, config: RunnableConfig | None) -> GraphCall:
        state: Any = input
        if isinstance(input, dict) and input.get("__type") == "tool_call_with_context":
            state = input["state"]
        elif kind == "tool_calls":
            state = _channels(config)
        elif isinstance(input, AIMessage):
            state = [input]
        return GraphCall(state=state, config=config, messages_key=self.messages_key)

    def _output(
        self,
        calls: list[ToolCall],
        results: Sequence[ToolResult],
        graph: GraphCall,
        kind: InputKind,
        foreign: Collection[int] = (),
    ) -> Any:
        if graph.bubble is not None:
            raise graph.bubble  # an interrupt(): the graph's, not a failure
        returned = graph.messages
        messages: list[ToolMessage] = []
        place = -1  # the call's place in the batch the node ran (not the foreign ones)
        for i, (call, result) in enumerate(zip(calls, results, strict=True)):
            if i not in foreign:
                place += 1
            own = returned.get((call.id, place)) if returned else None
            if result.status == "ok":
                content = tool_content(result.output)
                if own is not None:  # the tool returned a ToolMessage: its fields stand
                    messages.append(own.model_copy(update={"content": content}))
                else:
                    messages.append(_tool_message(content, call.name, call.id))
                continue
            if own is not None and result.error_code in _OWN_ERRORS:
                # The tool's own error message (it handled a ToolException or
                # a validation error, or returned a ToolMessage with status="error").
                messages.append(own.model_copy(update={"content": result.error or ""}))
                continue
            messages.append(
                ToolMessage(
                    content=self._error_content(result),
                    name=call.name,
                    tool_call_id=call.id,
                    status="error",
                )
            )
        return {self.messages_key: messages} if kind != "list" else messages

    def _error_content(self, result: ToolResult) -> str:
        if result.error_code == ErrorCode.TOOL_NOT_FOUND:
            return _UNKNOWN_TOOL_TEMPLATE.format(
                requested_tool=result.name, available_tools=", ".join(self.tool_names)
            )
        text = result.error or result.status
        handler = self.handle_tool_errors
        if handler is True:
            return _ERROR_TEMPLATE.format(error=text)
        if handler is False:
            return text
        if isinstance(handler, str):
            return handler
        try:
            return str(handler(ToolCallFailed(result)))
        except Exception:  # a broken handler must not lose the answer
            return _ERROR_TEMPLATE.format(error=text)


Given = BaseTool | Tool | Callable[..., Any]


def _tools(given: Sequence[Given], read_only: bool | Collection[str]) -> list[tuple[Given, Tool]]:
    """toolbus tools for what ToolNode would take, each with what it was made of."""
    if isinstance(read_only, str):
        raise TypeError("ToolbusNode: read_only is True, False or a collection of tool names")
    names = None if isinstance(read_only, bool) else set(read_only)
    out: list[tuple[Given, Tool]] = []
    for item in given:
        if isinstance(item, Tool):
            out.append((item, item))
            continue
        lc = item if isinstance(item, BaseTool) else make_langchain_tool(item)
        if not isinstance(lc, BaseTool):  # pragma: no cover - tool() makes BaseTools
            raise TypeError(f"ToolbusNode: cannot make a tool of {item!r}")
        ro = read_only if names is None else lc.name in names
        out.append((item, LangChainTool(lc, read_only=bool(ro))))
    if names is not None:
        unknown = names - {t.name for _, t in out if isinstance(t, LangChainTool)}
        if unknown:
            raise ValueError(
                "ToolbusNode: read_only names no LangChain tool given: "
                + ", ".join(sorted(unknown))
            )
    return out


def _join(registry: ToolRegistry, tool: Tool, item: Given) -> Tool:
    """Register `tool` (made of `item`) in the node's registry; the tool already
    there when it is the same one (another node on a shared executor took the
    same LangChain tool, function or toolbus tool, alike)."""
    existing = registry.get(tool.name)
    if existing is None or existing is tool:
        return registry.register(tool) if existing is None else existing
    same = existing is item
    if isinstance(existing, LangChainTool) and isinstance(tool, LangChainTool):
        theirs = existing.langchain_tool
        if isinstance(item, BaseTool):
            same = theirs is item
        else:  # a function: the LangChain tool made of it
            made_of = (getattr(theirs, "func", None), getattr(theirs, "coroutine", None))
            same = any(f is item for f in made_of)
        if same and existing.read_only != tool.read_only:
            raise DuplicateToolError(
                f"ToolbusNode: tool {tool.name!r} is already in the executor's registry with "
                f"read_only={existing.read_only}; nodes sharing an executor must agree on it"
            )
    if not same:
        raise DuplicateToolError(
            f"ToolbusNode: another tool named {tool.name!r} is already in the executor's "
            "registry (nodes sharing an executor share their tools' names)"
        )
    return existing


def _merged(
    results: Sequence[ToolResult], foreign: dict[int, ToolResult], n: int
) -> Sequence[ToolResult]:
    if not foreign:
        return results
    ran = iter(results)
    return [foreign[i] if i in foreign else next(ran) for i in range(n)]


def _toolbus_call(tool_call: Any) -> ToolCall:
    """A LangChain tool call as a toolbus call with the same id."""
    call_id = tool_call.get("id")
    name = tool_call.get("name")
    args = tool_call.get("args")
    if not isinstance(args, dict | str):
        # Not an object (a list, null, ...): handed on as its JSON text, which
        # toolbus rejects with INVALID_ARGUMENTS, saying what it got.
        try:
            args = json.dumps(args)
        except (TypeError, ValueError):
            args = f"<{type(args).__name__}>"
    if call_id is None:  # a model that gave no id: toolbus makes one up
        return ToolCall(name=str(name), arguments=args)
    if isinstance(call_id, str) and isinstance(name, str):
        return ToolCall(id=call_id, name=name, arguments=args)  # validating is the quicker
    return ToolCall(id=str(call_id), name=str(name), arguments=args)


def _message_maker() -> Callable[[Any, str, str], ToolMessage]:
    """`ToolMessage(content=..., name=..., tool_call_id=...)` for an ok call, made
    the way pydantic's `model_construct` makes an instance, from one validated
    message: the constructor's validation costs more than the rest of the node's
    work per call, and these fields are known good (text or content blocks, and
    the call's own name and id). Checked once against the constructor; if the
    two ever differ (another pydantic or langchain-core), the constructor it is."""
    proto = ToolMessage(content="", name="-", tool_call_id="-")
    base = dict(proto.__dict__)
    given = {"content", "name", "tool_call_id"}
    new, setattr_ = object.__new__, object.__setattr__

    def make(content: Any, name: str, call_id: str) -> ToolMessage:
        message = new(ToolMessage)
        fields = base.copy()
        fields["content"] = content
        fields["name"] = name
        fields["tool_call_id"] = call_id
        fields["additional_kwargs"] = {}
        fields["response_metadata"] = {}
        setattr_(message, "__dict__", fields)
        setattr_(message, "__pydantic_fields_set__", set(given))
        setattr_(message, "__pydantic_extra__", {})
        setattr_(message, "__pydantic_private__", None)
        return message

    def construct(content: Any, name: str, call_id: str) -> ToolMessage:
        return ToolMessage(content=content, name=name, tool_call_id=call_id)

    try:
        for content in ("text", [{"type": "text", "text": "t"}]):
            made, built = make(content, "n", "id"), construct(content, "n", "id")
            if (
                made != built
                or made.model_dump() != built.model_dump()
                or repr(made) != repr(built)
            ):
                return construct
            if made.__pydantic_extra__ != built.__pydantic_extra__:
                return construct
    except Exception:  # pragma: no cover - another pydantic's internals
        return construct
    return make


_tool_message = _message_maker()


def _results(batch: BatchResult) -> Sequence[ToolResult]:
    return batch.results


def _channels(config: RunnableConfig | None) -> Any:
    """The graph's state for a Send of bare tool calls, read from its channels
    the way ToolNode reads it (empty outside a graph)."""
    try:
        from langgraph._internal._constants import CONF, CONFIG_KEY_READ
    except ImportError:  # pragma: no cover - other langgraph versions
        return {}
    read = (config or {}).get(CONF, {}).get(CONFIG_KEY_READ)
    if read is None:
        return {}
    try:
        return read(list(read.args[1]), True)
    except Exception:  # a layout of another langgraph version
        return {}
