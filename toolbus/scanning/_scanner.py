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
from types import MappingProxyType
from typing import Any, Literal

from ..masking import cleaned_result
from ..models import ToolResult
from ._actions import Action, Finding, checked_actions, merged, replacement
from ._builtin import builtin_rules
from ._gitleaks import gitleaks_rules, go_to_python
from ._matcher import Candidates, make_prefilter
from ._options import allow_patterns, check_options
from ._rules import GROUPED, PERSONAL, SECRETS, Rule
from ._values import under_key
from ._walk import UNREADABLE, UNREADABLE_TEXT, PutBack, gather, walk

__all__ = ["ContentScanner"]

log = logging.getLogger("toolbus.scanning")

# A value under a secret-looking key that is random enough: not a pattern's.
_KEY_VALUE_RULE = "secret-key-value"
_ALLOW_LONGEST = 1024
_NONE: Candidates = {}


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
        "_default",
        "_global_allow",
        "_key_value_action",
        "_keyed",
        "_keywords",
        "_prefilter",
        "_rules",
        "_secret",
        "_stopwords",
        "_to_model",
        "actions",
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
        check_options(default, rules, engine, secret, to_model, builtin)
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
        # Read-only: each rule's action is resolved once, here.
        self.actions: Mapping[str, str] = MappingProxyType(
            dict(checked_actions(actions, self._rules))
        )
        self._default = default
        self._action = tuple(self._resolve(r) for r in self._rules)
        self._key_value_action = self.actions.get(_KEY_VALUE_RULE) or self._kind_action("secret")
        self._allow = allow_patterns(allow)
        # Whole values: gitleaks' "(?i)^true|false|null$" means the value "false",
        # not any value holding it (a search would let "falsetto@example.org" by).
        self._global_allow = tuple(re.compile(go_to_python(f"(?:{a})")) for a in global_allow)
        self._stopwords = stopwords
        self._keywords = tuple(r.keywords for r in self._rules)
        self._prefilter = make_prefilter(self._rules, engine)
        # Not given: the executor's own, once one takes this scanner (`keyed`);
        # until then, one of its own.
        self._secret = secret if secret is not None else os.urandom(32)
        self._keyed = secret is not None
        self._to_model = to_model

    @property
    def to_model(self) -> bool:
        """Whether what goes back to the model is scanned too (fixed when made)."""
        return self._to_model

    @property
    def default(self) -> str:
        """The action of a finding no entry of `actions` names."""
        return self._default

    @property
    def engine(self) -> Literal["hyperscan", "re"]:
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
        return self._confirmed(text, self._prefilter.candidates(text))

    def _confirmed(self, text: str, candidates: Candidates) -> list[Finding]:
        """What the `candidates` (rules, by index) find in `text`."""
        if not candidates:
            return []
        keywords = self._keywords
        rules = self._rules
        # Lower-cased only for a keyword or a lowercase rule to look at (the
        # card rule, the commonest candidate, needs neither).
        low = (
            text.lower()
            if candidates is self._prefilter.every
            or any(keywords[i] or rules[i].lowercase for i in candidates)
            else text
        )
        chosen: Iterable[int]
        if candidates is self._prefilter.every:  # no prefilter: the rules' keywords choose
            chosen = self._prefilter.with_keywords_in(low)
        else:
            chosen = [
                i for i in candidates if not keywords[i] or any(k in low for k in keywords[i])
            ]
        found: list[Finding] = []
        # Lower-casing moves no character in ASCII text: a lowercase rule runs on `low`.
        folds = text.isascii()
        # In rule order, as without hyperscan: of two rules that find the same
        # value, the one listed first names it.
        for i in sorted(chosen):
            rule = rules[i]
            # No match of it ends before its first candidate does.
            end = candidates.get(i, 0)
            start = max(end - rule.width, 0) if end and rule.width is not None else 0
            if not rule.lowercase:
                target = text
                pattern = rule.compiled
            else:
                target = low if folds else text
                pattern = rule.compiled if folds else rule.folded
            try:
                while (m := pattern.search(target, start)) is not None:
                    span = rule.value_of(m, text)
                    if span is not None and not self._allowed(text[span[0] : span[1]]):
                        found.append(Finding(rule.id, rule.kind, *span, self._action[i]))
                    # On from the match's end; or, for a card or an IBAN cut short,
                    # from the value's (its match took the next one's first group).
                    start = m.end()
                    if span is not None and rule.kind in GROUPED and span[1] < start:
                        start = span[1]
                    if start <= m.start():
                        start = m.start() + 1  # (an empty match)
            except Exception as e:
                # A rule's own code failed (a user's `check`): nothing it may have
                # been about to find is published, so the whole text counts.
                _log_failed(rule, e)
                found.append(Finding(rule.id, rule.kind, 0, len(text), self._action[i]))
        return merged(found) if len(found) > 1 else found

    def _allowed(self, value: str) -> bool:
        # gitleaks' global allow patterns (`^\{\{[ \t]*[\w ().|]+[ \t]*}}$`) cost
        # Python the cube of a value's length (33 s at 4 KB; found by review):
        # a long value is never let by them.
        if len(value) <= _ALLOW_LONGEST and any(a.fullmatch(value) for a in self._global_allow):
            return True
        low = value.lower()
        if any(s in low for s in self._stopwords):
            return True
        return any(a.fullmatch(value) for a in self._allow)

    # -- acting ------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """`text` with every finding replaced as its action says (`block` redacts)."""
        return self._applied(text, self.findings(text))

    def _applied(self, text: str, found: list[Finding]) -> str:
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
        """A JSON-like value with every string (keys too, and an object's
        text) scanned, and a string under a secret-looking key that looks
        like one replaced whole. A number under a key that names a card
        ("card_number") that is one becomes its replacement text. `value`
        itself where nothing changes."""
        return self.scan(value)[0]

    def result(self, result: ToolResult) -> ToolResult:
        """A copy of `result` with its output, error, metadata and attachments
        scanned (`result` itself where nothing changes)."""
        return cleaned_result(self, result)

    def checked(self, result: ToolResult) -> tuple[ToolResult, Finding | None]:
        """`result` scanned (as `result` gives it) and the first finding in
        it whose action is `block` (output, error, metadata, attachments),
        in one pass."""
        watch = _BlockWatch(self)
        return cleaned_result(watch, result), watch.found

    @property
    def blocks(self) -> bool:
        """Whether any finding may block a call (an action is `block`)."""
        return "block" in self._action or self._key_value_action == "block"

    def blocking(self, value: Any) -> Finding | None:
        """The first finding in `value` (as `value` walks it) whose action is
        `block`, or None."""
        return self.scan(value)[1] if self.blocks else None

    def scan(self, value: Any) -> tuple[Any, Finding | None]:
        """`value` scanned (as `value` gives it) and the first finding in it
        whose action is `block` (in the order a walk meets them), in one pass."""
        texts: list[str] = []
        keyed: dict[int, str] = {}
        gather(value, None, texts, keyed)
        if not texts:
            return value, None
        if len(texts) == 1:
            located: Mapping[int, Candidates] = {0: self._prefilter.candidates(texts[0])}
        else:
            located = self._prefilter.located(texts)
        new: dict[int, str] = {}
        block: Finding | None = None
        # In the order the walk met them: the first `block` is the first met.
        for i in sorted(keyed.keys() | located.keys()):
            scanned, found = self._scanned(texts[i], keyed.get(i), located.get(i, _NONE))
            if scanned is not None:
                new[i] = scanned
                if block is None:
                    block = found
        if not new:
            return value, block
        if isinstance(value, str):
            return new[0], block
        return walk(value, None, PutBack(texts, keyed, new, self._one)), block

    def _scanned(
        self, text: str, expected: str | None, candidates: Candidates
    ) -> tuple[str | None, Finding | None]:
        """What replaces one text of a value (None: nothing) and its first
        `block`: `expected` is what its key expects (`Gather`), `candidates`
        the rules that may match it."""
        if expected == UNREADABLE_TEXT:
            return UNREADABLE, None
        if expected is not None and self._key_value(text, expected):
            action = self._key_value_action
            block = Finding(_KEY_VALUE_RULE, "secret", 0, len(text), "block")
            return self._replacement("secret", action, text), block if action == "block" else None
        found = self._confirmed(text, candidates)
        if not found:
            return None, None
        return self._applied(text, found), next((f for f in found if f.action == "block"), None)

    def _one(self, text: str, expected: str | None) -> str:
        """`text` scanned on its own (under a key that `expected` a secret)."""
        scanned = self._scanned(text, expected, self._prefilter.candidates(text))[0]
        return text if scanned is None else scanned

    def _key_value(self, text: str, expected: str) -> bool:
        """A value under a key that expects a password or secret that is one."""
        return under_key(text, expected) and not self._allowed(text)

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


class _BlockWatch:
    """A scanner as `cleaned_result` uses it, keeping the first `block`."""

    __slots__ = ("_scanner", "found")

    def __init__(self, scanner: ContentScanner) -> None:
        self._scanner = scanner
        self.found: Finding | None = None

    def text(self, text: str) -> str:
        return self.value(text)  # type: ignore[no-any-return]

    def value(self, value: Any) -> Any:
        scanned, found = self._scanner.scan(value)
        if self.found is None:
            self.found = found
        return scanned
