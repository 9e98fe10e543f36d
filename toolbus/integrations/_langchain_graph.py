"""What a LangGraph node hands its tools, and LangGraph's own types.

`ToolbusNode` (`toolbus.integrations.langgraph`) sets `GRAPH_CALL` around a
batch: the state the calls came with (what an `InjectedState` parameter
reads, `state_values`), the node's config, and what tools hand back beyond
their content (a `ToolMessage`, an `interrupt()`). LangGraph's injection
markers and types are looked up once, when first needed (`langgraph()`):
LangChain runs without LangGraph too.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..pipeline import current_run
from ..tools import ArgumentError, ToolFailure

if TYPE_CHECKING:
    from langchain_core.messages import ToolMessage
    from langchain_core.runnables import RunnableConfig

__all__ = ["GRAPH_CALL", "GraphCall", "LangGraph", "current_call_id", "langgraph", "state_values"]


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
        kind = langgraph().bubble
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


class LangGraph:
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


_lg: LangGraph | None = None


def langgraph() -> LangGraph:
    global _lg
    if _lg is None:
        _lg = LangGraph()
    return _lg


def current_call_id() -> str | None:
    current = current_run.get()
    return current[1].call.id if current is not None else None


def state_values(
    tool: str, params: Mapping[str, str | None], optional: frozenset[str]
) -> dict[str, Any]:
    """The values of tool `tool`'s `InjectedState` parameters (`params`: each
    parameter, and the state's field it reads or None for the whole state),
    from the state the node's batch came with."""
    graph = GRAPH_CALL.get()
    if graph is None:
        raise ArgumentError(
            f"Tool '{tool}' takes LangGraph state (InjectedState): run it through "
            "toolbus.integrations.langgraph.ToolbusNode"
        )
    state, key = graph.state, graph.messages_key
    wanted = list(params.values())
    if isinstance(state, list):  # a list of messages as the node's input
        if (len(wanted) == 1 and wanted[0] == key) or wanted[0] is None:
            state = {key: state}
        else:
            raise ArgumentError(
                f"Tool '{tool}' needs the graph state as a dict with "
                f"{', '.join(f for f in wanted if f)}; the node got a list of messages"
            )
    out: dict[str, Any] = {}
    for param, name in params.items():
        if not name:
            out[param] = state
        elif isinstance(state, dict):
            if name in state:
                out[param] = state[name]
            elif param not in optional:
                raise ArgumentError(f"Tool '{tool}': the graph state has no {name!r}")
        elif hasattr(state, name):
            out[param] = getattr(state, name)
        elif param not in optional:
            raise ArgumentError(f"Tool '{tool}': the graph state has no {name!r}")
    return out
