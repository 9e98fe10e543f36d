"""Base64 data cleaned as the text it encodes (an attachment's, a `data:` URL's).

A secret in base64 does not show to a search of the base64, so the bytes
are read as text, cleaned, and written back. Every reading that anything
downstream may make of them is cleaned: the charset the data declares, the
same with its undecodable bytes replaced (a stray byte of UTF-16), UTF-8,
which is what the provider writers read whatever the charset says, and, for
text holding NUL bytes, UTF-16 of either byte order (without its mark, or
under another charset's name). Bytes of a type that does not declare text
are read only as strict UTF-8: an image's bytes are left as they are.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

__all__ = ["cleaned_data"]

_TEXT_TYPES = frozenset({"application/json", "application/xml", "application/yaml"})


def cleaned_data(clean: Callable[[str], str], media_type: str, data: str) -> str:
    """`data` (base64 of `media_type`) with its text passed through `clean`;
    `data` itself if nothing changed, or if it is not base64."""
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:  # not base64 (binascii.Error)
        return data
    mime, _, params = media_type.partition(";")
    mime = mime.strip().lower()
    if mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        charset = "utf-8"
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "charset":
                charset = value.strip().strip('"').lower() or "utf-8"
        readings = dict.fromkeys(
            ((charset, "surrogateescape"), (charset, "replace"), ("utf-8", "surrogateescape"))
        )
        if b"\x00" in raw:  # UTF-16 without its byte-order mark, or mislabelled
            readings.update(dict.fromkeys((("utf-16-le", "replace"), ("utf-16-be", "replace"))))
    else:
        readings = dict.fromkeys((("utf-8", "strict"),))
    cleaned = raw
    for codec, errors in readings:
        cleaned = _cleaned_bytes(clean, cleaned, codec, errors)
    return data if cleaned is raw else base64.b64encode(cleaned).decode("ascii")


def _cleaned_bytes(clean: Callable[[str], str], raw: bytes, codec: str, errors: str) -> bytes:
    """`raw` read as text in `codec`, cleaned and written back in it; `raw`
    itself if that reading holds nothing to clean, or cannot be made."""
    try:
        text = raw.decode(codec, errors)
    except Exception:  # an unknown codec, one that is no text codec ("idna"), no text
        return raw
    cleaned = clean(text)
    if cleaned == text:
        return raw
    for write_as, write_errors in ((codec, errors), (codec, "replace"), ("utf-8", "replace")):
        try:
            return cleaned.encode(write_as, write_errors)
        except Exception:  # what the codec cannot write (a scanner's replacement)
            continue
    return cleaned.encode("utf-8", "surrogatepass")  # (never reached: UTF-8 writes any text)
