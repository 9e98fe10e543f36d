"""A call's arguments at admission: what its events may show of them, and
what its results are scrubbed of.

The tool gets the raw arguments; everything published gets the masked copy
(`Run.masked`), and the values masking hid make up the call's `Scrubber`.
Besides those hidden by the masker (after pre-call hooks ran), the scrubber
holds what masking by name and by type hides of the arguments as the model
sent them (`sent_secrets`: a hook may move a secret under a plain name) and a
nested call's caller's secrets: the masked copy is scrubbed of those too.
"""

from __future__ import annotations

from typing import Any

import orjson

from .._json import detached
from ..masking import (
    DEFAULT_SECRET_KEYS,
    EMPTY_SCRUBBER,
    Scrubber,
    has_secret,
    mask_arguments,
    mask_paths,
    published_arguments,
)
from ..models import ToolCall
from ..scanning import ContentScanner, Finding
from ..tools import ArgumentError, Tool, parse_json_arguments
from ._make import awaitable, log_contained
from ._run import Run
from ._services import HOOK_FAILURES, Services, Steps, log

__all__ = ["mask", "mask_decided", "published", "sent_secrets", "unmasked"]


def mask(run: Run, call: ToolCall, svc: Services) -> Steps:
    """Set what may be published of the call's arguments (`run.masked`) and
    what is scrubbed from what is published; return what the content scanner
    blocks in them, if anything."""
    raw = call.arguments
    # Values the tool's schema types as secret are hidden whatever the masker does.
    paths = run.tool.secret_paths if run.tool is not None else ()
    scanner = run.scrubber.scanner
    blocked = None if scanner is None else blocked_by(scanner, raw, paths, svc)
    # Secrets known before (its caller's, or the call's as the model sent it,
    # before a pre-call hook moved them): never shown, under whatever name.
    known = run.scrubber.known() if run.scrubber.values else None
    try:
        if svc.plain_admission:  # the default masker, without the hook's frame
            keys = svc.secret_keys or DEFAULT_SECRET_KEYS
            # (most arguments hold no secret: asked without mask_arguments's frame)
            masked = mask_arguments(raw, keys)[0] if has_secret(raw, keys.is_secret) else raw
        else:
            masked = svc.hooks.mask_arguments(call)
            if awaitable(masked):
                masked = yield masked
        if isinstance(masked, str | bytes) and not isinstance(raw, str):
            try:
                masked = orjson.loads(masked)
            except orjson.JSONDecodeError:
                pass
        masked, typed = mask_paths(masked, raw, paths) if paths else (masked, [])
        masked = published(run, raw, masked, typed)
        if known is not None:
            masked = known.value(masked)
        run.masked = masked if scanner is None else scanner.value(masked)
    except HOOK_FAILURES as e:  # a hook's own, too
        unmasked(run, raw, paths, e)
    return blocked


def published(run: Run, raw: Any, masked: Any, typed: list[str]) -> Any:
    """What is published of arguments `raw` that a masker made `masked`,
    their values hidden at secret-typed paths `typed`."""
    if masked is not raw:
        # Whatever the masker returned (a text, a list, an object), what is
        # published has every hidden value scrubbed from it.
        masked, hidden = published_arguments(raw, masked, typed)
        run.scrubber = run.scrubber.merged(hidden)
    # A copy: the tool may change its arguments in place before the events
    # that carry them are built.
    return detached(masked)


def sent_secrets(call: ToolCall, tool: Tool, svc: Services) -> Scrubber:
    """What masking by name (`secret_keys`) and by type hides of `call`'s
    arguments: a scrubber of the values."""
    raw = call.arguments
    keys = svc.secret_keys or DEFAULT_SECRET_KEYS
    hidden = mask_arguments(raw, keys)[1] if has_secret(raw, keys.is_secret) else []
    if tool.secret_paths:
        hidden += mask_paths(None, raw, tool.secret_paths)[1]
    return Scrubber(hidden) if hidden else EMPTY_SCRUBBER


def unmasked(run: Run, raw: Any, paths: Any, error: BaseException) -> None:
    """A broken masker must not leak: nothing of the arguments is published."""
    run.masked = None
    run.scrubber = run.scrubber.merged(
        Scrubber(mask_arguments(raw)[1] + mask_paths(None, raw, paths)[1])
    )
    log_contained(f"masker failed for call {run.call.id}", error, run.scrubber)


def blocked_by(scanner: ContentScanner, raw: Any, paths: Any, svc: Services) -> Finding | None:
    """What the scanner blocks in the arguments the tool would get, but for
    the secrets declared as such (under secret-looking keys, at secret-typed
    paths): decided whatever a masker of the user's does or fails to do, and
    failing closed should the scanner itself fail."""
    try:
        declared = mask_arguments(raw, svc.secret_keys)[0]
        if paths:
            declared = mask_paths(declared, raw, paths)[0]
        return scanner.blocking(declared)
    except Exception as e:
        log.warning("content scanner failed on call arguments (%s): blocked", type(e).__name__)
        return Finding("scanner-failed", "secret", 0, 0, "block")


def mask_decided(run: Run, svc: Services) -> None:
    """What the events of a call whose result was decided before it was
    submitted (`Run.decided`) show of its arguments: the default masking and
    the tool's secret paths, as admission applies them. It runs where the
    scheduler ends such a call, where no user code may run: with a masker or
    hooks of the executor's own, or arguments that are not JSON, nothing is
    published (`run.masked` stays None)."""
    if not svc.plain_admission:
        return
    raw: Any = run.call.arguments
    if isinstance(raw, str):
        try:
            raw = parse_json_arguments(raw)
        except ArgumentError:
            return
    paths = run.tool.secret_paths if run.tool is not None else ()
    try:
        masked = mask_arguments(raw, svc.secret_keys)[0]
        masked, typed = mask_paths(masked, raw, paths) if paths else (masked, [])
        masked = published(run, raw, masked, typed)
        scanner = run.scrubber.scanner
        run.masked = masked if scanner is None else scanner.value(masked)
    except Exception as e:  # nothing of them is published
        run.masked = None
        log_contained(f"masking the decided call {run.call.id} failed", e, run.scrubber)
