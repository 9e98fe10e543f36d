"""Attachments a provider format can carry as its own blocks: images and files.

A result's attachments (`ToolResult.attachments`: an MCP server's images,
embedded files and resource links, or a tool's own) reach a model in one of
two ways. Those with data (base64) of a type the format takes go as native
blocks: an image as an image, a PDF or a text file as a document. The rest,
and every attachment that is only a link (a URL, no data), stay what they
always were: a `[attachment: type title]` line in the result's text.

- images (PNG, JPEG, GIF, WebP): an Anthropic `image` block, an OpenAI
  Responses `input_image`; for Chat Completions (tool messages are text only)
  a text line, and an `image_url` part of `chat_attachment_message`;
- PDFs: an Anthropic `document` block (base64), a Responses `input_file`; for
  Chat a text line, and a `file` part of `chat_attachment_message`;
- UTF-8 text (`text/*`, JSON, XML, YAML): an Anthropic `document` block (text
  source), a Responses `input_file`; for Chat a text line.

Nothing here imports a provider SDK.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from collections.abc import Iterable
from typing import Any, Literal
from urllib.parse import urlparse

from .._text import text_of as writable
from ..models import Attachment, ToolResult
from ._common import result_text

__all__ = [
    "Kind",
    "Native",
    "anthropic_content",
    "chat_attachment_parts",
    "data_url",
    "file_name",
    "kind_of",
    "media_type",
    "native_attachments",
    "responses_output",
    "text_of",
]

Kind = Literal["image", "pdf", "text"]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# Decoded sizes past which a blob goes as a text line: the providers refuse the
# whole request for one image over 5 MB (Anthropic) or a file over 32 MB.
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_FILE_BYTES = 32 * 1024 * 1024
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/yaml"})


class Native:
    """A result split for a format: the text the model reads (None when there is
    none to send) and the attachments that go as blocks of their own, in order."""

    __slots__ = ("attachments", "text")

    def __init__(self, text: str | None, attachments: list[tuple[Kind, Attachment]]) -> None:
        self.text = text
        self.attachments = attachments


def media_type(attachment: Attachment) -> str:
    return attachment.type.split(";", 1)[0].strip().lower()


def kind_of(attachment: Attachment) -> Kind | None:
    """How a format may carry `attachment` natively; None: only as a text line."""
    if not attachment.data:
        return None  # a link: the model cannot open it, its line names it
    mime = media_type(attachment)
    if mime in IMAGE_TYPES:
        return "image" if _sound(attachment.data, MAX_IMAGE_BYTES) else None
    if mime == "application/pdf":
        return "pdf" if _sound(attachment.data, MAX_FILE_BYTES) else None
    if (mime.startswith("text/") or mime in TEXT_TYPES) and text_of(attachment) is not None:
        return "text"
    return None


def _sound(data: str, limit: int) -> bool:
    """Whether `data` is strict base64 of at most `limit` bytes: a server's bad
    or oversized blob would make the provider refuse the whole request, so it
    goes as a text line instead."""
    if len(data) // 4 * 3 > limit + 2:
        return False  # (too big: not worth decoding)
    try:
        return len(base64.b64decode(data, validate=True)) <= limit
    except ValueError:  # binascii.Error: not base64 (or whitespace inside)
        return False


def native_attachments(
    result: ToolResult, kinds: frozenset[Kind], max_length: int
) -> Native | None:
    """`result` for a format that carries `kinds` natively, or None when it has
    no such attachment (its plain text is then all there is to send).

    The text is `result_text` of the result without the native attachments (so
    their lines are not repeated); None when that would say only "(no output)".
    """
    if result.status != "ok" or not result.attachments:
        return None
    native: list[tuple[Kind, Attachment]] = []
    rest: list[Attachment] = []
    for attachment in result.attachments:
        kind = kind_of(attachment)
        if kind is not None and kind in kinds:
            native.append((kind, attachment))
        else:
            rest.append(attachment)
    if not native:
        return None
    if result.output in (None, "") and not rest:
        return Native(None, native)
    text = result_text(result.model_copy(update={"attachments": tuple(rest)}), max_length)
    return Native(text, native)


def data_url(attachment: Attachment) -> str:
    """The attachment's data as a `data:` URL (what OpenAI takes for images and files)."""
    return writable(f"data:{media_type(attachment)};base64,{attachment.data}")


def text_of(attachment: Attachment) -> str | None:
    """The attachment's data decoded as UTF-8 text; None if it is not."""
    try:
        return base64.b64decode(attachment.data or "", validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


_EXTENSIONS = {"application/pdf": ".pdf", "text/plain": ".txt", "application/json": ".json"}


def file_name(attachment: Attachment) -> str:
    """A file name for the attachment: the last part of its URL, else its title,
    else `attachment` with the type's extension; a lone surrogate (a name
    decoded with `surrogateescape`) as U+FFFD, which UTF-8 can carry."""
    if attachment.url:
        name = posixpath.basename(urlparse(attachment.url).path)
        if name:
            return writable(name)
    if attachment.title:
        return writable(attachment.title)
    return "attachment" + _EXTENSIONS.get(media_type(attachment), "")


# -- the blocks of each format (plain dicts; the writers type them) ---------------------

ALL_KINDS: frozenset[Kind] = frozenset({"image", "pdf", "text"})
CHAT_KINDS: frozenset[Kind] = frozenset({"image", "pdf"})


def anthropic_content(result: ToolResult, max_length: int) -> list[dict[str, Any]] | None:
    """A `tool_result`'s content blocks: its text, then an `image` or `document`
    block per native attachment; None when it has none (the text alone is sent)."""
    split = native_attachments(result, ALL_KINDS, max_length)
    if split is None:
        return None
    blocks: list[dict[str, Any]] = []
    if split.text is not None:
        blocks.append({"type": "text", "text": split.text})
    for kind, a in split.attachments:
        if kind == "image":
            source = {"type": "base64", "media_type": media_type(a), "data": a.data}
            blocks.append({"type": "image", "source": source})
            continue
        if kind == "pdf":
            source = {"type": "base64", "media_type": "application/pdf", "data": a.data}
        else:
            source = {"type": "text", "media_type": "text/plain", "data": text_of(a)}
        document: dict[str, Any] = {"type": "document", "source": source}
        if a.title:
            document["title"] = writable(a.title)
        blocks.append(document)
    return blocks


def responses_output(result: ToolResult, max_length: int) -> list[dict[str, Any]] | None:
    """A Responses call output's parts: `input_text`, then an `input_image` or
    `input_file` per native attachment; None when it has none."""
    split = native_attachments(result, ALL_KINDS, max_length)
    if split is None:
        return None
    parts: list[dict[str, Any]] = []
    if split.text is not None:
        parts.append({"type": "input_text", "text": split.text})
    for kind, a in split.attachments:
        if kind == "image":
            parts.append({"type": "input_image", "image_url": data_url(a)})
        else:
            parts.append({"type": "input_file", "file_data": data_url(a), "filename": file_name(a)})
    return parts


def chat_attachment_parts(results: Iterable[ToolResult], max_length: int) -> list[dict[str, Any]]:
    """The content parts of a Chat user message with the results' images and PDFs."""
    parts: list[dict[str, Any]] = []
    for r in results:
        split = native_attachments(r, CHAT_KINDS, max_length)
        if split is None:
            continue
        heading = f"Attachments of tool call {r.call_id} ({r.name}):"
        parts.append({"type": "text", "text": writable(heading)})
        for kind, a in split.attachments:
            if kind == "image":
                parts.append({"type": "image_url", "image_url": {"url": data_url(a)}})
            else:
                parts.append(
                    {"type": "file", "file": {"file_data": data_url(a), "filename": file_name(a)}}
                )
    return parts
