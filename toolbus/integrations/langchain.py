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

Here is `LangChainTool` (its arguments, its run); what a tool declares is read
in `_langchain_declared.py`, what its result becomes in `_langchain_content.py`,
what a LangGraph node hands its tools (`GraphCall`) in `_langchain_graph.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Unpack

try:
    from langchain_core.runnables import RunnableConfig, ensure_config
    from langchain_core.tools import BaseTool, StructuredTool
    from langchain_core.tools import Tool as SimpleTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "toolbus.integrations.langchain needs langchain-core: pip install 'toolbus[langgraph]'"
    ) from e

from pydantic import BaseModel, ValidationError

from .._keywords import refuse_unknown
from ..tools import ArgumentError, Tool
from ..tools._injected import argument_names
from ..tools._tool import format_validation_error
from ..tools._tool_options import LANGCHAIN_KEYWORDS, LangChainOptions, adopt
from ._langchain_content import stash_error, tool_content, tool_failure, tool_output
from ._langchain_declared import (
    SYNTHETIC,
    UnsupportedToolError,
    classify,
    config_param,
    has_async,
    injected_keys,
    plain_structured,
)
from ._langchain_graph import GRAPH_CALL, GraphCall, current_call_id, state_values

if TYPE_CHECKING:
    pass

__all__ = ["GRAPH_CALL", "GraphCall", "LangChainTool", "UnsupportedToolError", "tool_content"]


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
            tuple(n for n in self._model.model_fields if n not in SYNTHETIC)
            if self._model is not None
            else ()
        )
        self._synthetic = (
            tuple(n for n in self._model.model_fields if n in SYNTHETIC)
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
        self._raw_keys: frozenset[str] = injected_keys(tool)
        # The validated model's own fields are the keyword arguments as they are.
        self._plain = (
            self._model is not None
            and not self._synthetic
            and not self._raw_keys
            and not self._config_fields
            and self._model.model_config.get("extra") != "allow"
        )
        found = classify(name, tool, self._model, self._raw_keys)
        self._call_id_params = found.call_ids
        self._state_params = found.states
        self._optional_state = found.optional_state
        self._framework_params = found.framework
        self._injected_params = found.injected
        self._injected_aliases = found.aliases
        self._fast = plain_structured(tool)
        st = tool if isinstance(tool, StructuredTool) else None
        if self._fast:
            assert st is not None
            self._async = st.coroutine is not None
            target = st.coroutine if st.coroutine is not None else st.func
            assert target is not None
            self._config_param = config_param(target)
        else:
            # Async only where the tool has async work of its own: LangChain's
            # ainvoke of a sync tool runs it in the event loop's default thread
            # pool, outside toolbus's threads; toolbus runs it on those itself.
            self._async = has_async(tool)
            self._config_param = None
        self._setup()
        self._schema = self.parameters  # exactly what LangChain exports
        model_fields = self._model.model_fields if self._model is not None else {}
        self.injected_required = frozenset(
            n for n in self.injected if n in model_fields and model_fields[n].is_required()
        )

    # -- what the tool declares ------------------------------------------------------

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
                call_id = current_call_id()
                if call_id is None:
                    raise ArgumentError(
                        f"Tool '{self.name}' takes its tool call id (InjectedToolCallId): "
                        "run it through an Executor"
                    )
                for param in self._call_id_params:
                    given[param] = call_id
            if self._state_params:
                given.update(state_values(self.name, self._state_params, self._optional_state))
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
        stash_error(self.name, text)
        return ArgumentError(text)

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
                raise tool_failure(self.name, tool, e) from None
            return tool_output(self.name, value)
        graph = GRAPH_CALL.get()
        call_id = current_call_id()
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
            raise tool_failure(self.name, tool, e) from None
        return tool_output(self.name, value)

    async def _arun(self, params: _Prepared) -> Any:  # for `is_async`; `run` is what runs
        return await self.run(params)

    async def _finish(self, pending: Awaitable[Any]) -> Any:
        try:
            value = await pending
        except Exception as e:
            raise tool_failure(self.name, self.langchain_tool, e) from None
        return tool_output(self.name, value)
