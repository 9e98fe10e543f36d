"""The content scanner: finds secrets and personal data, and acts on each kind.

`ContentScanner.findings(text)` says what is where; `text` and `value` give
back a copy with every finding replaced as its action says (`redact`, `mask`,
`hash`); `blocking` names the first finding whose action is `block`, for the
executor to end the call `rejected` (`CONTENT_BLOCKED`). Where nothing can be
blocked (a log record), a `block` finding is redacted.

Pure and thread-safe: a scanner holds only what it compiled when made.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from ..masking import cleaned_result, is_secret_key
from ..models import ToolResult
from ._actions import ACTIONS, Action, Finding, checked_actions, merged, replacement
from ._gitleaks import gitleaks_rules, go_to_python
from ._matcher import make_prefilter
from ._rules import PERSONAL, SECRETS, Rule, builtin_rules, secret_like

__all__ = ["ContentScanner"]

log = logging.getLogger("toolbus.scanning")

# A value under a secret-looking key that is random enough: not a pattern's.
_KEY_VALUE_RULE = "secret-key-value"
_MAPPINGS = (dict, Mapping)
_SEQUENCES = (list, tuple)


class ContentScanner:
    """Finds secrets (private keys, cloud and SaaS tokens, JWTs, a secret
    after a word like "password:") and personal data (e-mail addresses, card
    numbers that pass the Luhn check, IBANs that pass theirs, phone numbers).

    `actions` maps a rule id, a kind (`secret`, `private_key`, `jwt`,
    `email`, `card`, `iban`, `phone`) or a group (`secrets`, `personal`) to
    an action, most specific first; anything else gets `default`:

    - `redact`: replaced by `[REDACTED:<kind>]`;
    - `mask`: every letter and digit but the last four hidden (an e-mail
      address keeps its domain);
    - `hash`: replaced by `[<kind>:<16 hex digits>]`, an HMAC-SHA256 under
      `secret` (the executor's own when it is None), so the same value
      always gives the same tag and a guess cannot be checked without it;
    - `block`: the call ends `rejected` (`CONTENT_BLOCKED`).

    `rules` are added to gitleaks' and toolbus's own (`builtin=False`: only
    `rules`); a rule with an id already taken replaces that one. `allow`:
    regular expressions; a value one of them matches whole is left alone.
    `to_model`: scan what goes back to the model too, not only what toolbus
    publishes and stores. `engine`: "hyperscan" (the `scan` extra), "re", or
    "auto" (hyperscan when installed); both find the same things.
    """

    __slots__ = (
        "_action",
        "_allow",
        "_by_keyword",
        "_global_allow",
        "_keyed",
        "_keywordless",
        "_keywords",
        "_prefilter",
        "_rules",
        "_secret",
        "_stopwords",
        "actions",
        "default",
        "to_model",
    )

    def __init__(
        self,
        *,
        actions: Mapping[str, Action] | None = None,
        default: Action = "redact",
        rules: Sequence[Rule] = (),
        builtin: bool = True,
        allow: Iterable[str] = (),
        to_model: bool = False,
        engine: Literal["auto", "hyperscan", "re"] = "auto",
        secret: bytes | None = None,
    ) -> None:
        if default not in ACTIONS:
            raise ValueError(f"ContentScanner: default must be one of {ACTIONS}, got {default!r}")
        if not isinstance(rules, Sequence) or isinstance(rules, str):
            raise TypeError("ContentScanner: rules must be a list of Rule")
        for r in rules:
            if not isinstance(r, Rule):
                raise TypeError(f"ContentScanner: rules must hold Rule, got {type(r).__name__}")
        if engine not in ("auto", "hyperscan", "re"):
            raise ValueError(
                f"ContentScanner: engine must be auto, hyperscan or re, got {engine!r}"
            )
        if secret is not None and not isinstance(secret, bytes):
            raise TypeError(f"ContentScanner: secret must be bytes, got {type(secret).__name__}")
        if not isinstance(to_model, bool):
            raise TypeError(f"ContentScanner: to_model must be True or False, got {to_model!r}")
        chosen: dict[str, Rule] = {}
        global_allow: tuple[str, ...] = ()
        stopwords: tuple[str, ...] = ()
        if builtin:
            loaded = gitleaks_rules()
            for r in (*loaded.rules, *builtin_rules()):
                chosen[r.id] = r
            global_allow, stopwords = loaded.allow, loaded.stopwords
        for r in rules:
            chosen[r.id] = r
        if not chosen:
            raise ValueError("ContentScanner: no rules (builtin=False and no rules given)")
        self._rules: tuple[Rule, ...] = tuple(chosen.values())
        self.actions = dict(checked_actions(actions, self._rules))
        self.default = default
        self._action = tuple(self._resolve(r) for r in self._rules)
        try:
            self._allow = [re.compile(a) for a in _strings(allow, "allow")]
        except re.error as e:
            raise ValueError(f"ContentScanner: an allow pattern does not compile: {e}") from None
        # Whole values: gitleaks' "(?i)^true|false|null$" means the value "false",
        # not any value holding it (a search would let "falsetto@example.org" by).
        self._global_allow = tuple(re.compile(go_to_python(f"(?:{a})")) for a in global_allow)
        self._stopwords = stopwords
        self._keywords = tuple(r.keywords for r in self._rules)
        self._keywordless = tuple(i for i, r in enumerate(self._rules) if not r.keywords)
        by_keyword: dict[str, list[int]] = {}
        for i, r in enumerate(self._rules):
            for k in r.keywords:
                by_keyword.setdefault(k, []).append(i)
        self._by_keyword = tuple((k, tuple(v)) for k, v in by_keyword.items())
        self._prefilter = make_prefilter(self._rules, engine)
        # Not given: the executor's own, once one takes this scanner (`keyed`);
        # until then, one of its own.
        self._secret = secret if secret is not None else os.urandom(32)
        self._keyed = secret is not None
        self.to_model = to_model

    @property
    def engine(self) -> str:
        """ "hyperscan" or "re": what finds the candidate rules."""
        return self._prefilter.engine

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self._rules

    def keyed(self, secret: bytes) -> ContentScanner:
        """This scanner, hashing under `secret` unless it was given one of its
        own (a copy: the rules are shared, not rebuilt)."""
        if self._keyed:
            return self
        twin = object.__new__(ContentScanner)
        for name in self.__slots__:
            object.__setattr__(twin, name, getattr(self, name))
        twin._secret, twin._keyed = secret, True
        return twin

    # -- finding -----------------------------------------------------------------------

    def findings(self, text: str) -> list[Finding]:
        """What the rules find in `text`, in order, overlaps merged (a `block`
        among them wins)."""
        if not isinstance(text, str) or not text:
            return []
        low = text.lower()
        found: list[Finding] = []
        candidates = self._prefilter.candidates(text)
        if candidates is self._prefilter.every:
            # No prefilter: the rules whose keywords the text holds, each
            # keyword looked for once.
            chosen = set(self._keywordless)
            for k, rules in self._by_keyword:
                if k in low:
                    chosen.update(rules)
            candidates = sorted(chosen)
        else:
            keywords = self._keywords
            candidates = [
                i for i in candidates if not keywords[i] or any(k in low for k in keywords[i])
            ]
        # Lower-casing moves no character in ASCII text: a lowercase rule runs on `low`.
        folds = text.isascii()
        for i in candidates:
            rule = self._rules[i]
            if not rule.lowercase:
                target = text
                pattern = rule.compiled
            else:
                target = low if folds else text
                pattern = rule.compiled if folds else rule.folded
            try:
                for m in pattern.finditer(target):
                    span = rule.value_of(m, text)
                    if span is not None and not self._allowed(text[span[0] : span[1]]):
                        found.append(Finding(rule.id, rule.kind, *span, self._action[i]))
            except Exception as e:
                # A rule's own code failed (a user's `check`): nothing it may have
                # been about to find is published, so the whole text counts.
                _log_failed(rule, e)
                found.append(Finding(rule.id, rule.kind, 0, len(text), self._action[i]))
        return merged(found) if len(found) > 1 else found

    def _allowed(self, value: str) -> bool:
        if any(a.fullmatch(value) for a in self._global_allow):
            return True
        low = value.lower()
        if any(s in low for s in self._stopwords):
            return True
        return any(a.fullmatch(value) for a in self._allow)

    # -- acting ------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """`text` with every finding replaced as its action says (`block` redacts)."""
        found = self.findings(text)
        if not found:
            return text
        out: list[str] = []
        at = 0
        for f in found:
            out.append(text[at : f.start])
            out.append(self._replacement(f.kind, f.action, text[f.start : f.end]))
            at = f.end
        out.append(text[at:])
        return "".join(out)

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string (keys too) scanned, and a
        random-looking string under a secret-looking key replaced whole. An
        integer that is a card number becomes its replacement text. `value`
        itself where nothing changes."""
        return self._walk(value, None)

    def result(self, result: ToolResult) -> ToolResult:
        """A copy of `result` with its output, error, metadata and attachments
        scanned (`result` itself where nothing changes)."""
        return cleaned_result(self, result)

    def blocking(self, value: Any) -> Finding | None:
        """The first finding in `value` (as `value` walks it) whose action is
        `block`, or None."""
        if "block" not in self._action and self.default != "block":
            return None
        return self._first_block(value, None)

    def _walk(self, value: Any, key: object) -> Any:
        if isinstance(value, str):
            if key is not None and is_secret_key(key) and secret_like(value):
                return self._replacement("secret", self._kind_action("secret"), value)
            return self.text(value)
        if isinstance(value, _MAPPINGS):
            out: dict[Any, Any] = {}
            changed = not isinstance(value, dict)
            for k, v in value.items():
                nk = self.text(k) if isinstance(k, str) else k
                nv = self._walk(v, k)
                changed = changed or nk is not k or nv is not v
                out[nk] = nv
            return out if changed else value
        if isinstance(value, _SEQUENCES):
            items = [self._walk(v, key) for v in value]
            if isinstance(value, list) and all(a is b for a, b in zip(items, value, strict=True)):
                return value
            return items
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, float):
            # A card number kept as a float: 4111111111111111.0.
            if not (value.is_integer() and 10**12 <= abs(value) < 10**19):
                return value
            text = str(int(value))
        elif isinstance(value, int):
            if not 10**12 <= abs(value) < 10**19:
                return value  # too short or too long for a card number
            text = str(value)
        else:  # an object: published as it is unless its text shows something
            try:
                text = str(value)
            except Exception:
                return "[REDACTED:unreadable]"
        scanned = self.text(text)
        return value if scanned == text else scanned

    def _first_block(self, value: Any, key: object) -> Finding | None:
        if isinstance(value, str):
            if (
                key is not None
                and is_secret_key(key)
                and secret_like(value)
                and self._kind_action("secret") == "block"
            ):
                return Finding(_KEY_VALUE_RULE, "secret", 0, len(value), "block")
            return next((f for f in self.findings(value) if f.action == "block"), None)
        if isinstance(value, _MAPPINGS):
            for k, v in value.items():
                found = self._first_block(k, None) or self._first_block(v, k)
                if found is not None:
                    return found
            return None
        if isinstance(value, _SEQUENCES):
            for v in value:
                found = self._first_block(v, key)
                if found is not None:
                    return found
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 10**12 <= abs(value) < 10**19:
            return self._first_block(str(value), None)
        return None

    def _replacement(self, kind: str, action: str, value: str) -> str:
        return replacement(kind, action, value, self._secret)

    # -- actions per rule --------------------------------------------------------------

    def _resolve(self, rule: Rule) -> str:
        a = self.actions
        return a.get(rule.id) or self._kind_action(rule.kind)

    def _kind_action(self, kind: str) -> str:
        a = self.actions
        group = "secrets" if kind in SECRETS else "personal" if kind in PERSONAL else None
        return a.get(kind) or (a.get(group) if group else None) or self.default


_failed_rules: set[str] = set()


def _log_failed(rule: Rule, error: Exception) -> None:
    """Once per rule: its failure's type only (its message may quote the value)."""
    if rule.id not in _failed_rules:
        _failed_rules.add(rule.id)
        log.warning(
            "content scanner: rule %r failed (%s); the texts it failed on are withheld whole",
            rule.id,
            type(error).__name__,
        )


def _strings(values: Iterable[str], option: str) -> list[str]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"ContentScanner: {option} must be a list of patterns")
    out = list(values)
    for v in out:
        if not isinstance(v, str):
            raise TypeError(f"ContentScanner: {option} must hold strings, got {type(v).__name__}")
    return out
