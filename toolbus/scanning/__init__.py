"""Scanning what toolbus publishes for secrets and personal data.

Masking hides what it knows: values under secret-looking keys, secret-typed
arguments, values it was given. A `ContentScanner` finds what nobody declared:
an AWS key in a tool's free-text output, a card number in an error message.
Given to an executor (`Executor(scanner=...)`), it scans the arguments and
results in every event, log record, span, journal entry, status page and MCP
reply, and by choice (`to_model=True`) what goes back to the model; a `block`
action ends the call `rejected` (`ErrorCode.CONTENT_BLOCKED`).

Rules: gitleaks' set for secrets (MIT licence, vendored in `rules/`), toolbus's
own for personal data and for a secret after a word like "password:", and any
`Rule` of yours. With the `scan` extra, hyperscan finds the candidate rules in
one pass (a few microseconds per KB); without it, Python's `re` does, slower,
finding the same things.
"""

from ._actions import ACTIONS, Action, Finding, describe
from ._checks import iban_ok, luhn_ok, shannon_entropy
from ._matcher import hyperscan_available
from ._rules import KINDS, PERSONAL, SECRETS, Rule
from ._scanner import ContentScanner

__all__ = [
    "ACTIONS",
    "KINDS",
    "PERSONAL",
    "SECRETS",
    "Action",
    "ContentScanner",
    "Finding",
    "Rule",
    "describe",
    "hyperscan_available",
    "iban_ok",
    "luhn_ok",
    "shannon_entropy",
]
