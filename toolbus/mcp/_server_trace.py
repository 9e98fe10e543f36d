"""A served call continues its client's trace: the `traceparent` a client
sends in a `tools/call`'s `_meta` is the served call's parent span."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["trace_continued"]


@contextlib.contextmanager
def trace_continued(meta: Mapping[str, Any]) -> Iterator[None]:
    """Within it, the client's trace (`traceparent` in `_meta`) is current,
    so the served call's span (`instrument_otel`, noted at submission) is in it.

    The SDK's OpenTelemetry middleware already made its server span, a child of
    the client's, current: that is kept. Only without a current span (the
    middleware removed) is the client's context attached here.
    """
    if "traceparent" not in meta:
        yield
        return
    from opentelemetry import context, propagate, trace  # a dependency of `mcp`

    if trace.get_current_span().get_span_context().is_valid:
        yield
        return
    try:
        parent = propagate.extract(dict(meta))
    except (TypeError, ValueError):  # a malformed carrier: no parent
        yield
        return
    token = context.attach(parent)
    try:
        yield
    finally:
        context.detach(token)
