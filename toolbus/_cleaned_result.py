"""`cleaned_result`: a tool's result passed through a cleaner (a `Scrubber`,
a content scanner), every part a model or a listener reads: its output,
error, metadata and attachments (their data as the text it encodes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ._encoded_text import cleaned_data

if TYPE_CHECKING:
    from .models import Attachment, ToolResult

__all__ = ["cleaned_result"]


class _Cleaner(Protocol):
    def text(self, text: str) -> str: ...
    def value(self, value: Any) -> Any: ...


def cleaned_result(cleaner: _Cleaner, result: ToolResult) -> ToolResult:
    """`result` with its output, error, metadata and attachments passed
    through `cleaner` (a `Scrubber`, a content scanner); `result` itself
    where nothing changes."""
    update = {
        "output": cleaner.value(result.output),
        "error": cleaner.text(result.error) if result.error else result.error,
        "metadata": cleaner.value(result.metadata),
        "attachments": tuple(_cleaned_attachment(cleaner, a) for a in result.attachments),
    }
    if all(update[k] is getattr(result, k) for k in ("output", "error", "metadata")) and all(
        a == b for a, b in zip(update["attachments"], result.attachments, strict=True)
    ):
        return result
    return result.model_copy(update=update)


def _cleaned_attachment(cleaner: _Cleaner, attachment: Attachment) -> Attachment:
    # Its type too: a model reads it in the attachment's line, a tool may make it
    # of anything. Its data, and a base64 `data:` URL's, as the text they encode
    # (their base64 hides a secret from a search); as they are too, in case a
    # tool put plain text where base64 belongs.
    url = attachment.url
    if url is not None and url[:5].lower() == "data:":
        head, _, payload = url.partition(",")
        if head.lower().endswith(";base64"):
            url = f"{head},{cleaned_data(cleaner.text, head[5:-7] or 'text/plain', payload)}"
    data = attachment.data
    if data:
        data = cleaned_data(cleaner.text, attachment.type, data)
    fields = {"type": attachment.type, "url": url, "data": data, "title": attachment.title}
    return attachment.model_copy(update=cleaner.value(fields))
