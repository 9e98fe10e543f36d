"""What the scanner looks for: a `Rule`, and the kinds of what it finds.

A `Rule` is a regular expression plus what its match must also be to count:
a capture group that holds the value, a least entropy, a checksum (`check`),
and allow-list patterns. `keywords` are words one of which appears in any text
the rule can match: a cheap way to skip a rule, never a reason to match.

The rules themselves: gitleaks' (`_gitleaks.py`, translated from Go) and
toolbus's own (`_builtin.py`); what their checks judge a value to be is in
`_values.py`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ._checks import shannon_entropy

__all__ = ["GROUPED", "KINDS", "PERSONAL", "SECRETS", "Rule"]

SECRETS = frozenset({"secret", "private_key", "jwt"})
"""The kinds of secrets: a credential in general, a private key, a JWT."""
PERSONAL = frozenset({"email", "card", "iban", "phone"})
"""The kinds of personal data."""
KINDS = SECRETS | PERSONAL


@dataclass(frozen=True, slots=True)
class Rule:
    """One thing to find: a pattern (Python `re` syntax) of a `kind`.

    The value found is capture group `group` (0: the whole match); it counts
    only if its Shannon entropy is above `entropy`, `check` (if any) accepts
    it, and no pattern of `allow` matches it (`re.search`). `keywords`, in
    lower case: a text holds one of them (in any case) or the rule does not
    count there (as in gitleaks, where they are also what makes a scan fast).
    `lowercase`: the pattern is written for lower-case text, and runs on the
    text lower-cased, which makes it case-insensitive several times faster
    than `(?i)` (where lower-casing moves no character, as in ASCII text;
    elsewhere it runs with `(?i)` on the text itself).
    """

    id: str
    pattern: str
    kind: str = "secret"
    group: int = 0
    entropy: float = 0.0
    keywords: tuple[str, ...] = ()
    check: Callable[[str], bool] | None = None
    allow: tuple[str, ...] = ()
    stopwords: tuple[str, ...] = ()
    lowercase: bool = False
    compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)
    folded: re.Pattern[str] = field(init=False, repr=False, compare=False)
    allowed: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    width: int | None = field(init=False, repr=False, compare=False)
    """The longest match the pattern can make, or None (no bound)."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"Rule: id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.kind, str) or not self.kind.strip():
            raise ValueError(f"Rule {self.id!r}: kind must be a non-empty string")
        if not isinstance(self.pattern, str):
            raise TypeError(
                f"Rule {self.id!r}: pattern must be a str, got {type(self.pattern).__name__}"
            )
        try:
            compiled = re.compile(self.pattern)
        except (re.error, TypeError, OverflowError) as e:
            raise ValueError(f"Rule {self.id!r}: pattern does not compile: {e}") from None
        if (
            isinstance(self.group, bool)
            or not isinstance(self.group, int)
            or not 0 <= self.group <= compiled.groups
        ):
            raise ValueError(
                f"Rule {self.id!r}: group must be 0..{compiled.groups}, got {self.group!r}"
            )
        if (
            isinstance(self.entropy, bool)
            or not isinstance(self.entropy, int | float)
            or not 0 <= self.entropy < 64
        ):
            raise ValueError(
                f"Rule {self.id!r}: entropy must be a number from 0 (bits per character)"
            )
        if self.check is not None and not callable(self.check):
            raise TypeError(f"Rule {self.id!r}: check must be a function of the value, or None")
        if not isinstance(self.lowercase, bool):
            raise TypeError(f"Rule {self.id!r}: lowercase must be True or False")
        if self.lowercase and _upper_case_to_match(self.pattern):
            # It runs on the text lower-cased: an upper-case letter never matches.
            raise ValueError(
                f"Rule {self.id!r}: a lowercase rule's pattern is written in lower case"
            )
        for option in ("keywords", "allow", "stopwords"):
            given = getattr(self, option)
            if (
                isinstance(given, str | bytes)
                or not isinstance(given, Iterable)
                or not all(isinstance(x, str) for x in given)
            ):
                raise TypeError(f"Rule {self.id!r}: {option} must be a list of strings")
        try:
            allowed = tuple(re.compile(a) for a in self.allow)
        except re.error as e:
            raise ValueError(f"Rule {self.id!r}: an allow pattern does not compile: {e}") from None
        object.__setattr__(self, "keywords", tuple(k.lower() for k in self.keywords))
        object.__setattr__(self, "stopwords", tuple(s.lower() for s in self.stopwords))
        object.__setattr__(self, "compiled", compiled)
        object.__setattr__(
            self, "folded", re.compile(self.pattern, re.IGNORECASE) if self.lowercase else compiled
        )
        object.__setattr__(self, "allowed", allowed)
        object.__setattr__(self, "width", _widest(self.pattern))

    def value_of(self, match: re.Match[str], text: str) -> tuple[int, int] | None:
        """Where the value of `match` (a match in `text`, or in `text`
        lower-cased) is, or None if it does not count."""
        if self.group:
            start, end = match.span(self.group)
        else:
            # Like gitleaks: the first capture group that matched, else the match.
            start, end = match.span()
            for g in range(1, (self.compiled.groups or 0) + 1):
                s, e = match.span(g)
                if e > s:
                    start, end = s, e
                    break
        if end <= start:
            return None
        value = text[start:end]
        if self.entropy and shannon_entropy(value) <= self.entropy:
            return None
        if self.check is not None and not self.check(value):
            if self.kind not in GROUPED:
                return None
            # A card number followed by its expiry ("4111 ... 1111 12/27"), an
            # IBAN by a BIC or a currency: the match took the next group too.
            span = _shortest_passing(value, self.check)
            if span is None:
                return None
            start, end = start + span[0], start + span[1]
            value = text[start:end]
        # A long value is never let by: gitleaks' allow patterns (`[^:]+:...`) cost
        # Python the square of its length (seconds at 16 KB; found by review).
        if (
            self.allowed
            and len(value) <= _ALLOW_LONGEST
            and any(a.search(value) for a in self.allowed)
        ):
            return None
        if self.stopwords:
            low = value.lower()
            if any(s in low for s in self.stopwords):
                return None
        return start, end


# Kinds written in groups, whose match may run into what follows them.
GROUPED = frozenset({"card", "iban"})


def _shortest_passing(value: str, check: Callable[[str], bool]) -> tuple[int, int] | None:
    """Where in `value` the part `check` accepts is, once groups (after or
    before a space or a dash) are cut off its end, or its start ("qty 25 4111
    ...", "12/27 4111 ..."), up to three each; None if none is."""
    cuts = [i for i, c in enumerate(value) if c in " -"]
    for end in reversed(cuts[-3:]):
        if check(value[:end]):
            return 0, end
    for cut in cuts[:3]:
        if check(value[cut + 1 :]):
            return cut + 1, len(value)
    return None


# An escape (`\\S`, `\\x4A`, `\\N{...}`) or a group's name is no letter to match.
_ESCAPES_AND_NAMES = re.compile(r"\\N\{[^}]*\}|\\x[0-9A-Fa-f]{2}|\\.|\(\?P?[<=][\w]*>?|\(\?P=\w+\)")
_CODE_ESCAPE = re.compile(r"(?<!\\)\\(?:x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4}))")
_CLASS = re.compile(r"\[\^?\]?[^\]]*\]")
_UPPER = re.compile(r"[A-Z]")
_LOWER = re.compile(r"[a-z]")


def _letter_of(escape: re.Match[str]) -> str:
    char = chr(int(escape.group(1) or escape.group(2), 16))
    return char if char.isalpha() else escape.group(0)


def _upper_case_to_match(pattern: str) -> bool:
    """Whether `pattern` asks for an upper-case letter a lower-cased text
    never holds: one outside a class, or a class of them with no lower-case
    one beside (`[A-Z0-9]`; `[A-Za-z]` is fine)."""
    # `\\x41` is an "A" too: a letter's code stands as the letter.
    pattern = _CODE_ESCAPE.sub(_letter_of, pattern)
    bare = _ESCAPES_AND_NAMES.sub("", pattern)
    for found in _CLASS.findall(bare):
        if not found.startswith("[^") and _UPPER.search(found) and not _LOWER.search(found):
            return True
    return bool(_UPPER.search(_CLASS.sub("", bare)))


def _widest(pattern: str) -> int | None:
    """The longest text `pattern` can match, or None: unbounded, or not
    known (Python's parser is private; without it, every match is confirmed
    from the text's start)."""
    try:
        parser = re._parser  # type: ignore[attr-defined]
        most = int(parser.parse(pattern).getwidth()[1])
    except Exception:
        return None
    return most if most < 1 << 16 else None


_ALLOW_LONGEST = 1024
