"""LangChain tools as toolbus tools (`ToolRegistry.add_langchain`).

    registry.add_langchain(search_tool, read_only=True)

A LangChain `BaseTool` keeps what the model sees: its name, description and
parameters are exactly what LangChain exports for it (`convert_to_openai_tool`).
Its arguments are validated the way LangChain validates them (its `args_schema`,
a pydantic model or a JSON schema), then the tool runs sync or async as it
supports, with every toolbus guarantee (timeouts, retries, limits, barrier
order, masking, the bus). What it returns becomes the text LangChain would put
in its `ToolMessage`.

Injected arguments:

- `InjectedToolArg` parameters become toolbus `Injected` ones: left out of the
  schema, refused from the model, their values supplied by
  `Executor(inject=...)` or a pre-call hook, always masked;
- `InjectedToolCallId` is the call's id;
- `InjectedState` is the LangGraph state the call came with (only through
  `toolbus.integrations.langgraph.ToolbusNode`).

Refused when the tool is imported, with the reason: `InjectedStore` and
`ToolRuntime` parameters, a return type that is a LangGraph `Command`, and
`response_format="content_and_artifact"` (their results need LangGraph's own
`ToolNode`).

Plain `StructuredTool`s (what `@tool` and `StructuredTool.from_function` make)
are called directly, without LangChain's callback machinery: toolbus's bus is
where their runs are observed. Other `BaseTool` subclasses (and tools with
callbacks of their own) run through their own `invoke`/`ainvoke`.
"""

from __future__ import annotations

import contextvars
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

try:
    from langchain_core.messages import ToolMessage
    from langchain_core.messages.tool import ToolOutputMixin
    from langchain_core.runnables import RunnableConfig, ensure_config
    from langchain_core.tools import (
        BaseTool,
        InjectedToolArg,
        InjectedToolCallId,
        StructuredTool,
        ToolException,
    )
    from langchain_core.tools import Tool as SimpleTool
    from langchain_core.tools.base import get_all_basemodel_annotations
    from langchain_core.utils.function_calling import convert_to_openai_tool
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "toolbus.integrations.langchain needs langchain-core: pip install 'toolbus[langgraph]'"
    ) from e

from pydantic import AliasChoices, AliasPath, BaseModel, ValidationError

from .._keywords import refuse_unknown
from ..masking import scrub_published
from ..pipeline import current_run
from ..tools import ArgumentError, Tool, ToolError, ToolFailure
from ..tools._injected import argument_names, is_injected_marker, schema_name
from ..tools._tool import format_validation_error
from ..tools._tool_options import LANGCHAIN_KEYWORDS, LangChainOptions, adopt

__all__ = ["GRAPH_CALL", "GraphCall", "LangChainTool", "UnsupportedToolError", "tool_content"]

# LangChain's content block types a ToolMessage carries as they are
# (langchain_core.tools.base.TOOL_MESSAGE_BLOCK_TYPES).
_BLOCK_TYPES = frozenset(
    (
        "text",
        "image_url",
        "image",
        "json",
        "search_result",
        "custom_tool_call_output",
        "document",
        "file",
    )
)

# LangChain's own `_arun`s, which run the sync `_run` in the event loop's thread pool.
_SYNC_ARUNS = frozenset((BaseTool._arun, StructuredTool._arun, SimpleTool._arun))

# LangChain's names for the fields of `*args` / `**kwargs`: passed only when given.
_SYNTHETIC = frozenset(("args", "kwargs"))


class UnsupportedToolError(ValueError):
    """A LangChain tool toolbus cannot run as it expects to be run (the message says why)."""


@dataclass(slots=True)
class GraphCall:
    """What a LangGraph node hands the tools of one batch (through `GRAPH_CALL`):
    the state the calls came with, the node's config, and what tools returned
    beyond their content (a `ToolMessage`, an interrupt)."""

    state: Any
    config: RunnableConfig | None
    messages_key: str = "messages"
    # (call id, its place in the batch) -> the ToolMessage a tool returned (or
    # its handled error): calls with the same id in one turn keep their own.
    messages: dict[tuple[str, int], ToolMessage] = field(default_factory=dict)

    def stash(self, message: ToolMessage) -> None:
        """Keep the ToolMessage of the call running now, for the node's answer."""
        current = current_run.get()
        if current is not None:
            run = current[1]
            self.messages[(run.call.id, run.index)] = message

    # The first GraphInterrupt (or other GraphBubbleUp) a tool raised.
    bubble: BaseException | None = None

    def intercept(self, error: BaseException) -> BaseException | None:
        """What a tool of the batch raised, seen before toolbus judges it (as
        `toolbus.pipeline.tool_exception_filter`): an `interrupt()` (any
        GraphBubbleUp) is the graph's, kept for the node to raise; the call
        ends with a final error that does not show the interrupt's value."""
        kind = _langgraph().bubble
        if kind is None or not isinstance(error, kind):
            return None
        if self.bubble is None:
            self.bubble = error
        current = current_run.get()
        name = current[1].call.name if current is not None else "a tool"
        return ToolFailure(f"Tool '{name}' interrupted the graph")


GRAPH_CALL: contextvars.ContextVar[GraphCall | None] = contextvars.ContextVar(
    "toolbus_graph_call", default=None
)
"""Set by `ToolbusNode` around a batch; the executor carries it to the tools."""


class _LangGraph:
    """LangGraph's injection markers and types, when LangGraph is installed."""

    def __init__(self) -> None:
        try:
            from langgraph.errors import GraphBubbleUp
            from langgraph.prebuilt import InjectedState, InjectedStore, ToolRuntime
            from langgraph.types import Command
        except ImportError:  # LangChain without LangGraph: none of these can occur
            self.state: type | None = None
            self.store: type | None = None
            self.runtime: type | None = None
            self.command: type | None = None
            self.bubble: type[BaseException] | None = None
            return
        self.state = InjectedState
        self.store = InjectedStore
        self.runtime = ToolRuntime
        self.command = Command
        self.bubble = GraphBubbleUp


_lg: _LangGraph | None = None


def _langgraph() -> _LangGraph:
    global _lg
    if _lg is None:
        _lg = _LangGraph()
    return _lg


class _Prepared:
    """A validated call: the keyword arguments LangChain would pass, and the
    input they came from (the model's arguments plus the injected ones)."""

    __slots__ = ("given", "kwargs")

    def __init__(self, kwargs: dict[str, Any], given: dict[str, Any]) -> None:
        self.kwargs = kwargs
        self.given = given


class LangChainTool(Tool):
    """A LangChain `BaseTool`, run by toolbus. Made by `ToolRegistry.add_langchain`.

    LangChain tools do mutate by default (`read_only=False`): they run in order,
    as barriers, unless marked read-only. They are `process_local`: the
    LangChain object stays in this process.
    """

    process_local = True

    def __init__(self, tool: BaseTool, **options: Unpack[LangChainOptions]) -> None:
        refuse_unknown(options, LANGCHAIN_KEYWORDS, "LangChainTool.__init__")
        if not isinstance(tool, BaseTool):
            raise TypeError(
                f"add_langchain takes a LangChain BaseTool, got {type(tool).__name__} "
                "(make one with langchain_core.tools.tool)"
            )
        name = tool.name
        if tool.response_format == "content_and_artifact":
            raise UnsupportedToolError(
                f"LangChain tool {name!r} uses response_format='content_and_artifact': toolbus "
                "would lose the artifact; run it with LangGraph's ToolNode, or return the content"
            )
        self.langchain_tool = tool
        self.name = name
        exported = convert_to_openai_tool(tool)["function"]
        self.description = exported.get("description") or ""
        self.parameters = exported.get("parameters") or {"type": "object", "properties": {}}
        adopt(self, options, LANGCHAIN_KEYWORDS)

        args_schema = tool.args_schema
        self._model: type[BaseModel] | None = None
        # LangChain's classic single-input `Tool(name, func, description)`: the
        # model sends one value (`__arg1`, or under any name, as ToolNode
        # takes it), which LangChain hands to the function as it is.
        self._single = isinstance(tool, SimpleTool) and args_schema is None
        if not isinstance(args_schema, dict) and not self._single:
            model = tool.get_input_schema()
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise UnsupportedToolError(
                    f"LangChain tool {name!r}: its args_schema is not a pydantic v2 model "
                    f"({model!r}); toolbus takes pydantic v2 models and JSON schemas"
                )
            self._model = model
        self._fields = (
            tuple(n for n in self._model.model_fields if n not in _SYNTHETIC)
            if self._model is not None
            else ()
        )
        self._synthetic = (
            tuple(n for n in self._model.model_fields if n in _SYNTHETIC)
            if self._model is not None
            else ()
        )
        # Fields LangChain fills itself, whatever the model sends: a
        # RunnableConfig (the run's config; a `_run(self, ..., config:
        # RunnableConfig)` puts one in the schema LangChain derives).
        self._config_fields = (
            tuple(n for n, f in self._model.model_fields.items() if f.annotation is RunnableConfig)
            if self._model is not None
            else ()
        )
        self._raw_keys: frozenset[str] = _injected_keys(tool)
        # The validated model's own fields are the keyword arguments as they are.
        self._plain = (
            self._model is not None
            and not self._synthetic
            and not self._raw_keys
            and not self._config_fields
            and self._model.model_config.get("extra") != "allow"
        )
        self._call_id_params: tuple[str, ...] = ()
        self._state_params: dict[str, str | None] = {}
        self._optional_state: frozenset[str] = frozenset()
        self._framework_params: frozenset[str] = frozenset()
        self._injected_params: tuple[str, ...] = ()
        self._classify()
        self._fast = _plain_structured(tool)
        st = tool if isinstance(tool, StructuredTool) else None
        if self._fast:
            assert st is not None
            self._async = st.coroutine is not None
            target = st.coroutine if st.coroutine is not None else st.func
            assert target is not None
            self._config_param = _config_param(target)
        else:
            # Async only where the tool has async work of its own: LangChain's
            # ainvoke of a sync tool runs it in the event loop's default thread
            # pool, outside toolbus's threads; toolbus runs it on those itself.
            self._async = _has_async(tool)
            self._config_param = None
        self._setup()
        self._schema = self.parameters  # exactly what LangChain exports
        model_fields = self._model.model_fields if self._model is not None else {}
        self.injected_required = frozenset(
            n for n in self.injected if n in model_fields and model_fields[n].is_required()
        )

    # -- what the tool declares ------------------------------------------------------

    def _classify(self) -> None:
        tool, lg = self.langchain_tool, _langgraph()
        annotations: dict[str, Any] = {}
        fn = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
        if fn is not None:
            annotations.update(_hints(fn))
        if self._model is not None:
            annotations.update(get_all_basemodel_annotations(self._model))
        returns = _hints(fn, returns=True) if fn is not None else {}
        if fn is None:
            returns = _hints(type(tool)._run, returns=True)
        if lg.command is not None and _mentions(returns.get("return"), lg.command):
            raise UnsupportedToolError(
                f"LangChain tool {self.name!r} returns a LangGraph Command, which toolbus "
                "cannot apply to the graph; run it with LangGraph's ToolNode"
            )
        call_ids: list[str] = []
        states: dict[str, str | None] = {}
        injected: list[str] = []
        for param, annotation in annotations.items():
            if lg.runtime is not None and _mentions(annotation, lg.runtime, metadata=False):
                raise UnsupportedToolError(
                    f"LangChain tool {self.name!r} takes a ToolRuntime ({param!r}), which only "
                    "LangGraph's ToolNode provides; run it there, or take InjectedState instead"
                )
            for marker in _metadata(annotation):
                if _is(marker, InjectedToolCallId):
                    call_ids.append(param)
                elif lg.state is not None and _is(marker, lg.state):
                    states[param] = (
                        getattr(marker, "field", None) if not isinstance(marker, type) else None
                    )
                elif lg.store is not None and _is(marker, lg.store):
                    raise UnsupportedToolError(
                        f"LangChain tool {self.name!r} takes an InjectedStore ({param!r}), which "
                        "only LangGraph's ToolNode provides; run it there"
                    )
                elif _is(marker, InjectedToolArg):
                    injected.append(param)
                elif is_injected_marker(marker):
                    # LangChain would show it to the model (bind_tools, ToolNode):
                    # the model would be asked for a value toolbus refuses.
                    raise UnsupportedToolError(
                        f"LangChain tool {self.name!r}: parameter {param!r} is marked with "
                        "toolbus's Injected, which LangChain does not know (it shows the "
                        "parameter to the model); mark it Annotated[..., InjectedToolArg], "
                        "which toolbus treats as injected"
                    )
                else:
                    continue
                break
        for param in self._raw_keys:
            if param not in call_ids and param not in states and param not in injected:
                injected.append(param)  # declared on the function only
        self._call_id_params = tuple(call_ids)
        self._state_params = states
        fields = self._model.model_fields if self._model is not None else {}
        # What the model sends under any name of these is dropped (the
        # aliases of an args_schema's fields too).
        self._framework_params = frozenset(
            n
            for p in (*call_ids, *states)
            for n in (argument_names(p, fields[p]) if p in fields else (p,))
        )
        self._optional_state = frozenset(
            p for p, f in states.items() if f and p in fields and not fields[p].is_required()
        )
        self._injected_params = tuple(dict.fromkeys(injected))
        # Injected fields the args_schema reads under another name (an alias):
        # the value supplied under the parameter's name is validated under it.
        self._injected_aliases: dict[str, str] = {}
        by_alias = self._model is None or self._model.model_config.get("validate_by_alias", True)
        for param in (*self._injected_params, *call_ids, *states):
            f = fields.get(param)
            if f is None or not by_alias:
                continue
            alias = f.validation_alias
            first = alias.choices[0] if isinstance(alias, AliasChoices) and alias.choices else alias
            if isinstance(first, AliasPath):
                raise UnsupportedToolError(
                    f"LangChain tool {self.name!r}: injected parameter {param!r} is read from "
                    "an AliasPath, where toolbus cannot put its value; give it a plain alias"
                )
            name = schema_name(param, f)
            if name != param:
                self._injected_aliases[param] = name

    def _injected_names(self, schema: dict[str, Any]) -> tuple[str, ...]:
        return self._injected_params

    def _injected_argument_names(self) -> tuple[str, ...]:
        # The model may set an injected field by none of its names: its
        # parameter name, its alias, its validation aliases.
        names = dict.fromkeys(self._injected_params)
        fields = self._model.model_fields if self._model is not None else {}
        for param in self._injected_params:
            if param in fields:
                names.update(dict.fromkeys(argument_names(param, fields[param])))
        return tuple(names)

    def _target(self) -> Callable[..., Any]:
        return self._arun if self._async else self.run

    @property
    def needs_state(self) -> bool:
        """Whether it takes LangGraph state (`InjectedState`)."""
        return bool(self._state_params)

    # -- the per-call steps ------------------------------------------------------------

    def validate(self, arguments: dict[str, Any]) -> Any:
        if self._single:
            if len(arguments) != 1:
                raise ArgumentError(
                    f"Invalid arguments for '{self.name}': it takes a single input "
                    f"(__arg1), got {len(arguments)}"
                )
            return _Prepared(dict(arguments), arguments)
        given = arguments
        if self._config_fields:
            # LangChain passes the run's config; what the model sent is dropped.
            given = {k: v for k, v in given.items() if k not in self._config_fields}
        if self._call_id_params or self._state_params:
            # What the model sent under these names is dropped, as ToolNode drops it.
            given = {k: v for k, v in arguments.items() if k not in self._framework_params}
            if self._call_id_params:
                call_id = _current_call_id()
                if call_id is None:
                    raise ArgumentError(
                        f"Tool '{self.name}' takes its tool call id (InjectedToolCallId): "
                        "run it through an Executor"
                    )
                for param in self._call_id_params:
                    given[param] = call_id
            if self._state_params:
                given.update(self._state_values())
        if self._injected_aliases:
            moved = {p: a for p, a in self._injected_aliases.items() if p in given}
            if moved:
                given = {moved.get(k, k): v for k, v in given.items()}
        model = self._model
        if model is None:  # a JSON schema: LangChain passes the input as it is
            super().validate(arguments)
            kwargs = dict(given)
        else:
            try:
                m = model.model_validate(
                    {**given, **{key: {} for key in self._config_fields}}
                    if self._config_fields
                    else given
                )
            except ValidationError as e:
                raise self._invalid(e) from None
            # What LangChain passes: every field (a default too), the fields
            # of *args/**kwargs only when given, extra fields when given.
            if self._plain:
                return _Prepared(m.__dict__, given)
            kwargs = {k: getattr(m, k) for k in self._fields if k not in self._config_fields}
            for k in self._synthetic:
                if k in given:
                    kwargs[k] = getattr(m, k)
            extra = m.__pydantic_extra__
            if extra:
                kwargs.update((k, v) for k, v in extra.items() if k in given)
        for k in self._raw_keys:  # injected values go in as given, unvalidated
            if k in given:
                kwargs[k] = given[k]
        return _Prepared(kwargs, given)

    def _invalid(self, error: ValidationError) -> ArgumentError:
        """The error of arguments that fail validation: toolbus's text, or the
        tool's own (`handle_validation_error`), as LangChain's ToolMessage has it."""
        flag = self.langchain_tool.handle_validation_error
        if not flag:
            return ArgumentError(format_validation_error(self.name, error))
        if isinstance(flag, str):
            text = flag
        elif callable(flag):
            try:
                text = str(flag(error))
            except Exception:  # a broken handler: toolbus's own text
                return ArgumentError(format_validation_error(self.name, error))
        else:
            text = "Tool input validation error"
        graph, call_id = GRAPH_CALL.get(), _current_call_id()
        if graph is not None and call_id is not None:
            graph.stash(ToolMessage(text, tool_call_id=call_id, name=self.name, status="error"))
        return ArgumentError(text)

    def _state_values(self) -> dict[str, Any]:
        graph = GRAPH_CALL.get()
        if graph is None:
            raise ArgumentError(
                f"Tool '{self.name}' takes LangGraph state (InjectedState): run it through "
                "toolbus.integrations.langgraph.ToolbusNode"
            )
        state, key = graph.state, graph.messages_key
        wanted = list(self._state_params.values())
        if isinstance(state, list):  # a list of messages as the node's input
            if (len(wanted) == 1 and wanted[0] == key) or wanted[0] is None:
                state = {key: state}
            else:
                raise ArgumentError(
                    f"Tool '{self.name}' needs the graph state as a dict with "
                    f"{', '.join(f for f in wanted if f)}; the node got a list of messages"
                )
        out: dict[str, Any] = {}
        for param, name in self._state_params.items():
            if not name:
                out[param] = state
            elif isinstance(state, dict):
                if name in state:
                    out[param] = state[name]
                elif param not in self._optional_state:
                    raise ArgumentError(f"Tool '{self.name}': the graph state has no {name!r}")
            elif hasattr(state, name):
                out[param] = getattr(state, name)
            elif param not in self._optional_state:
                raise ArgumentError(f"Tool '{self.name}': the graph state has no {name!r}")
        return out

    def run(self, params: _Prepared) -> Any:
        tool = self.langchain_tool
        if self._fast:
            assert isinstance(tool, StructuredTool)
            kwargs = params.kwargs
            if self._config_param is not None:
                graph = GRAPH_CALL.get()
                config = ensure_config(graph.config if graph is not None else None)
                kwargs = {**kwargs, self._config_param: config}
            if self._async:
                assert tool.coroutine is not None
                return self._finish(tool.coroutine(**kwargs))
            assert tool.func is not None
            try:
                value = tool.func(**kwargs)
            except Exception as e:
                raise self._failure(e) from None
            return self._output(value)
        graph = GRAPH_CALL.get()
        call_id = _current_call_id()
        # With a pydantic args_schema, LangChain validates the input again: it
        # gets the input as toolbus validated it (under the schema's names,
        # aliases included), as ToolNode would give it. Without one (or with a
        # JSON schema), LangChain passes the input as it is: the validated
        # arguments.
        tool_input: Any = (
            dict(params.given) if isinstance(tool.args_schema, type) else dict(params.kwargs)
        )
        if call_id is not None:
            tool_input = {"name": self.name, "args": tool_input, "id": call_id, "type": "tool_call"}
        config = ensure_config(graph.config if graph is not None else None)
        if self._async:
            return self._finish(tool.ainvoke(tool_input, config))
        try:
            value = tool.invoke(tool_input, config)
        except Exception as e:
            raise self._failure(e) from None
        return self._output(value)

    async def _arun(self, params: _Prepared) -> Any:  # for `is_async`; `run` is what runs
        return await self.run(params)

    async def _finish(self, pending: Awaitable[Any]) -> Any:
        try:
            value = await pending
        except Exception as e:
            raise self._failure(e) from None
        return self._output(value)

    def _failure(self, error: Exception) -> Exception:
        """What a tool's exception becomes: itself, or what LangChain makes of it."""
        # An interrupt() (a GraphBubbleUp) goes on as it is: the node takes it
        # back to the graph (GraphCall.intercept).
        graph = GRAPH_CALL.get()
        flag = self.langchain_tool.handle_tool_error
        if isinstance(error, ToolException) and flag:
            # The tool's own handling, as LangChain applies it: an error message.
            if isinstance(flag, str):
                content: Any = flag
            elif callable(flag):
                content = flag(error)
            else:
                content = error.args[0] if error.args else "Tool execution error"
            text = tool_content(content)
            call_id = _current_call_id()
            if graph is not None and call_id is not None:
                graph.stash(ToolMessage(text, tool_call_id=call_id, name=self.name, status="error"))
            return ToolError(text if isinstance(text, str) else json.dumps(text), retryable=False)
        return error

    def _output(self, value: Any) -> Any:
        """The content LangChain would put in the ToolMessage for `value`."""
        if isinstance(value, str):
            return value
        if isinstance(value, ToolOutputMixin) and not isinstance(value, ToolMessage):
            lg = _langgraph()
            what = (
                "a LangGraph Command"
                if lg.command and isinstance(value, lg.command)
                else type(value).__name__
            )
            raise ToolError(
                f"Tool '{self.name}' returned {what}, which toolbus cannot apply to the graph",
                retryable=False,
            )
        if isinstance(value, ToolMessage):
            content = tool_content(value.content)
            graph = GRAPH_CALL.get()
            if graph is not None:
                graph.stash(_scrubbed_message(value))
            if value.status == "error":
                text = content if isinstance(content, str) else json.dumps(content)
                raise ToolError(text, retryable=False)
            return content
        if isinstance(value, list) and value and all(isinstance(v, ToolOutputMixin) for v in value):
            raise ToolError(
                f"Tool '{self.name}' returned a list of messages or commands, which toolbus "
                "cannot apply to the graph",
                retryable=False,
            )
        return tool_content(value)


def tool_content(value: Any) -> str | list[Any]:
    """What a `ToolMessage`'s content is for `value`, as LangChain and LangGraph's
    `ToolNode` make it: text as it is, a list of content blocks as it is,
    anything else as JSON (or its `str()` if it is not JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(
        isinstance(v, dict) and v.get("type") in _BLOCK_TYPES for v in value
    ):
        return value
    if isinstance(value, Sequence) and all(
        isinstance(v, str) or (isinstance(v, dict) and v.get("type") in _BLOCK_TYPES) for v in value
    ):
        value = list(value)  # LangChain keeps it; the node then writes it as JSON
    try:
        return json.dumps(value, ensure_ascii=False)
    except Exception:
        return str(value)


def _scrubbed_message(message: ToolMessage) -> ToolMessage:
    """A tool's own ToolMessage, fit to reach the graph: the call's secrets
    (injected and masked values) scrubbed from every field but its content
    (which the node replaces with the call's scrubbed output)."""
    current = current_run.get()
    scrubber = current[1].scrubber if current is not None else None
    if not scrubber:
        return message
    update: dict[str, Any] = {
        "artifact": scrub_published(scrubber, message.artifact),
        "additional_kwargs": scrub_published(scrubber, message.additional_kwargs),
        "response_metadata": scrub_published(scrubber, message.response_metadata),
    }
    for key in ("id", "name", "tool_call_id"):
        text = getattr(message, key, None)
        if isinstance(text, str):
            update[key] = scrubber.text(text)
    return message.model_copy(update=update)


def _current_call_id() -> str | None:
    current = current_run.get()
    return current[1].call.id if current is not None else None


def _plain_structured(tool: BaseTool) -> bool:
    """A `StructuredTool` whose function toolbus may call itself: nothing of
    LangChain's run path overridden, no callbacks of its own."""
    if not isinstance(tool, StructuredTool) or (tool.func is None and tool.coroutine is None):
        return False
    cls = type(tool)
    if any(fn is not None and "callbacks" in _parameters(fn) for fn in (tool.func, tool.coroutine)):
        return False  # LangChain passes it the run's callbacks: through its invoke
    return (
        cls._run is StructuredTool._run
        and cls._arun is StructuredTool._arun
        and cls.run is BaseTool.run
        and cls.arun is BaseTool.arun
        and cls.invoke is BaseTool.invoke
        and cls.ainvoke is StructuredTool.ainvoke
        and cls._parse_input is BaseTool._parse_input
        and cls._to_args_and_kwargs is BaseTool._to_args_and_kwargs
        and not tool.callbacks
        and not tool.verbose
    )


def _has_async(tool: BaseTool) -> bool:
    """Whether the tool has an async implementation: a coroutine, or an `_arun`
    of its own (LangChain's own `_arun`s run the sync `_run` in a thread)."""
    if getattr(tool, "coroutine", None) is not None:
        return True
    return type(tool)._arun not in _SYNC_ARUNS


def _parameters(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def _injected_keys(tool: BaseTool) -> frozenset[str]:
    """LangChain's own list of the injected parameters of the tool's function."""
    keys: Any = getattr(tool, "_injected_args_keys", frozenset())
    return frozenset(keys) if isinstance(keys, frozenset | set) else frozenset()


def _hints(fn: Any, *, returns: bool = False) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable annotations: LangChain skips them too
        return {}
    if returns:
        return {"return": hints["return"]} if "return" in hints else {}
    hints.pop("return", None)
    return hints


def _metadata(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) is typing.Annotated:
        return tuple(annotation.__metadata__)
    return ()


def _is(marker: Any, kind: type) -> bool:
    return isinstance(marker, kind) or (isinstance(marker, type) and issubclass(marker, kind))


def _mentions(annotation: Any, kind: type, *, metadata: bool = True) -> bool:
    """Whether `annotation` is `kind`, or a union, list or Annotated of it."""
    if annotation is None:
        return False
    if _is(annotation, kind) if isinstance(annotation, type) else False:
        return True
    origin = typing.get_origin(annotation)
    if origin is not None and isinstance(origin, type) and issubclass(origin, kind):
        return True
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        args = args[:1] if not metadata else args
    return any(_mentions(a, kind, metadata=metadata) for a in args if not isinstance(a, str))


def _config_param(fn: Callable[..., Any]) -> str | None:
    """The parameter LangChain passes the RunnableConfig in, if the function has one."""
    for name, hint in _hints(fn).items():
        if hint is RunnableConfig:
            return name
    return None
