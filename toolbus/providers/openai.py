"""OpenAI's formats: Chat Completions and the Responses API.

Read the tool calls a model made, write the results back, export tools::

    from toolbus.providers import openai as tb

    completion = client.chat.completions.create(
        model=model, messages=messages, tools=tb.chat_tool_definitions(registry)
    )
    calls = tb.chat_tool_calls(completion)
    batch = executor.execute_batch(calls)
    messages += [tb.chat_assistant_message(completion), *tb.chat_tool_messages(batch)]

Every reader accepts the SDK's objects (including the final object a stream
helper reassembles, such as `stream.get_final_completion()`) and their JSON as
plain dicts. Nothing here imports the `openai` package: install the `openai`
extra for the client, not for this module.

One piece: OpenAI's two APIs share their reading of arguments, results and
strict schemas; they are the one provider module a user imports for OpenAI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from .._errors import ArgumentError
from ..models import ToolCall, ToolResult
from ..tools import StepContext, ToolRegistry, parse_json_arguments
from ..tools._names import check_provider_name
from ..tools._schemas import CUSTOM_INPUT
from ._common import (
    DEFAULT_MAX_LENGTH,
    StrictSchemaError,
    ToolSource,
    as_dict,
    call_arguments,
    custom_arguments,
    fallback_call_id,
    json_text,
    plain,
    result_text,
    strict_schema,
    tools_of,
    without_strict_nulls,
)
from ._media import chat_attachment_parts, responses_output
from ._shapes import Use, foreign_to, shape_of, wrong_shape

if TYPE_CHECKING:
    from typing import TypeAlias

    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionAssistantMessageParam,
        ChatCompletionContentPartParam,
        ChatCompletionMessage,
        ChatCompletionMessageToolCallUnionParam,
        ChatCompletionToolMessageParam,
        ChatCompletionToolUnionParam,
        ChatCompletionUserMessageParam,
    )
    from openai.types.chat.chat_completion import Choice
    from openai.types.chat.chat_completion_custom_tool_param import Custom
    from openai.types.responses import (
        FunctionToolParam,
        Response,
        ResponseFunctionCallOutputItemParam,
        ResponseInputItemParam,
        ToolParam,
    )
    from openai.types.shared_params import FunctionDefinition

    from ..tools import Tool

    ChatLike: TypeAlias = (
        ChatCompletion | Choice | ChatCompletionMessage | Mapping[str, Any] | Sequence[Any]
    )
    """A Chat Completions response, one of its choices, or its message (object
    or dict), or the message's bare `tool_calls` list."""
    ResponseLike: TypeAlias = Response | Mapping[str, Any] | Iterable[Any]
    """A Responses API response (object or dict), or its output items."""

__all__ = [
    "StrictSchemaError",
    "chat_assistant_message",
    "chat_attachment_message",
    "chat_text",
    "chat_tool_calls",
    "chat_tool_definitions",
    "chat_tool_messages",
    "drop_strict_nulls",
    "responses_output_items",
    "responses_text",
    "responses_tool_calls",
    "responses_tool_definitions",
    "responses_tool_outputs",
    "strict_schema",
]

# -- Chat Completions ---------------------------------------------------------------


_CHAT_EXPECTED = "a chat completion, a choice, its message or its tool_calls list"
_CHAT_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "function_call", "refusal"})


def _chat_message(completion: Any, choice: int, use: Use) -> dict[str, Any]:
    """The assistant message of a completion, a choice, the message itself, or
    one made around a bare `tool_calls` list.

    Anything else is refused, never read as a message without calls (which an
    agent loop would take for the model's answer): one call outside its list,
    another format's objects, a dict that is none of these.
    """
    if isinstance(completion, list | tuple):
        calls = [as_dict(item, "a chat tool call") for item in completion]
        for item in calls:
            # A list of something else (a completion's choices, the messages)
            # would read as calls with no name: refused, as a wrong object is.
            if _chat_call_kind(item) not in item:
                shape = shape_of(item)
                if shape is not None and shape != "chat_call":
                    raise wrong_shape(_CHAT_EXPECTED, shape, use, in_list=True)
                raise TypeError(f"expected {_CHAT_EXPECTED}; got a list holding {sorted(item)[:4]}")
        return {"role": "assistant", "content": None, "tool_calls": calls}
    data = as_dict(completion, "a chat completion or message")
    if isinstance(data.get("choices"), list) and data.get("object") != "chat.completion.chunk":
        choices = data["choices"]
        if not choices:
            return {"role": "assistant", "content": None}
        data = as_dict(choices[choice], "a chat completion choice")
    if isinstance(data.get("message"), Mapping) and "type" not in data:
        data = dict(data["message"])
    shape = shape_of(data)
    if shape == "chat_call":
        raise TypeError(
            f"expected {_CHAT_EXPECTED}; got one tool call, not a list:"
            " pass [call], or the message that holds it"
        )
    if shape not in (None, "chat_message"):
        raise wrong_shape(_CHAT_EXPECTED, shape, use)
    if not data.keys() & _CHAT_MESSAGE_KEYS:
        raise TypeError(f"expected {_CHAT_EXPECTED}; got a dict with keys {sorted(data)[:6]}")
    if use != "text" and data.get("function_call") and not data.get("tool_calls"):
        # The deprecated `functions` API: a call without an id, which no tool
        # message could answer. Read as no calls, the agent loop would stop.
        raise TypeError(
            f"expected {_CHAT_EXPECTED}; got a message with a legacy function_call (the"
            " deprecated `functions` API): ask the model with tools=, and read its tool_calls"
        )
    return data


def _call_from_chat(item: Any, index: int) -> ToolCall:
    data = as_dict(item, "a chat tool call")
    kind = _chat_call_kind(data)
    body = data.get(kind)
    if not isinstance(body, Mapping):
        body = {}
    key = "input" if kind == "custom" else "arguments"
    raw = body.get(key)
    name = str(body.get("name") or data.get("name") or "")
    fields: dict[str, Any] = {
        "name": name,
        "id": str(data["id"]) if data.get("id") else fallback_call_id(index, name, raw),
    }
    if key in body:  # (a null too: read as absent, the tool would run with its defaults)
        fields["arguments"] = (custom_arguments if kind == "custom" else call_arguments)(raw)
    return ToolCall(**fields)


def _chat_call_kind(data: Mapping[str, Any]) -> str:
    return str(data.get("type") or ("custom" if "custom" in data else "function"))


def chat_tool_calls(completion: ChatLike, *, choice: int = 0) -> list[ToolCall]:
    """The tool calls of a Chat Completions response, in the order the model made them.

    `completion` is a `ChatCompletion` (or its dict), one of its choices, the
    assistant message itself, or the message's bare `tool_calls` list (objects
    or dicts); for a completion, choice `choice` is read.
    Function calls keep the model's raw JSON arguments (the executor parses
    them, and rejects malformed JSON with `INVALID_ARGUMENTS`); custom tool
    calls carry the model's raw text input. Ids are the model's
    `tool_call_id`s. A message without tool calls gives `[]`; anything else
    (one call outside its list, another format's objects) raises `TypeError`.
    """
    message = _chat_message(completion, choice, "calls")
    return [_call_from_chat(item, i) for i, item in enumerate(message.get("tool_calls") or ())]


def chat_assistant_message(
    completion: ChatLike, *, choice: int = 0
) -> ChatCompletionAssistantMessageParam:
    """The model's message as the dict to append to `messages` before the tool
    results: `role`, `content` (may be None) and, when it made calls,
    `tool_calls` with each call's id, type and raw arguments or input as sent.
    """
    message = _chat_message(completion, choice, "turn")
    out: ChatCompletionAssistantMessageParam = {
        "role": "assistant",
        "content": message.get("content"),
    }
    calls: list[ChatCompletionMessageToolCallUnionParam] = []
    for i, item in enumerate(message.get("tool_calls") or ()):
        call = _call_from_chat(item, i)
        args = call.arguments
        custom = _chat_call_kind(item) == "custom"
        if isinstance(args, dict) and custom:  # (input not text: echoed as the model sent it)
            args = json_text(args.get(CUSTOM_INPUT))
        raw = args if isinstance(args, str) else json_text(args)
        if custom:
            calls.append(
                {"id": call.id, "type": "custom", "custom": {"name": call.name, "input": raw}}
            )
        else:
            calls.append(
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": raw},
                }
            )
    if calls:
        out["tool_calls"] = calls
    if message.get("refusal"):
        out["refusal"] = message["refusal"]
    return out


def chat_text(completion: ChatLike, *, choice: int = 0) -> str:
    """The text of the model's message (`""` when it only made calls); a
    content given as parts is their text, joined."""
    content = _chat_message(completion, choice, "text").get("content")
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return str(content or "")


def chat_tool_messages(
    results: Iterable[ToolResult], *, max_length: int = DEFAULT_MAX_LENGTH
) -> list[ChatCompletionToolMessageParam]:
    """One `{"role": "tool", "tool_call_id", "content"}` message per result, in
    the order given (a `BatchResult` keeps the calls' order, as Chat requires).

    `content` is what `result_text` gives: the output, or
    `Error: ... (ERROR_CODE)` for errors, timeouts and rejections, so that the
    model can act on them.
    """
    return [
        {"role": "tool", "tool_call_id": r.call_id, "content": result_text(r, max_length)}
        for r in results
    ]


def chat_attachment_message(
    results: Iterable[ToolResult],
) -> ChatCompletionUserMessageParam | None:
    """A user message with the images and PDFs of `results`, to send after
    their tool messages; None when they have none.

    Chat Completions tool messages carry text only: there an image is the line
    `[attachment: image/png ...]` of its result's text. A model that should
    see it needs it in a user message: for each successful result with
    attachments of those types (with data), a text part naming the call, then
    an `image_url` part per image (a `data:` URL) and a `file` part per PDF.
    Append the message after every tool message of the turn, as Chat requires
    the tool messages to follow the assistant's message directly.
    """
    parts = chat_attachment_parts(results, DEFAULT_MAX_LENGTH)
    if not parts:
        return None
    return {"role": "user", "content": cast("list[ChatCompletionContentPartParam]", parts)}


def chat_tool_definitions(
    source: ToolSource, *, strict: bool = False, step: StepContext | None = None
) -> list[ChatCompletionToolUnionParam]:
    """The tools in Chat Completions' `tools` format.

    Function tools: `{"type": "function", "function": {name, description,
    parameters}}`; with `strict=True`, their schemas are made strict
    (`strict_schema`) and marked `"strict": true`. Custom tools:
    `{"type": "custom", "custom": {name, description}}` (free-text input).
    Raises `StrictSchemaError` naming the tool whose schema cannot be strict,
    and ValueError naming one whose name OpenAI refuses (OpenAI takes 1 to 64
    ASCII letters, digits, `_` or `-`; toolbus also allows `.` and up to 128).
    A registry's tools are those enabled at `step` (`Tool.is_enabled`; None:
    the current step); other tools are taken as given (`Executor.offered`).
    """
    out: list[ChatCompletionToolUnionParam] = []
    for tool in tools_of(source, step):
        check_provider_name(tool.name, "OpenAI")
        if tool.type == "custom":
            custom: Custom = {"name": tool.name}
            if tool.description:
                custom["description"] = tool.description
            out.append({"type": "custom", "custom": custom})
            continue
        function: FunctionDefinition = {"name": tool.name}
        if tool.description:
            function["description"] = tool.description
        function["parameters"] = _parameters(tool, strict)
        if strict:
            function["strict"] = True
        out.append({"type": "function", "function": function})
    return out


# -- Responses API -------------------------------------------------------------------

_CALL_TYPES = ("function_call", "custom_tool_call")


_RESPONSES_EXPECTED = "a Responses API response, its output list, or one item"
_NOT_RESPONSES = foreign_to("responses")


def _items(response: Any, use: Use) -> list[dict[str, Any]]:
    """The output items of a `Response` (or its dict), or a list of items as they are.

    Another format's objects (a chat completion, message or tool calls, an
    Anthropic message or its blocks, alone or in the list) are refused, never
    read as a response without calls.
    """
    if isinstance(response, Mapping) or hasattr(response, "model_dump"):
        data = as_dict(response, "a response")
        shape = shape_of(data)
        if shape in _NOT_RESPONSES:
            raise wrong_shape(_RESPONSES_EXPECTED, shape, use)
        if "output" in data:
            found = data["output"] or []
        elif "type" in data:
            found = [data]
        else:
            raise TypeError(
                f"expected {_RESPONSES_EXPECTED}; got a dict with keys {sorted(data)[:6]}"
            )
    else:
        found = plain(list(response))
    items = [as_dict(item, "a response output item") for item in found]
    for item in items:
        shape = shape_of(item)
        if shape in _NOT_RESPONSES:
            raise wrong_shape(_RESPONSES_EXPECTED, shape, use, in_list=True)
    return items


def _call_key(item: Mapping[str, Any]) -> str:
    return "input" if item.get("type") == "custom_tool_call" else "arguments"


def _call_id(item: Mapping[str, Any], index: int) -> str:
    """A call item's `call_id`, or the one made up for it (`index`: its place in the output)."""
    if item.get("call_id"):
        return str(item["call_id"])
    return fallback_call_id(index, str(item.get("name") or ""), item.get(_call_key(item)))


def _call_from_item(item: Mapping[str, Any], index: int) -> ToolCall:
    key = _call_key(item)
    raw = item.get(key)
    fields: dict[str, Any] = {"name": str(item.get("name") or ""), "id": _call_id(item, index)}
    if key in item:  # (a null too: read as absent, the tool would run with its defaults)
        fields["arguments"] = (custom_arguments if key == "input" else call_arguments)(raw)
    return ToolCall(**fields)


def responses_tool_calls(response: ResponseLike) -> list[ToolCall]:
    """The calls to your tools in a Responses API response, in output order.

    `response` is a `Response` (or its dict) or its `output` list. Reads
    `function_call` items (raw JSON arguments, parsed and checked by the
    executor) and `custom_tool_call` items (raw text input); a call's id is its
    `call_id`. Other items (messages, reasoning, built-in tools the API ran
    itself) are not calls to your tools and are skipped. Another format's
    objects (chat completions, messages, tool calls; Anthropic messages and
    blocks) raise `TypeError`, alone or in the list.
    """
    return [
        _call_from_item(item, i)
        for i, item in enumerate(_items(response, "calls"))
        if item.get("type") in _CALL_TYPES
    ]


def responses_output_items(response: ResponseLike) -> list[ResponseInputItemParam]:
    """Every output item of `response`, as dicts to append to the next request's
    `input` (reasoning items included, which reasoning models need back), in
    the form the SDK itself sends them; a call item without a `call_id` gets
    the one `responses_tool_calls` made up for it, which its output answers.
    """
    items = _items(response, "turn")
    for index, item in enumerate(items):
        if item.get("type") in _CALL_TYPES and not item.get("call_id"):
            item["call_id"] = _call_id(item, index)  # the id its output will answer
    return cast("list[ResponseInputItemParam]", items)


def responses_text(response: ResponseLike) -> str:
    """The text of every `output_text` part of the response's messages, joined
    (what the SDK's `Response.output_text` gives, for dicts too)."""
    return "".join(
        str(part.get("text") or "")
        for item in _items(response, "text")
        if item.get("type") == "message"
        for part in item.get("content") or ()
        if isinstance(part, Mapping) and part.get("type") == "output_text"
    )


def responses_tool_outputs(
    results: Iterable[ToolResult],
    response: ResponseLike,
    *,
    max_length: int = DEFAULT_MAX_LENGTH,
    attachments: Literal["native", "text"] = "native",
) -> list[ResponseInputItemParam]:
    """One output item per result, in the order given: `function_call_output`
    for a `function_call`, `custom_tool_call_output` for a `custom_tool_call`
    (matched by `call_id` in `response`, the response whose calls these results
    answer), each `{"type", "call_id", "output"}`.

    `output` is what `result_text` gives: the output, or
    `Error: ... (ERROR_CODE)` for errors, timeouts and rejections. A
    successful result's images (PNG, JPEG, GIF, WebP) and files (PDF, UTF-8
    text) with data make `output` a list: an `input_text` part, then an
    `input_image` or `input_file` part each (`data:` URLs); attachments that are
    links, and other types, stay a line of the text. `attachments="text"`:
    every attachment as a line of text.
    """
    custom = {
        _call_id(item, index)
        for index, item in enumerate(_items(response, "calls"))
        if item.get("type") == "custom_tool_call"
    }
    out: list[ResponseInputItemParam] = []
    for r in results:
        output = _responses_output(r, max_length, attachments)
        kind = "custom_tool_call_output" if r.call_id in custom else "function_call_output"
        out.append(
            cast("ResponseInputItemParam", {"type": kind, "call_id": r.call_id, "output": output})
        )
    return out


def _responses_output(
    result: ToolResult, max_length: int, attachments: Literal["native", "text"]
) -> str | list[ResponseFunctionCallOutputItemParam]:
    parts = responses_output(result, max_length) if attachments == "native" else None
    if parts is None:
        return result_text(result, max_length)
    return cast("list[ResponseFunctionCallOutputItemParam]", parts)


def responses_tool_definitions(
    source: ToolSource, *, strict: bool = False, step: StepContext | None = None
) -> list[ToolParam]:
    """The tools in the Responses API's `tools` format.

    Function tools: `{"type": "function", name, description, parameters,
    strict}`; `strict` is always sent, because the Responses API decides for
    itself when it is left out. With `strict=True` the schemas are made strict
    (`strict_schema`). Custom tools: `{"type": "custom", name, description}`.
    Raises `StrictSchemaError` naming the tool whose schema cannot be strict,
    and ValueError naming one whose name OpenAI refuses. Which tools: as
    `chat_tool_definitions` says (`step`).
    """
    out: list[ToolParam] = []
    for tool in tools_of(source, step):
        check_provider_name(tool.name, "OpenAI")
        if tool.type == "custom":
            if tool.description:
                out.append({"type": "custom", "name": tool.name, "description": tool.description})
            else:
                out.append({"type": "custom", "name": tool.name})
            continue
        function: FunctionToolParam = {
            "type": "function",
            "name": tool.name,
            "parameters": _parameters(tool, strict),
            "strict": strict,
        }
        if tool.description:
            function["description"] = tool.description
        out.append(function)
    return out


# -- shared by both APIs ----------------------------------------------------------------


def _parameters(tool: Tool, strict: bool) -> dict[str, Any]:
    schema = tool.schema or {"type": "object", "properties": {}}
    if not strict:
        return schema
    try:
        return strict_schema(schema)
    except StrictSchemaError as e:
        raise StrictSchemaError(f"tool {tool.name!r}: {e}") from None


def drop_strict_nulls(calls: Iterable[ToolCall], registry: ToolRegistry) -> list[ToolCall]:
    """The calls without the nulls strict mode makes a model send for optional fields.

    With strict schemas a model must send every field, and sends null for
    those it leaves out; a tool whose parameter is optional but not nullable
    would reject that. For each call to a function tool of `registry`, nulls
    under properties its own schema neither requires nor lets be null are
    removed (`without_strict_nulls`). Calls to unknown or custom tools, calls
    without such nulls and arguments that are not a JSON object are returned
    unchanged, so malformed JSON still reaches the executor as it came; so
    are arguments the executor refuses (text nesting past 254 levels) and
    those too deep to walk: this never raises for what a model sent.
    """
    out: list[ToolCall] = []
    for call in calls:
        tool = registry.get(call.name)
        args: Any = call.arguments
        if tool is not None and tool.type == "function" and isinstance(args, str):
            try:
                args = parse_json_arguments(args)
            except ArgumentError:
                args = None
        if tool is None or tool.type != "function" or not isinstance(args, dict):
            out.append(call)
            continue
        try:
            cleaned = without_strict_nulls(args, tool.schema, tool.schema)
            same = cleaned == args
        except RecursionError:  # a dict nesting past Python's stack: the executor refuses it
            same = True
        out.append(call if same else call.with_arguments(cleaned))
    return out
