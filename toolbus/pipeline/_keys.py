"""Idempotency keys: one per call, the same for every attempt and across restarts.

A key is an HMAC-SHA256, under a secret of the journal's (or the executor's),
of the tool's name, the arguments as the model sent them (canonical JSON:
sorted keys, before pre-call hooks, so injected credentials do not change it)
and the model's call id when it gave one. Ids toolbus made up are left out
(`models.generated_id`: `call_<pid>_<n>` from any process, and the providers'
`call_toolbus_<hash>`): a restart would make other ones, and the provider's
depend on the arguments alone. So two distinct calls of one tool with the same
arguments and no model id share a key: set `ToolCall.idempotency_key` to tell
them apart (see docs/journal.md). Injected arguments (`toolbus.Injected`) are never
part of it: they are filled in after the call as submitted is kept, and a call
that carries one from the model is refused before it runs. An HMAC, so the
arguments cannot be recovered from the key, nor guessed by hashing candidate
values without the secret.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from .._json import canonical
from ..models import ToolCall, generated_id

__all__ = ["canonical_arguments", "derive_key"]


def canonical_arguments(arguments: dict[str, Any] | str) -> bytes:
    """The arguments as canonical JSON (sorted keys); unparseable text as it is."""
    return canonical(arguments)


def derive_key(call: ToolCall, secret: bytes) -> str:
    """`call.idempotency_key` if the caller set one, else the derived key (hex)."""
    if call.idempotency_key is not None:
        return call.idempotency_key
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    mac.update(call.name.encode("utf-8", "surrogatepass"))
    mac.update(b"\x00")
    mac.update(canonical_arguments(call.arguments))
    mac.update(b"\x00")
    if not generated_id(call.id):
        mac.update(call.id.encode("utf-8", "surrogatepass"))
    return mac.hexdigest()
