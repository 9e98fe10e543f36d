"""What the scanner does about a finding: each action's replacement text, and
which action a rule gets.

Pure functions of a value, a kind and (for `hash`) a secret.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ._rules import KINDS, SECRETS, Rule

__all__ = ["ACTIONS", "Action", "Finding", "checked_actions", "describe", "merged", "replacement"]

Action = Literal["redact", "mask", "hash", "block"]
ACTIONS: tuple[str, ...] = ("redact", "mask", "hash", "block")

# Domain separation: a scanner's hashes are not any other HMAC under its secret.
_HASH_DOMAIN = b"toolbus-scan\x00"


@dataclass(frozen=True, slots=True)
class Finding:
    """Where a rule found something in a text, and what is done about it.

    The value itself is not kept, so a finding may be logged."""

    rule: str
    kind: str
    start: int
    end: int
    action: str


def replacement(kind: str, action: str, value: str, secret: bytes) -> str:
    """What stands for `value` (of `kind`) once `action` is done: `block`
    redacts, where nothing can be blocked."""
    if action == "mask":
        return _masked(kind, value)
    if action == "hash":
        digest = hmac.new(secret, _HASH_DOMAIN + value.encode(), hashlib.sha256)
        return f"[{kind}:{digest.hexdigest()[:16]}]"
    return f"[REDACTED:{kind}]"


_NAMES = {
    "secret": "a secret",
    "private_key": "a private key",
    "jwt": "a JSON Web Token",
    "email": "an e-mail address",
    "card": "a card number",
    "iban": "an IBAN",
    "phone": "a phone number",
}


def describe(finding: Finding) -> str:
    """What a finding is, in words a model can read, without its value:
    "a card number (rule card-number)"."""
    return f"{_NAMES.get(finding.kind, finding.kind)} (rule {finding.rule})"


def checked_actions(
    actions: Mapping[str, Action] | None, rules: Sequence[Rule]
) -> Iterable[tuple[str, str]]:
    if actions is None:
        return ()
    if not isinstance(actions, Mapping):
        raise TypeError("ContentScanner: actions must map a rule id, kind or group to an action")
    names = {
        "secrets",
        "personal",
        "secret-key-value",  # a string under a key named like a secret's
        *KINDS,
        *(r.kind for r in rules),
        *(r.id for r in rules),
    }
    for name, action in actions.items():
        if name not in names:
            raise ValueError(
                f"ContentScanner: actions names {name!r}, which is no rule id, kind "
                "(secret, private_key, jwt, email, card, iban, phone) or group (secrets, personal)"
            )
        if action not in ACTIONS:
            raise ValueError(f"ContentScanner: action for {name!r} must be one of {ACTIONS}")
    return actions.items()


def merged(found: list[Finding]) -> list[Finding]:
    """Findings in order of where they start, overlapping ones made one,
    named by the one that weighs most: a `block`, else a secret (the
    password in `ftp://user:pw@host` is no e-mail address to mask)."""
    found.sort(key=lambda f: (f.start, -f.end))
    out = [found[0]]
    for f in found[1:]:
        last = out[-1]
        if f.start < last.end:
            keep, other = (f, last) if _weight(f) > _weight(last) else (last, f)
            end = max(last.end, f.end)
            if keep.kind in SECRETS and other.kind not in SECRETS and other.action != "block":
                # A secret inside what looked like an address ("pw@host" in
                # `mongodb://user:pw@host/`): the secret, not the host after it.
                end = keep.end
            if keep is not last or end != last.end:
                out[-1] = Finding(keep.rule, keep.kind, last.start, end, keep.action)
            continue
        out.append(f)
    return out


def _weight(f: Finding) -> tuple[bool, bool]:
    return f.action == "block", f.kind in SECRETS


def _masked(kind: str, value: str) -> str:
    at = "@" if "@" in value else "%40"  # (an address in a URL's query: "%40")
    if kind == "email" and at in value:
        local, _, domain = value.rpartition(at)
        return f"{local[:1]}{'*' * max(len(local) - 1, 3)}{at}{domain}"
    keep = 4 if sum(c.isalnum() for c in value) >= 12 else 0
    chars = list(value)
    for i in range(len(chars) - keep):
        if chars[i].isalnum():
            chars[i] = "*"
    return "".join(chars)
