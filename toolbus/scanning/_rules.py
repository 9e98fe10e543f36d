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

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ._checks import iban_ok, luhn_ok, shannon_entropy

__all__ = [
    "KINDS",
    "PERSONAL",
    "SECRETS",
    "Rule",
    "builtin_rules",
    "password_like",
    "secret_key",
    "secret_like",
    "under_key",
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
        if not isinstance(self.group, int) or not 0 <= self.group <= compiled.groups:
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
            if isinstance(given, str | bytes) or not all(isinstance(x, str) for x in given):
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
            return None
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


# An escape (`\\S`, `\\x4A`, `\\N{...}`) or a group's name is no letter to match.
_ESCAPES_AND_NAMES = re.compile(r"\\N\{[^}]*\}|\\x[0-9A-Fa-f]{2}|\\.|\(\?P?[<=][\w]*>?|\(\?P=\w+\)")
_CLASS = re.compile(r"\[\^?\]?[^\]]*\]")
_UPPER = re.compile(r"[A-Z]")
_LOWER = re.compile(r"[a-z]")


def _upper_case_to_match(pattern: str) -> bool:
    """Whether `pattern` asks for an upper-case letter a lower-cased text
    never holds: one outside a class, or a class of them with no lower-case
    one beside (`[A-Z0-9]`; `[A-Za-z]` is fine)."""
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


# -- toolbus's own rules ---------------------------------------------------------------

_CARD_PREFIX = re.compile(r"4|5[1-5]|2[2-7]|3[47]|3[0689]|35|6[0-9]")


# How card numbers are grouped when they are: 4-4-4-4 (and 3 more), or an
# Amex-like 4-6-5. Integers a space apart (a list of counters) are no card.
_CARD_GROUPS = {
    (4, 4, 4, 4),
    (4, 4, 4, 4, 3),
    (4, 4, 4, 1),
    (4, 4, 4, 2),
    (4, 4, 4, 3),
    (4, 6, 5),
    (4, 6, 4),
}


def _card(value: str) -> bool:
    """A card number: Luhn, a known issuer's prefix, and written as one: all
    digits (13 to 16 of them; a longer run is more likely an id), or in the
    groups cards are printed in, one kind of separator between them."""
    digits = "".join(c for c in value if c.isdigit())
    if not _CARD_PREFIX.match(digits) or not luhn_ok(digits) or len(set(digits)) < 2:
        return False
    seps = {c for c in value if not c.isdigit()}
    if not seps:
        return len(digits) <= 16
    if len(seps) > 1:
        return False
    return tuple(len(g) for g in value.split(seps.pop())) in _CARD_GROUPS


# An image's name ("logo@2x.png") is no address; nor is git's "git@host:org/repo".
_FILE_DOMAIN = re.compile(r"(?i).*@.*\.(?:png|jpe?g|gif|svg|webp|bmp|ico|tiff?|avif|heic)")


def _email(value: str) -> bool:
    return not _FILE_DOMAIN.fullmatch(value)


def _session_cookie(value: str) -> bool:
    """A cookie header's value with a value in it that looks like a secret
    (a session's id), not only `consent=true; theme=dark`."""
    pairs = (part.partition("=") for part in value.split(";"))
    return any(sep and secret_like(v.strip().strip('"')) for _, sep, v in pairs)


def _phone(value: str) -> bool:
    digits = sum(c.isdigit() for c in value)
    return 9 <= digits <= 15 and len({c for c in value if c.isdigit()}) > 2


def secret_like(value: str) -> bool:
    """A value worth hiding where a secret is expected (after "token:",
    under a key named like one): long enough, not a word, a placeholder or
    code, and random enough."""
    value = value.rstrip(".)")  # a sentence's full stop, a call's parenthesis
    if not 8 <= len(value) <= 4096 or _not_a_secret(value):
        return False
    if value.isalpha():
        # A word is no secret; sixteen random letters are.
        return len(value) >= 16 and shannon_entropy(value) > 3.5
    return shannon_entropy(value) > 3.0


def password_like(value: str) -> bool:
    """A value worth hiding after "password:" in free text: a password
    need not be random, but it is no word (prose: "password: required"),
    placeholder, code or date."""
    value = value.rstrip(".)")
    if not 8 <= len(value) <= 4096 or _not_a_secret(value) or _DATE_OR_NUMBER.fullmatch(value):
        return False
    return not value.isalpha() or secret_like(value)


def under_key(value: str, expected: str) -> bool:
    """A string under a key that expects a password or a secret (`secret_key`)
    that is one: a password need only not be a placeholder or code."""
    if expected == "password":
        return 4 <= len(value) <= 4096 and not _not_a_secret(value)
    return secret_like(value)


def _not_a_secret(value: str) -> bool:
    return bool(
        _PLACEHOLDER.fullmatch(value)
        or _CODE.fullmatch(value)
        or _PATH_OR_URL.fullmatch(value)
        or _DIRECTORY.fullmatch(value)
    )


# A directory ("PWD=/srv/app", `{"pwd": "~/work"}`): lower case, unlike a random
# secret that happens to start with "/".
_DIRECTORY = re.compile(r"~?/[a-z0-9_.@+-]+(?:/[a-z0-9_.@+-]*)*")


# What a value under a key is expected to be, by the key's last words: a
# password ("db_password", "passwd"), a secret ("client_secret",
# "SecretAccessKey", "x-api-key", "refresh_token", "Cookie") or nothing
# ("next_page_token", "tokenizer", "secret_name", "partition_key", "key").
_KEY_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
_PASSWORD_WORDS = frozenset(
    {"password", "passwords", "passwd", "passphrase", "passphrases", "pwd", "pass"}
)
# "password_confirmation", "new_password", "passwordRepeat".
_PASSWORD_AFTER = frozenset({"confirmation", "confirm", "repeat", "again", "old", "new", "current"})
_SECRET_WORDS_LAST = frozenset(
    {
        "secret",
        "secrets",
        "credential",
        "credentials",
        "apikey",
        "apikeys",
        "cookie",
        "cookies",
        "authorization",
        "auth",
    }
)
_KEY_BEFORE_KEY = frozenset(
    {
        "api",
        "access",
        "secret",
        "private",
        "signing",
        "encryption",
        "master",
        "auth",
        "subscription",
        "client",
        "session",
        "hmac",
        "app",
        "shared",
        "webhook",
        "jwt",
    }
)
# A token that pages or syncs a listing is no credential (AWS' "nextToken").
_NOT_CREDENTIAL_TOKENS = frozenset(
    {"page", "next", "continuation", "cursor", "sync", "pagination", "resume", "csrf", "max"}
    # "input_tokens", "total_tokens": counts, not credentials.
    | {"input", "output", "total", "prompt", "completion", "num", "cached", "reasoning"}
)


@functools.lru_cache(maxsize=4096)
def secret_key(key: str) -> str | None:
    """ "password", "secret" or None: what a string under `key` is taken for."""
    words = [w.lower() for w in _KEY_WORD.findall(key)]
    if not words:
        return None
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if (
        last in _PASSWORD_WORDS
        or (before in _PASSWORD_WORDS and last in _PASSWORD_AFTER)
        or (before, last) == ("pass", "phrase")
    ):
        return "password"
    if last in _SECRET_WORDS_LAST:
        return "secret"
    if last in ("token", "tokens") and before not in _NOT_CREDENTIAL_TOKENS:
        return "secret"
    if last in ("key", "keys") and before in _KEY_BEFORE_KEY:
        return "secret"
    return None


# `-p3306:3306`: docker's ports, not mysql's password.
_PORTS = re.compile(r"[\d:./-]+")

# Code that names where a secret comes from: `os.environ["DB_PASSWORD"]`,
# `getenv(`, `settings.DB_PASSWORD`, `process.env.TOKEN`.
# A call or an index only with a quoted argument, none, or cut at a quote: a
# password may hold parentheses ("Summer(2024)", "P4ss[w0rd]!").
_CODE = re.compile(
    r"(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*[\[(].*"
    r"|[A-Za-z_]\w*(?:\(\)?|\[\]?|[\[(]\s*[\"'].*)"
    r"|(?:os|process|self|this|settings|config|env|ENV|secrets|vars)\.[\w.]+",
    re.DOTALL,
)
# "2026-12-03", "10:30:00", "1.2.3": no password.
_DATE_OR_NUMBER = re.compile(r"[\d.:/+-]+(?:T[\d.:+-]+Z?)?")

# A value that stands in for a secret rather than being one.
_PLACEHOLDER = re.compile(
    # (`$DB_PASSWORD`, `${db.password}`; not "$uperSecret1")
    r"(?:\$\{[\w.]+\}|\$[A-Z_][A-Z0-9_]*"
    r"|(?i:\{\{.*\}\}|<[^<>]*>|%[\w]+%|\*+|x+|\.+|-+|null|none|true|false"
    # "your-api-key", "my_token"; not "Mystery-Box" or "Theodore"
    r"|changeme|redacted|\[redacted[^\]]*\]|(?:your|my|the|example)[_-][a-z_-]*"
    # What a schema or a form says in a password's place.
    r"|required|optional|string|hidden|secret|password|enabled|disabled|sensitive|masked"
    r"|omitted|unset|empty|n/?a))"
)

# A file's path (`exports/2026/07/part-1.json`, an S3 object's "Key") or a URL
# that carries no credentials: random enough, and no secret.
_PATH_OR_URL = re.compile(
    r"[\w.-]+(?:/[\w.-]+)+\.[A-Za-z0-9]{1,8}|[a-zA-Z][a-zA-Z0-9+.-]*://[^@\s]+"
)

# Words that end a secret's name ("db_password", "SecretAccessKey", "x-api-key",
# "refresh_token"): a word may be the end of a longer name, so none needs more.
_SECRET_WORDS = (
    r"pass(?:words?|wd|phrase)|pwd|secret|(?<!page)(?<!page[_-])(?<!next)(?<!next[_-])"
    r"(?<!continuation)(?<!continuation[_-])(?<!cursor[_-])(?<!sync[_-])(?<!csrf[_-])token"
    r"|credentials?|(?:api|access|secret|private)[ _-]?key"
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
            # (Not right after "//": a URL's user, `https://deploy@host/`.)
            r"(?<![\w.%+-])(?<!//)[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9-]{1,63}\.)+"
            r"[A-Za-z]{2,24}(?![\w-]|\.[A-Za-z0-9]|:[\w~/])",
            kind="email",
            check=_email,
            keywords=("@",),
        ),
        Rule(
            "card-number",
            # Every issuer's numbers start with 2 to 6. A JSON number ("id":
            # 4111...) is an id in JSON text: as a value, a number counts
            # under a key that names a card (`_walk`). (The first digit comes
            # before the look-behinds, which let Python's re skip ahead to a
            # 2 to 6: half the time on text full of digits.)
            r"[2-6](?<![\w.-][2-6])(?<!\":[2-6])(?<!\": [2-6])\d(?:[ -]?\d){11,17}(?![\w-])",
            kind="card",
            check=_card,
        ),
        Rule(
            "card-number-json",
            # The JSON number the card rule leaves alone, under a key that names
            # a card: `{"card_number": 4111111111111111}` as JSON text.
            # (A whole key: not "discard", "timespan" or "scorecard".)
            r"(?<![a-z0-9])(?:credit_?card|card|card_?number|cardnumber|card_?no|cc_?num(?:ber)?"
            r"|ccn|pan)\"\s*:\s*"
            r"([2-6]\d{12,18})(?![\w.-])",
            kind="card",
            group=1,
            check=_card,
            keywords=("card", "pan", "cc"),
            lowercase=True,
        ),
        Rule(
            "iban",
            r"(?<![\w-])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![\w-])",
            kind="iban",
            check=iban_ok,
        ),
        Rule(
            "phone-international",
            # One digit a step (a separator or a parenthesis before or after it
            # optional): groups of one to four digits let Python try every way to
            # cut a long run of digits into them, 10 µs a character (found by review).
            r"(?<![\w+])\+[1-9](?:[ .-]?\(?\d\)?){6,16}(?![\w])",
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
            # (Not after ":": an ARN's "secret:" names a secret, it holds none.)
            # (`\\"`: JSON inside a JSON string.)
            rf"(?<!:)(?:{_SECRET_WORDS})(?:[_-]?\d{{1,3}})?(?:\\?[\"'])?(?:\s+is|\s*(?::|=|:=|=>|%3d))"
            r"\s*(?:\\?[\"'`])?([^\s\"'`,;\\]{8,4096})",
            kind="secret",
            group=1,
            check=secret_like,
            keywords=("pass", "pwd", "secret", "key", "token", "credential"),
            lowercase=True,
        ),
        Rule(
            "password-after-word",
            # A password need not look random: "password: hunter2024".
            r"(?<!:)(?:pass(?:words?|wd|phrase)|pwd)(?:[_-]?\d{1,3})?(?:\\?[\"'])?"
            r"(?:\s+is|\s*(?::|=|:=|=>|%3d))\s*(?:\\?[\"'`])?([^\s\"'`,;\\]{8,4096})",
            kind="secret",
            group=1,
            check=password_like,
            keywords=("pass", "pwd"),
            lowercase=True,
        ),
        Rule(
            "password-option",
            # A password on a command line: `mysql -pS3cret`, `sshpass -p 'S3cret'`.
            # (The command itself, not a word of a longer name; one command:
            # no ";", "|" or "&" between it and its option.)
            r"(?:(?<![\w.-])(?:mysql|mysqldump|mysqladmin|mariadb)(?![\w.:-])[^\n;|&]{0,200}?\s-p"
            r"|\bsshpass\s+-p\s*|\bdocker\s+login\b[^\n;|&]{0,200}?\s(?:-p|--password)[ =])"
            r"[\"']?([^\s\"']{4,256})",
            kind="secret",
            group=1,
            check=lambda value: not (_not_a_secret(value) or _PORTS.fullmatch(value)),
            keywords=("mysql", "mariadb", "sshpass", "docker"),
        ),
        Rule(
            "kubernetes-secret-yaml",
            # A Secret's data: in a text that says `kind: Secret`, each indented
            # `name: <base64>` line's value.
            r"(?m)^[ \t]+[\w.-]+:[ \t]*[\"']?([a-z0-9+/]{16,}={0,3})[\"']?[ \t]*$",
            kind="secret",
            group=1,
            check=secret_like,
            keywords=("kind: secret", 'kind: "secret"', "kind: 'secret'", "kind:secret"),
            lowercase=True,
        ),
        Rule(
            "authorization-header",
            # An HTTP header's credentials, written out in a log or a trace.
            r"authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token|digest|negotiate)"
            r"\s+([a-z0-9._~+/=-]{8,4096})",
            kind="secret",
            group=1,
            keywords=("authorization",),
            lowercase=True,
        ),
        Rule(
            "cookie-header",
            # A session's cookies: the whole header value.
            r"(?<![\w-])(?:set-)?cookie[\"']?\s*:\s*[\"']?([^\r\n\"']{8,4096})",
            kind="secret",
            group=1,
            check=_session_cookie,
            keywords=("cookie",),
            lowercase=True,
        ),
        Rule(
            "url-password",
            # A connection string's password: postgres://app:s3cr3t@db:5432/app.
            r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@\"'`]{0,256}:([^\s/@\"'`]{3,256})@"
            r"[\w.\[\]:-]",
            kind="secret",
            group=1,
            check=lambda value: not _not_a_secret(value),
            keywords=("://",),
        ),
        Rule(
            "private-key-block",
            # The body of a private key, even cut short before its END line
            # (a page of a spilled output, a capped command's output).
            r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----[A-Za-z0-9+/=\s\\:,.-]{16,}",
            kind="private_key",
            keywords=("private key",),
        ),
    ]
