"""An MCP tool result as a toolbus output, checked against the tool's `outputSchema`.

A tool that declares an `outputSchema` promises structured content that
matches it (MCP 2025-06-18). A result that breaks the promise is an error the
model can read, naming the field, and never an output: code downstream relies
on the shape. The message quotes the schema's rule, never the value, which may
be anything the server sent.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import jsonschema
import mcp_types as types
from jsonschema.exceptions import ValidationError, best_match
from referencing.exceptions import Unresolvable

from ..models import Attachment, ErrorCode, ToolOutput
from ..tools import ToolError
from ._errors import MCPOutputError, field_at
from ._server_output import (
    ATTACHMENT_MARK,
    ATTACHMENT_TITLE,
    ATTACHMENT_URI,
    ATTACHMENT_URL,
    RESULT_KEY,
    attachment_data,
)

__all__ = [
    "OutputCheck",
    "mismatch",
    "schema_validator",
    "sdk_output_error",
    "skip_sdk_output_check",
    "tool_output",
]

log = logging.getLogger("toolbus.mcp")

# The SDK's own check raises RuntimeErrors with these texts (mcp 2.3,
# ClientSession.validate_tool_result); they become MCPOutputError here.
_SDK_MISMATCH = "Invalid structured content returned by tool"
_SDK_MISSING = "has an output schema but did not return structured content"
_SDK_BAD_SCHEMA = "Invalid schema for tool"
_RULE_TEXT_CAP = 200


def tool_output(result: types.CallToolResult, *, server: str, unwrap: bool = False) -> ToolOutput:
    """The toolbus output of an MCP tool result; raise `ToolError` for an error result.

    Structured content, when the server sent it, is the output (with `unwrap`,
    what it holds under `"result"`: the server wrapped a value that is not an
    object); otherwise the text blocks, joined. Images, audio, blobs and
    resource links become attachments (`type` is the MIME type, `data`
    base64); embedded text resources are added to the text, except a toolbus
    server's attachments (marked), which become attachments again.
    """
    texts: list[str] = []
    attachments: list[Attachment] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            url, title = _marked(block.meta, None)
            attachments.append(
                Attachment(type=block.mime_type, data=block.data, url=url, title=title)
            )
        elif isinstance(block, types.ResourceLink):
            attachments.append(
                Attachment(
                    type=block.mime_type or "resource",
                    url=str(block.uri),
                    title=block.title or block.name,
                )
            )
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                if not _ours(block.meta):
                    texts.append(res.text)
                    continue
                mime, data = res.mime_type or "text/plain", attachment_data(res.text)
            else:
                mime, data = res.mime_type or "application/octet-stream", res.blob
            uri = str(res.uri)
            url, title = _marked(block.meta, None if uri.startswith(ATTACHMENT_URI) else uri)
            attachments.append(Attachment(type=mime, url=url, data=data, title=title))
        else:
            log.debug("MCP server '%s' sent a %s block; ignored", server, type(block).__name__)
    text = "\n".join(texts)
    if result.is_error:
        raise ToolError(
            _without_own_code(text, result.meta)
            or f"the MCP server '{server}' reported an error without a message"
        )
    content = result.structured_content if result.structured_content is not None else text
    if unwrap and isinstance(content, dict) and RESULT_KEY in content:
        content = content[RESULT_KEY]
    return ToolOutput(
        content=content, attachments=tuple(attachments), metadata={"mcp_server": server}
    )


def _marked(meta: dict[str, Any] | None, url: str | None) -> tuple[str | None, str | None]:
    """(url, title) of a toolbus server's attachment, from its block's `_meta`
    (`url`: the block's own, when it has one); other servers' blocks: (url, None)."""
    if meta is None or not _ours(meta):
        return url, None
    given, title = meta.get(ATTACHMENT_URL), meta.get(ATTACHMENT_TITLE)
    return (
        given if isinstance(given, str) else url,
        title if isinstance(title, str) else None,
    )


def _ours(meta: dict[str, Any] | None) -> bool:
    """Whether a block is a toolbus server's attachment (its `_meta` mark)."""
    return meta is not None and meta.get(ATTACHMENT_MARK) is True


def _without_own_code(text: str, meta: dict[str, Any] | None) -> str:
    """A toolbus server's error text ends with its code ("... (TOOL_ERROR)"),
    which this side's result carries again: said once, not twice."""
    code = (meta or {}).get("toolbus/error_code")
    suffix = f" ({code})"
    if code == ErrorCode.TOOL_ERROR.value and text.endswith(suffix):
        return text[: -len(suffix)]
    return text


class OutputCheck:
    """Checks results against one tool's `outputSchema` (compiled once).

    This is the only check of a result (the SDK's own is switched off for
    toolbus's sessions, `skip_sdk_output_check`). A server's `pattern` may
    backtrack for minutes, and Python's `re` holds the GIL while it does: no
    thread of this process would run meanwhile, timeouts included. So a
    pattern that could backtrack catastrophically (`risky_pattern`) is
    matched in a child process, at most `PATTERN_SECONDS`; a schema with a
    pattern is checked in a thread of its own (`acheck`), so the executor's
    loop goes on and the call's timeout ends the wait.
    """

    def __init__(self, schema: dict[str, Any], *, server: str) -> None:
        self._validator = schema_validator(schema)
        self._server = server
        self._threaded = '"pattern' in json.dumps(schema, default=str)

    async def acheck(self, result: types.CallToolResult) -> None:
        """`check`, in a daemon thread when the schema has a regex (see above)."""
        if result.is_error or not self._threaded:
            self.check(result)
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if done.done():
                return  # the call timed out or was cancelled meanwhile
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

        def work() -> None:
            error: BaseException | None = None
            try:
                self.check(result)
            except Exception as e:
                error = e
            try:
                loop.call_soon_threadsafe(settle, error)
            except RuntimeError:
                pass  # the loop has closed: nobody waits

        # A daemon thread, not a pool's: a pool's threads are joined at exit,
        # and a match that runs for hours would keep the process alive.
        threading.Thread(target=work, name="toolbus-mcp-output-check", daemon=True).start()
        await done

    def check(self, result: types.CallToolResult) -> None:
        """Raise `MCPOutputError` unless `result` (not an error) matches the schema."""
        if result.is_error:
            return  # an error result carries no promise
        content = result.structured_content
        if content is None:
            raise MCPOutputError(_text(self._server, "it sent no structuredContent"))
        try:
            error = best_match(self._validator.iter_errors(content))
        except Unresolvable as e:  # a "$ref" the schema does not hold
            raise MCPOutputError(
                f"MCP server '{self._server}' declares an outputSchema that is not usable "
                f"JSON Schema: {_cap(str(e))}"
            ) from None
        if error is not None:
            raise MCPOutputError(_text(self._server, mismatch(error)))


def schema_validator(schema: dict[str, Any], *, formats: bool = False) -> Any:
    """A validator for a server's JSON Schema, its `pattern`s matched safely
    (`_pattern`); with `formats`, its `format`s checked too (those jsonschema
    knows: email, date, ...). Raises `jsonschema.SchemaError` for a schema
    that is not one."""
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)  # SchemaError: the caller decides
    cls = jsonschema.validators.extend(cls, {"pattern": _pattern})  # type: ignore[no-untyped-call]
    if formats:
        return cls(schema, format_checker=cls.FORMAT_CHECKER)
    return cls(schema)


# How long a risky pattern may take to match (in a child process) before the
# field counts as not matching.
PATTERN_SECONDS = 2.0

_MATCH_SCRIPT = (
    "import json, re, sys\n"
    "pattern, text = json.load(sys.stdin)\n"
    "sys.exit(0 if re.search(pattern, text) else 1)\n"
)


def _pattern(
    validator: Any, pattern: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    """jsonschema's `pattern` rule, with a risky regex matched out of process."""
    if not isinstance(instance, str) or not isinstance(pattern, str):
        return
    if not risky_pattern(pattern):
        if re.search(pattern, instance) is None:
            yield ValidationError(f"does not match {pattern!r}")
        return
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _MATCH_SCRIPT],
            input=json.dumps([pattern, instance]).encode(),
            capture_output=True,
            timeout=PATTERN_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        yield ValidationError(f"could not be checked against {pattern!r} in {PATTERN_SECONDS:g}s")
        return
    if done.returncode != 0:
        yield ValidationError(f"does not match {pattern!r}")


@functools.lru_cache(maxsize=256)
def risky_pattern(pattern: str) -> bool:
    """Whether `pattern` could backtrack catastrophically: a repetition inside
    a repetition (`(a+)+`), an alternation repeated (`(a|a)*`), or a
    backreference. Unparsable patterns count as risky."""
    try:
        import importlib

        # The stdlib's own parser (re._parser since 3.11; untyped, private).
        tree = importlib.import_module("re._parser").parse(pattern)
    except Exception:
        return True
    return _risky(list(tree), inside_repeat=False)


def _risky(items: list[Any], *, inside_repeat: bool) -> bool:
    for op, arg in items:
        name = str(op)
        if name in ("GROUPREF", "GROUPREF_EXISTS"):
            return True
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            if inside_repeat and high != low:
                return True
            if _risky(list(sub), inside_repeat=inside_repeat or high > 1):
                return True
        elif name == "BRANCH":
            if inside_repeat:
                return True
            if any(_risky(list(branch), inside_repeat=False) for branch in arg[1]):
                return True
        elif name == "SUBPATTERN":
            if _risky(list(arg[-1]), inside_repeat=inside_repeat):
                return True
        elif name in ("ASSERT", "ASSERT_NOT", "ATOMIC_GROUP"):
            sub = arg[-1] if isinstance(arg, tuple) else arg
            if _risky(list(sub), inside_repeat=inside_repeat):
                return True
    return False


def skip_sdk_output_check(client: Any) -> None:
    """Switch off the SDK's own outputSchema check for `client`'s session.

    `MCPTool` checks every result itself (`OutputCheck`), so the SDK's check
    would be a second one, and it runs on the session's loop, where a server's
    catastrophic `pattern` would stall every call to that server, beyond any
    timeout. (Not public API: should it change, both checks run, and
    `sdk_output_error` still turns the SDK's failures into `MCPOutputError`.)
    """
    try:
        session = client.session
    except Exception:  # not open: nothing to switch off
        return
    if not hasattr(session, "validate_tool_result"):
        return

    async def unchecked(name: str, result: types.CallToolResult) -> None:
        return None

    session.validate_tool_result = unchecked


def sdk_output_error(error: RuntimeError, *, server: str, tool: str) -> MCPOutputError | None:
    """The `MCPOutputError` for the SDK's own outputSchema check failing, or None
    when `error` is something else."""
    text = str(error)
    cause = error.__cause__
    if text.startswith(_SDK_MISMATCH):
        detail = mismatch(cause) if isinstance(cause, ValidationError) else "it does not match"
    elif _SDK_MISSING in text:
        detail = "it sent no structuredContent"
    elif text.startswith(_SDK_BAD_SCHEMA):
        return MCPOutputError(
            f"MCP server '{server}' declares an outputSchema for '{tool}' that is not "
            f"usable JSON Schema: {_cap(str(cause or text))}"
        )
    else:
        return None
    return MCPOutputError(_text(server, detail))


def mismatch(error: ValidationError) -> str:
    """What is wrong, naming the field and the rule (not the value)."""
    path: list[str | int] = list(error.absolute_path)
    rule, value, instance = error.validator, error.validator_value, error.instance
    if rule == "required" and isinstance(instance, dict) and isinstance(value, Iterable):
        missing = [n for n in value if n not in instance]
        if missing:
            return f"{_field([*path, missing[0]])} is missing (required)"
    if rule == "additionalProperties" and isinstance(instance, dict):
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = sorted(str(k) for k in instance if k not in known)
        if extra:
            return f"{_field([*path, extra[0]])} is not allowed (no additional properties)"
    if rule == "type" and isinstance(value, str | list):
        kinds = [value] if isinstance(value, str) else value
        return f"{_field(path)} should be of type {' or '.join(map(str, kinds))}"
    if rule is None:  # a `false` sub-schema: no value is allowed there
        return f"{_field(path)} is not allowed (its schema accepts no value)"
    return f"{_field(path)} does not satisfy {rule!r}: {_cap(repr(value))}"


def _field(path: list[str | int]) -> str:
    return field_at(path, "the structured content")


def _text(server: str, detail: str) -> str:
    return (
        f"MCP server '{server}' returned structured content that does not match "
        f"the tool's outputSchema: {detail}"
    )


def _cap(text: str) -> str:
    return text if len(text) <= _RULE_TEXT_CAP else text[: _RULE_TEXT_CAP - 3] + "..."
