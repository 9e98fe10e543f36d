"""What the scanner looks for: rules, the built-in ones and gitleaks' set.

A `Rule` is a regular expression plus what its match must also be to count:
a capture group that holds the value, a least entropy, a checksum (`check`),
and allow-list patterns. `keywords` are words one of which appears in any text
the rule can match: a cheap way to skip a rule, never a reason to match.

The secrets come from gitleaks' default configuration (MIT licence, vendored
beside this module with its licence, `rules/`), translated from Go's regular
expressions to Python's. The personal data (e-mail addresses, card numbers,
IBANs, phone numbers) and the secret-after-a-secret-word rule are toolbus's.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ._checks import iban_ok, luhn_ok, shannon_entropy

__all__ = [
    "KINDS",
    "PERSONAL",
    "SECRETS",
    "Rule",
    "builtin_rules",
    "gitleaks_rules",
    "go_to_python",
    "secret_like",
]

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

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"Rule: id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.kind, str) or not self.kind.strip():
            raise ValueError(f"Rule {self.id!r}: kind must be a non-empty string")
        try:
            compiled = re.compile(self.pattern)
        except (re.error, TypeError) as e:
            raise ValueError(f"Rule {self.id!r}: pattern does not compile: {e}") from None
        if not isinstance(self.group, int) or not 0 <= self.group <= compiled.groups:
            raise ValueError(
                f"Rule {self.id!r}: group must be 0..{compiled.groups}, got {self.group!r}"
            )
        if isinstance(self.entropy, bool) or not isinstance(self.entropy, int | float):
            raise ValueError(f"Rule {self.id!r}: entropy must be a number")
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
            return None
        if self.allowed and any(a.search(value) for a in self.allowed):
            return None
        if self.stopwords:
            low = value.lower()
            if any(s in low for s in self.stopwords):
                return None
        return start, end


# -- toolbus's own rules ---------------------------------------------------------------

_CARD_PREFIX = re.compile(r"4|5[1-5]|2[2-7]|3[47]|3[0689]|35|6[0-9]")


def _card(value: str) -> bool:
    """A card number: Luhn, a known issuer's prefix, one kind of separator."""
    digits = "".join(c for c in value if c.isdigit())
    if not _CARD_PREFIX.match(digits) or not luhn_ok(digits) or len(set(digits)) < 2:
        return False
    seps = {c for c in value if not c.isdigit()}
    return len(seps) <= 1


def _phone(value: str) -> bool:
    digits = sum(c.isdigit() for c in value)
    return 9 <= digits <= 15 and len({c for c in value if c.isdigit()}) > 2


def secret_like(value: str) -> bool:
    """A value worth hiding where a secret is expected (after "password:",
    under a key named like one): long enough, not a word or a placeholder,
    and random enough."""
    if not 8 <= len(value) <= 4096 or _PLACEHOLDER.fullmatch(value):
        return False
    if _PATH_OR_URL.fullmatch(value):
        return False
    if value.isalpha():
        # A word is no secret; sixteen random letters are.
        return len(value) >= 16 and shannon_entropy(value) > 3.5
    return shannon_entropy(value) > 3.0


# A value that stands in for a secret rather than being one.
_PLACEHOLDER = re.compile(
    r"(?i)(?:\$\{?[\w.]+\}?|\{\{.*\}\}|<[^<>]*>|%[\w]+%|\*+|x+|\.+|-+|null|none|true|false"
    r"|changeme|redacted|\[redacted[^\]]*\]|(?:your|my|the|example)[a-z_-]*)"
)

# A file's path (`exports/2026/07/part-1.json`, an S3 object's "Key") or a URL
# that carries no credentials: random enough, and no secret.
_PATH_OR_URL = re.compile(
    r"[\w.-]+(?:/[\w.-]+)+\.[A-Za-z0-9]{1,8}|[a-zA-Z][a-zA-Z0-9+.-]*://[^@\s]+"
)

# Words that end a secret's name ("db_password", "SecretAccessKey", "x-api-key",
# "refresh_token"): a word may be the end of a longer name, so none needs more.
_SECRET_WORDS = (
    r"pass(?:words?|wd|phrase)|pwd|secret|token|credentials?|(?:api|access|secret|private)[ _-]?key"
)


def builtin_rules() -> list[Rule]:
    """toolbus's own rules: personal data, a secret after a secret word, and
    where gitleaks' own misses (it replaces gitleaks' rule of the same id)."""
    return [
        Rule(
            # gitleaks' ends a key with `\b`, which a key ending in "-" (1 in 64)
            # does not pass.
            "openai-api-key",
            r"\b(sk-(?:proj|svcacct|admin)-(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})T3BlbkFJ"
            r"(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})|sk-[a-zA-Z0-9]{20}T3BlbkFJ[a-zA-Z0-9]{20})"
            r"(?![A-Za-z0-9_-])",
            entropy=3.0,
            keywords=("t3blbkfj",),
        ),
        Rule(
            "email",
            r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9-]{1,63}\.)+"
            r"[A-Za-z]{2,24}(?![\w-])",
            kind="email",
            keywords=("@",),
        ),
        Rule(
            "card-number",
            # Every issuer's numbers start with 2 to 6.
            r"(?<![\w.-])[2-6]\d(?:[ -]?\d){11,17}(?![\w-])",
            kind="card",
            check=_card,
        ),
        Rule(
            "iban",
            r"(?<![\w-])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![\w-])",
            kind="iban",
            check=iban_ok,
        ),
        Rule(
            "phone-international",
            r"(?<![\w+])\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?![\w])",
            kind="phone",
            check=_phone,
            keywords=("+",),
        ),
        Rule(
            "phone-us",
            r"(?<![\w-])(?:\(\d{3}\) ?|\d{3}[-.])\d{3}[-.]\d{4}(?![\w-])",
            kind="phone",
            check=_phone,
        ),
        Rule(
            "secret-after-word",
            # ("secret_2": a numbered name is the same name.)
            rf"(?:{_SECRET_WORDS})(?:[_-]?\d{{1,3}})?[\"']?(?:\s+is|\s*(?::|=|:=|=>))\s*[\"'`]?"
            r"([^\s\"'`,;]{8,4096})",
            kind="secret",
            group=1,
            check=secret_like,
            keywords=("pass", "pwd", "secret", "key", "token", "credential"),
            lowercase=True,
        ),
    ]


# -- gitleaks ---------------------------------------------------------------------------

# gitleaks' rule ids whose kind is not the general "secret".
_GITLEAKS_KINDS = {"private-key": "private_key", "jwt": "jwt", "jwt-base64": "jwt"}
# Dropped: what our own rules do better here (gitleaks' generic rule matches any
# "key: <10+ word characters>", ids and hashes included, where ours asks for a
# secret word and a secret-like value).
_GITLEAKS_DROPPED = frozenset({"generic-api-key"})

_POSIX = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "xdigit": "0-9A-Fa-f",
    "upper": "A-Z",
    "lower": "a-z",
    "space": r"\s",
    "word": r"\w",
    "punct": r"!-/:-@\[-`{-~",
}
_INLINE_FLAGS = re.compile(r"\(\?([a-zA-Z]+)\)")


def go_to_python(pattern: str) -> str:
    """A Go (RE2) regular expression in Python's syntax: POSIX classes spelt
    out, `\\z` as `\\Z`, and flags set mid-pattern (`a(?i)b`, which Python
    rejects) scoped to the rest of their group (`a(?i:b)`)."""
    for name, chars in _POSIX.items():
        pattern = pattern.replace(f"[:{name}:]", chars)
    pattern = pattern.replace(r"\z", r"\Z")
    while True:
        found = [m for m in _INLINE_FLAGS.finditer(pattern) if m.start() > 0]
        if not found:
            return pattern
        m = found[0]
        end = _group_end(pattern, m.end())
        pattern = f"{pattern[: m.start()]}(?{m.group(1)}:{pattern[m.end() : end]}){pattern[end:]}"


def _group_end(pattern: str, i: int) -> int:
    """The index of the `)` closing the group that position `i` is in (or
    the pattern's end), skipping escapes and character classes."""
    depth = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return n


@dataclass(frozen=True, slots=True)
class Loaded:
    """Rules read from a gitleaks configuration, and what could not be used."""

    rules: list[Rule]
    skipped: dict[str, str]  # rule id: why
    allow: tuple[str, ...]  # the configuration's global allow-list patterns
    stopwords: tuple[str, ...]


def gitleaks_rules(text: str | None = None) -> Loaded:
    """The rules of a gitleaks TOML configuration (by default the vendored one)."""
    if text is None:
        text = resources.files(__package__).joinpath("rules/gitleaks.toml").read_text("utf-8")
    config = tomllib.loads(text)
    rules: list[Rule] = []
    skipped: dict[str, str] = {}
    for raw in config.get("rules", []):
        rid = raw.get("id", "?")
        if rid in _GITLEAKS_DROPPED:
            skipped[rid] = "replaced by toolbus's secret-after-word rule"
            continue
        if "regex" not in raw:
            skipped[rid] = "matches file paths only"
            continue
        allow, stop = _allowlists(raw.get("allowlists", ()))
        try:
            rules.append(
                Rule(
                    rid,
                    _without_context(go_to_python(raw["regex"])),
                    kind=_GITLEAKS_KINDS.get(rid, "secret"),
                    group=int(raw.get("secretGroup", 0)),
                    entropy=float(raw.get("entropy", 0.0)),
                    keywords=tuple(raw.get("keywords", ())),
                    allow=allow,
                    stopwords=stop,
                )
            )
        except ValueError as e:
            skipped[rid] = str(e)
    glob = config.get("allowlist", {})
    return Loaded(
        rules,
        skipped,
        tuple(go_to_python(r) for r in glob.get("regexes", ())),
        tuple(glob.get("stopwords", ())),
    )


# gitleaks' patterns open with up to fifty characters of context before their
# keyword. A match needs none of them (the value is a later group), and Python's
# engine would try all fifty at every position of a text.
_CONTEXT = r"[\w.-]{0,50}?"


# Go's engine runs in linear time whatever the pattern; Python's backtracks. An
# unbounded ".*" (gitleaks' curl rules: from "curl" to its "-H") then costs the
# square of a line's length when the line repeats the keyword: 48 KB of
# "curl curl ..." took seconds, holding the GIL. Bounded, the cost is linear.
_ANY_RUN = re.compile(r"(?<!\\)\.\*(\??)")
_LONGEST_RUN = 256


def _bounded(pattern: str) -> str:
    return _ANY_RUN.sub(lambda m: f"[^\\n]{{0,{_LONGEST_RUN}}}{m.group(1)}", pattern)


def _without_context(pattern: str) -> str:
    pattern = _bounded(pattern)
    changed = True
    while changed:
        changed = False
        for head in ("", "(?i)", "(?i:"):
            if pattern.startswith(head + _CONTEXT):
                pattern = head + pattern[len(head) + len(_CONTEXT) :]
                changed = True
    return pattern


def _allowlists(lists: Sequence[dict[str, Any]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A rule's allow patterns and stop words (those that test the value: an
    allow-list of paths or of the whole line has nothing to test here)."""
    allow: list[str] = []
    stop: list[str] = []
    for a in lists:
        if a.get("regexTarget", "secret") == "secret" and a.get("condition", "OR") == "OR":
            allow.extend(go_to_python(r) for r in a.get("regexes", ()))
        stop.extend(a.get("stopwords", ()))
    return tuple(allow), tuple(stop)
