"""What a value or a key is taken for: a card number written as one, an
e-mail address that is no file, a secret or a password rather than a word,
a placeholder, code or a path, and what a key's name says its value holds.

Pure functions of a string: the checks toolbus's rules (`_builtin.py`) and
the scanner's walk (`_walk.py`) decide with.
"""

from __future__ import annotations

import functools
import re

from ._checks import luhn_ok, shannon_entropy

__all__ = [
    "PORTS",
    "an_id",
    "is_address",
    "is_card",
    "is_phone",
    "names_a_card",
    "names_an_id",
    "not_a_secret",
    "password_like",
    "secret_key",
    "secret_like",
    "session_cookie",
    "under_key",
]

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


def is_card(value: str) -> bool:
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


def is_address(value: str) -> bool:
    return not _FILE_DOMAIN.fullmatch(value)


def session_cookie(value: str) -> bool:
    """A cookie header's value with a value in it that looks like a secret
    (a session's id), not only `consent=true; theme=dark`."""
    pairs = (part.partition("=") for part in value.split(";"))
    return any(sep and secret_like(v.strip().strip('"')) for _, sep, v in pairs)


def is_phone(value: str) -> bool:
    """Nine to fifteen digits, more than two distinct, and no run of eight
    of one digit written together: a diff's added line `+1700000000000` is
    an epoch in ms (`+1 212 700 0000` is a phone number)."""
    digits = "".join(c for c in value if c.isdigit())
    return 9 <= len(digits) <= 15 and len(set(digits)) > 2 and not _SAME_DIGIT_RUN.search(value)


_SAME_DIGIT_RUN = re.compile(r"(\d)\1{7}")


def secret_like(value: str) -> bool:
    """A value worth hiding where a secret is expected (after "token:",
    under a key named like one): long enough, not a word, a placeholder or
    code, and random enough."""
    value = value.rstrip(".)")  # a sentence's full stop, a call's parenthesis
    # (Longer, it is judged by its head: a value runs to its end whatever its length.)
    value = value[:4096]
    if len(value) < 8 or not_a_secret(value):
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
    value = value[:4096]
    if len(value) < 8 or not_a_secret(value) or _DATE_OR_NUMBER.fullmatch(value):
        return False
    return not value.isalpha() or secret_like(value)


def under_key(value: str, expected: str) -> bool:
    """A string under a key that expects a password or a secret (`secret_key`)
    that is one: a password need only not be a placeholder or code."""
    if expected == "password":
        return len(value) >= 4 and not not_a_secret(value[:4096])
    return secret_like(value)


def not_a_secret(value: str) -> bool:
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


# A number is a card number only under a key that says so: integer ids that
# pass the Luhn check are common, and a number turned into text would break
# the schema the output was made for.
_CARD_WORDS = frozenset({"card", "cards", "cardnumber", "ccnumber", "ccn", "pan"})
_NUMBER_WORDS = frozenset({"number", "num", "no", "nr"})


@functools.lru_cache(maxsize=1024)
def names_a_card(key: str) -> bool:
    """ "card", "card_number", "creditCard", "cc_num", "pan"; not
    "discard_count" or "scorecard_id"."""
    words = [w.lower() for w in _KEY_WORD.findall(key)]
    if not words:
        return False
    last = words[-1]
    if last in _CARD_WORDS:
        return True
    return last in _NUMBER_WORDS and len(words) > 1 and words[-2] in ("card", "cc", "credit")


@functools.lru_cache(maxsize=1024)
def names_an_id(key: str) -> bool:
    """ "id", "order_id", "userIds": a string of digits under it is an id,
    though it passes the Luhn check (one in ten does)."""
    words = _KEY_WORD.findall(key)
    return key.endswith("IDs") or (bool(words) and words[-1].lower() in ("id", "ids"))


def an_id(value: str, key: object) -> bool:
    """A string of digits under a key that names an id (`names_an_id`). (A
    str, not a subclass: what it says of itself could change between the
    walks.)"""
    return (
        type(value) is str
        and value.isascii()
        and value.isdigit()
        and isinstance(key, str)
        and names_an_id(key)
    )


_PIN_WORDS = frozenset({"password", "passwd", "pwd", "passcode", "pin"})


def names_a_pin(key: str) -> bool:
    """Whether a number under `key` is a password or a PIN: its last word names
    one (`password`, `db_passwd`, `pinCode`), not a count of them
    (`weak_passwords`) nor a pass (`pass`, `day_pass`)."""
    words = [w.lower() for w in _KEY_WORD.findall(key)]
    if words and words[-1] == "code":
        words.pop()
    return bool(words) and words[-1] in _PIN_WORDS


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
PORTS = re.compile(r"[\d:./-]+")

# Code that names where a secret comes from: `os.environ["DB_PASSWORD"]`,
# `getenv(`, `settings.DB_PASSWORD`, `process.env.TOKEN`.
# A call or an index only with a quoted argument, none, or cut at a quote: a
# password may hold parentheses ("Summer(2024)", "P4ss[w0rd]!").
_CODE = re.compile(
    r"(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*[\[(].*"
    r"|[A-Za-z_]\w*(?:\(\)?|\[\]?|[\[(]\s*[\"'].*)"
    # A call or a type whose arguments are names: `make_password(raw_password)`,
    # `create_token(identity=user.id)`, `Optional[str]`, `Promise<string>`.
    # (A name of letters, as code's are; "Xk9(mQ2vL7" is a secret.)
    r"|(?:[a-z_]\w*\.)*[A-Za-z_][A-Za-z_]{2,}"
    r"(?:\((?:\s*[A-Za-z_][\w.]*(?:\s*=\s*[\w.]+)?\s*,?)+\)?"
    r"|\[(?:\s*[A-Za-z_][\w.]*\s*,?)+\]?|<[\w, ]+>?)"
    r"|(?:os|process|self|this|settings|config|env|ENV|secrets|vars)\.[\w.]+",
    re.DOTALL,
)
# "2026-12-03", "10:30:00", "1.2.3": no password.
_DATE_OR_NUMBER = re.compile(r"[\d.:/+-]+(?:T[\d.:+-]+Z?)?")

# A value that stands in for a secret rather than being one.
_PLACEHOLDER = re.compile(
    # (`$DB_PASSWORD`, `${db.password}`; not "$uperSecret1")
    # (`$(cat pw.txt`, a backquoted command, terraform's "(sensitive value)".)
    r"(?:\$\{[\w.]+\}|\$[A-Z_][A-Z0-9_]*|\$\(.*|`.*|\([a-z]+\)?"
    r"|(?i:\{\{.*\}\}|<[^<>]*>|%[\w]+%|\*+|x+|\.+|-+|null|none|true|false"
    # "your-api-key", "my_token"; not "Mystery-Box" or "Theodore"
    r"|changeme|redacted|\[redacted[^\]]*\]|(?:your|my|the|example)[_-][a-z_-]*"
    # What a schema or a form says in a password's place.
    r"|required|optional|string|hidden|secret|password|enabled|disabled|sensitive|masked"
    # A form's verdict on the password it was given: `{"password": "Invalid"}`.
    r"|invalid|incorrect|wrong|expired|missing|mismatch|too[ _-](?:short|long|weak)|weak"
    r"|omitted|unset|empty|n/?a))"
)

# A file's path (`exports/2026/07/part-1.json`, an S3 object's "Key") or a URL
# that carries no credentials: random enough, and no secret.
_PATH_OR_URL = re.compile(
    r"[\w.-]+(?:/[\w.-]+)+\.[A-Za-z0-9]{1,8}|[a-zA-Z][a-zA-Z0-9+.-]*://[^@\s]+"
)
