"""Anthropic's Messages format.

Read the `tool_use` blocks a model wrote, write `tool_result` blocks back,
export tools::

    from toolbus.providers import anthropic as tb

    message = client.messages.create(
        model=model, max_tokens=1024, messages=messages, tools=tb.tool_definitions(registry)
    )
    batch = executor.execute_batch(tb.tool_calls(message, registry=registry))
    messages += [tb.assistant_message(message), tb.tool_results_message(batch)]

Anthropic requires the results of every `tool_use` block of a turn in one user
message, right after the assistant message that holds the blocks:
`tool_results_message` builds exactly that message. Readers accept the SDK's
objects (including `stream.get_final_message()`) and their JSON as plain dicts.
Nothing here imports the `anthropic` package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

from ..models import ToolCall, ToolResult
from ..tools import StepContext, ToolRegistry
from ..tools._names import check_provider_name
from ._common import (
    DEFAULT_MAX_LENGTH,
    ToolSource,
    as_dict,
    call_arguments,
    custom_arguments,
    fallback_call_id,
    plain,
    result_text,
    tools_of,
)
from ._media import anthropic_content
from ._shapes import Use, foreign_to, shape_of, wrong_shape

if TYPE_CHECKING:
    from typing import TypeAlias

    from anthropic.types import Message, MessageParam, ToolParam, ToolResultBlockParam
    from anthropic.types.tool_result_block_param import Content

    MessageLike: TypeAlias = Message | Mapping[str, Any] | Iterable[Any]
    """A Messages API response (object or dict), or its content blocks."""

__all__ = [
    "CUSTOM_INPUT",
    "assistant_message",
    "message_text",
    "tool_calls",
    "tool_definitions",
    "tool_result_blocks",
    "tool_results_message",
]

CUSTOM_INPUT = "input"
"""The one property through which a custom (free-text) tool takes its input:
Anthropic tools take JSON objects, so a custom tool is offered as an object
with one string property, and its value is handed to the tool as raw text."""


_EXPECTED = "a Messages API message or its content blocks"
_NOT_MESSAGES = foreign_to("messages")


def _blocks(message: Any, use: Use) -> list[dict[str, Any]]:
    """The content blocks of a message (object or dict), or a list of blocks as they are.

    Another format's objects (a chat completion, message or tool calls, a
    Responses API response or its items, alone or in the list) and list items
    that are not blocks are refused, never read as a message without calls.
    """
    if isinstance(message, Mapping) or hasattr(message, "model_dump"):
        data = as_dict(message, "a message")
        shape = shape_of(data)
        if shape in _NOT_MESSAGES:
            raise wrong_shape(_EXPECTED, shape, use)
        if "content" not in data:
            if shape == "messages_tool_use":
                raise TypeError(
                    f"expected {_EXPECTED}; got one tool_use block, not a list:"
                    " pass [block], or the message that holds it"
                )
            raise TypeError(f"expected {_EXPECTED}; got a dict with keys {sorted(data)[:6]}")
        content = data["content"]
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        found = content or []
    else:
        found = plain(list(message))
    blocks = [as_dict(block, "a content block") for block in found]
    for block in blocks:
        shape = shape_of(block)
        if shape in _NOT_MESSAGES or shape == "messages_message":
            raise wrong_shape(_EXPECTED, shape, use, in_list=True)
        if "type" not in block:  # every content block has one
            raise TypeError(f"expected {_EXPECTED}; got a list holding {sorted(block)[:4]}")
    return blocks


def tool_calls(message: MessageLike, *, registry: ToolRegistry | None = None) -> list[ToolCall]:
    """The calls of the `tool_use` blocks of `message`, in the order written.

    `message` is a `Message` (or its dict) or its content list. A call's id is
    the block's id; its arguments are the block's `input` object (the executor
    validates it and rejects a bad one with `INVALID_ARGUMENTS`). With
    `registry`, a call to one of its custom tools gets the text under
    `CUSTOM_INPUT` as its raw input, as `tool_definitions` offered it. Other
    blocks (text, thinking, server tools the API ran itself) are skipped.
    Another format's objects (chat completions, messages, tool calls;
    Responses API responses and items) raise `TypeError`, alone or in the list.
    """
    calls = []
    for index, block in enumerate(_blocks(message, "calls")):
        if block.get("type") != "tool_use":
            continue
        name = str(block.get("name") or "")
        raw = block.get("input")
        tool = registry.get(name) if registry is not None else None
        fields: dict[str, Any] = {"name": name, "id": _block_id(block, index)}
        if tool is not None and tool.type == "custom":
            # Its text, under CUSTOM_INPUT as offered; anything else (a null,
            # a number, other keys) the executor refuses, naming what it got.
            if isinstance(raw, dict):
                text = raw.get(CUSTOM_INPUT)
                fields["arguments"] = (
                    text if set(raw) == {CUSTOM_INPUT} and isinstance(text, str) else raw
                )
            elif "input" in block:
                fields["arguments"] = custom_arguments(raw)
        elif "input" in block:  # (a null too: read as absent, the tool would run with its defaults)
            fields["arguments"] = call_arguments(raw)
        calls.append(ToolCall(**fields))
    return calls


def assistant_message(message: MessageLike) -> MessageParam:
    """The model's turn as the dict to append to `messages`:
    `{"role": "assistant", "content": [...]}` with every block as the SDK sends
    it back (thinking blocks keep their signatures, tool_use blocks their ids).
    """
    blocks = _blocks(message, "turn")
    for index, block in enumerate(blocks):
        if block.get("type") == "tool_use" and not block.get("id"):
            block["id"] = _block_id(block, index)  # the id its result will carry
    return {"role": "assistant", "content": cast("list[Any]", blocks)}


def _block_id(block: Mapping[str, Any], index: int) -> str:
    if block.get("id"):
        return str(block["id"])
    return fallback_call_id(index, str(block.get("name") or ""), block.get("input"))


def message_text(message: MessageLike) -> str:
    """The text of the message's text blocks, joined (`""` when it only used tools)."""
    return "".join(
        str(b.get("text") or "") for b in _blocks(message, "text") if b.get("type") == "text"
    )


def tool_result_blocks(
    results: Iterable[ToolResult],
    *,
    max_length: int = DEFAULT_MAX_LENGTH,
    attachments: Literal["native", "text"] = "native",
) -> list[ToolResultBlockParam]:
    """One `tool_result` block per result, in the order given:
    `{"type": "tool_result", "tool_use_id", "content", "is_error"}`.

    `content` is what `result_text` gives: the output, or
    `Error: ... (ERROR_CODE)` for errors, timeouts and rejections;
    `is_error` is true for every result that is not `ok`. A successful
    result's images (PNG, JPEG, GIF, WebP) and files (PDF, UTF-8 text) with
    data go as `image` and `document` blocks after its text (`content` is then
    a list); attachments that are links, and other types, stay a line of the
    text. `attachments="text"`: every attachment as a line of text.
    """
    return [
        {
            "type": "tool_result",
            "tool_use_id": r.call_id,
            "content": _content(r, max_length, attachments),
            "is_error": r.status != "ok",
        }
        for r in results
    ]


def _content(
    result: ToolResult, max_length: int, attachments: Literal["native", "text"]
) -> str | list[Content]:
    blocks = anthropic_content(result, max_length) if attachments == "native" else None
    if blocks is None:
        return result_text(result, max_length)
    return cast("list[Content]", blocks)


def tool_results_message(
    results: Iterable[ToolResult],
    *,
    max_length: int = DEFAULT_MAX_LENGTH,
    attachments: Literal["native", "text"] = "native",
) -> MessageParam:
    """The user message that answers a turn: every result's `tool_result` block
    (`tool_result_blocks`), in order, in one `{"role": "user", "content": [...]}`,
    as Anthropic requires after an assistant message with `tool_use` blocks.
    """
    blocks = tool_result_blocks(results, max_length=max_length, attachments=attachments)
    return {"role": "user", "content": blocks}


def tool_definitions(source: ToolSource, *, step: StepContext | None = None) -> list[ToolParam]:
    """The tools in the Messages API's `tools` format: `{name, description,
    input_schema}`, the schema being the tool's own JSON schema.

    A custom tool is offered as an object with one required string property,
    `CUSTOM_INPUT`; `tool_calls(..., registry=...)` hands that string to the
    tool as its raw input. A registry's tools are those enabled at `step`
    (None: the current step); other tools are taken as given (`Executor.offered`).
    ValueError names a tool whose name Anthropic refuses (it takes 1 to 64
    ASCII letters, digits, `_` or `-`; toolbus also allows `.` and up to 128).
    """
    out: list[ToolParam] = []
    for tool in tools_of(source, step):
        check_provider_name(tool.name, "Anthropic")
        if tool.type == "custom":
            schema: dict[str, Any] = {
                "type": "object",
                "properties": {
                    CUSTOM_INPUT: {"type": "string", "description": "The input, as free text."}
                },
                "required": [CUSTOM_INPUT],
                "additionalProperties": False,
            }
        else:
            schema = tool.schema or {"type": "object", "properties": {}}
        entry: ToolParam = {"name": tool.name, "input_schema": schema}
        if tool.description:
            entry["description"] = tool.description
        out.append(entry)
    return out
