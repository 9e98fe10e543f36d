"""An MCP server's tool as a toolbus `Tool`, and its results as toolbus outputs."""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types

from ..models import Attachment, ToolOutput
from ..retry import RetryPolicy
from ..tools import Tool, ToolContext, ToolError
from ._actor import SessionPort

__all__ = ["MCPTool", "tool_output"]

log = logging.getLogger("toolbus.mcp")


class MCPTool(Tool):
    """A tool of an MCP server, run on that server through its connection.

    Its name, description and JSON schema are the server's (under an optional
    prefix); `read_only` comes from the tool's `readOnlyHint` annotation.
    toolbus validates the arguments against the schema, then `run` sends the
    call to the server. The executor's timeout, retry, concurrency and masking
    rules apply as to any tool; a timeout or cancellation cancels the request
    on the server.
    """

    # Its calls go through this process's live session to the server.
    process_local = True

    def __init__(
        self,
        spec: types.Tool,
        port: SessionPort,
        *,
        name: str | None = None,
        read_only: bool | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        self.spec = spec
        self.remote_name = spec.name
        self.server = port.name
        self._port = port
        self.name = name or spec.name
        self.description = spec.description or spec.title or ""
        self.parameters = spec.input_schema
        hint = spec.annotations.read_only_hint if spec.annotations is not None else None
        self.read_only = bool(hint) if read_only is None else read_only
        self.timeout = timeout
        self.retry = retry
        self.max_concurrency = max_concurrency
        super().__init__()

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> Any:
        """Call the tool on the server; its error results raise `ToolError`.

        The server's progress notifications become `tool:progress` events.
        """

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if message is None:
                message = f"{progress:g}/{total:g}" if total else f"{progress:g}"
            fraction = progress / total if total else None
            ctx.progress(message, fraction, progress=progress, total=total)

        result = await self._port.call(
            self.remote_name, params, read_only=self.read_only, progress=on_progress
        )
        return tool_output(result, server=self.server)


def tool_output(result: types.CallToolResult, *, server: str) -> ToolOutput:
    """The toolbus output of an MCP tool result; raise `ToolError` for an error result.

    Structured content, when the server sent it, is the output; otherwise the
    text blocks, joined. Images, audio, blobs and resource links become
    attachments (`type` is the MIME type, `data` base64); embedded text
    resources are added to the text.
    """
    texts: list[str] = []
    attachments: list[Attachment] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            attachments.append(Attachment(type=block.mime_type, data=block.data))
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
                texts.append(res.text)
            else:
                attachments.append(
                    Attachment(
                        type=res.mime_type or "application/octet-stream",
                        url=str(res.uri),
                        data=res.blob,
                    )
                )
        else:
            log.debug("MCP server '%s' sent a %s block; ignored", server, type(block).__name__)
    text = "\n".join(texts)
    if result.is_error:
        raise ToolError(text or f"the MCP server '{server}' reported an error without a message")
    content = result.structured_content if result.structured_content is not None else text
    return ToolOutput(
        content=content, attachments=tuple(attachments), metadata={"mcp_server": server}
    )
