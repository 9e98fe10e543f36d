"""What a LangChain tool's result becomes: the content of its `ToolMessage`.

LangChain and LangGraph's `ToolNode` turn what a tool returns into a
`ToolMessage`'s content (`tool_content`); toolbus makes the same text its
output (`tool_output`), and turns a `ToolException` the tool handles into the
error message LangChain would give the model (`tool_failure`). A tool's own
`ToolMessage` (or the one of a handled error) is kept for the LangGraph node,
its secrets scrubbed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.messages.tool import ToolOutputMixin
from langchain_core.tools import BaseTool, ToolException

from ..masking import scrub_published
from ..pipeline import current_run
from ..tools import ToolError
from ._langchain_graph import GRAPH_CALL, current_call_id, langgraph

__all__ = ["stash_error", "tool_content", "tool_failure", "tool_output"]

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


def tool_output(tool: str, value: Any) -> Any:
    """The content LangChain would put in the ToolMessage for `value`, which
    tool `tool` returned."""
    if isinstance(value, str):
        return value
    if isinstance(value, ToolOutputMixin) and not isinstance(value, ToolMessage):
        lg = langgraph()
        what = (
            "a LangGraph Command"
            if lg.command and isinstance(value, lg.command)
            else type(value).__name__
        )
        raise ToolError(
            f"Tool '{tool}' returned {what}, which toolbus cannot apply to the graph",
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
            f"Tool '{tool}' returned a list of messages or commands, which toolbus "
            "cannot apply to the graph",
            retryable=False,
        )
    return tool_content(value)


def tool_failure(name: str, tool: BaseTool, error: Exception) -> Exception:
    """What the exception of `tool` (toolbus's tool `name`) becomes: itself,
    or what LangChain makes of it."""
    # An interrupt() (a GraphBubbleUp) goes on as it is: the node takes it
    # back to the graph (GraphCall.intercept).
    flag = tool.handle_tool_error
    if isinstance(error, ToolException) and flag:
        # The tool's own handling, as LangChain applies it: an error message.
        if isinstance(flag, str):
            content: Any = flag
        elif callable(flag):
            content = flag(error)
        else:
            content = error.args[0] if error.args else "Tool execution error"
        text = tool_content(content)
        stash_error(name, text)
        return ToolError(text if isinstance(text, str) else json.dumps(text), retryable=False)
    return error


def stash_error(tool: str, text: str | list[Any]) -> None:
    """Keep, for the LangGraph node, the error ToolMessage LangChain would
    make for the call running now (a handled error)."""
    graph, call_id = GRAPH_CALL.get(), current_call_id()
    if graph is not None and call_id is not None:
        graph.stash(ToolMessage(text, tool_call_id=call_id, name=tool, status="error"))


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
