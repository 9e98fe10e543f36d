"""toolbus's own rules: personal data (e-mail addresses, card numbers, IBANs,
phone numbers), a secret after a secret word, credentials in headers,
connection strings and command lines, and where gitleaks' own rule of the same
id misses or costs too much (it replaces that one).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ._checks import iban_ok
from ._rules import Rule
from ._values import (
    PORTS,
    is_address,
    is_card,
    is_phone,
    not_a_secret,
    password_like,
    secret_like,
    session_cookie,
    under_key,
)

__all__ = ["builtin_rules"]

# Words that end a secret's name ("db_password", "SecretAccessKey", "x-api-key",
# "refresh_token"): a word may be the end of a longer name, so none needs more.
_PASSWORD_WORDS = r"pass(?:words?|wd|phrase)|pwd"
# A quoted key that names a password, and its colon (JSON text, a dict's repr).
_PASSWORD_QUOTED_KEY = (
    r"[\"'][\w.-]{0,64}?(?:" + _PASSWORD_WORDS + r")(?:[_-]?\d{1,3})?\\?[\"']\s*:\s*"
)
_SECRET_WORDS = (
    _PASSWORD_WORDS + r"|secret|(?<!page)(?<!page[_-])(?<!next)(?<!next[_-])"
    r"(?<!continuation)(?<!continuation[_-])(?<!cursor)(?<!cursor[_-])(?<!sync)(?<!sync[_-])"
    r"(?<!resume)(?<!resume[_-])(?<!csrf)(?<!csrf[_-])token"
    r"|credentials?|(?:api|access|secret|private)[ _-]?key"
)

# What a secret word's value is after "is", ":" or "=" ("password is: X" too):
# eight characters or more; ending in no closing bracket unless it holds an
# opening one (`${DB_PASSWORD}`): else the bracket is the text's around it
# (`(token=X)`, and `{"password": 83749261}` stays JSON).
# (The colon after "is" only with what comes before it: a `\s*` there and the
# rule's own after it would split a long run of spaces every way, the square
# of its length: seconds on a padded page, found by review.)
_IS_OR_COLON = r"(?:\s+is(?:\s*:)?|\s*(?::|=|:=|=>|%3d))"
_VALUE = r"[^\s\"'`,;\\]"
_A_VALUE = rf"(?={_VALUE}{{8}})({_VALUE}*[(\[{{<]{_VALUE}*|{_VALUE}{{7,}}[^\s\"'`,;\\)\]}}>])"

# A field of a query string or a form ("?user=bob&password=hunter2") is the
# query rules': its value ends at the next "&", where a secret word's value
# elsewhere runs on ("DB_PASSWORD=Xy7&k=Qz9!"). (A name of up to twelve more
# characters before the word: "&db_password=".)
# (Written out from one: hyperscan refuses a repeat of `{0}`, and a rule it
# cannot compile is a candidate in every text.)
_NOT_IN_A_QUERY = "(?<![?&])" + "".join(rf"(?<![?&][\w.-]{{{k}}})" for k in range(1, 13))
_QUERY = r"[?&][\w.%%-]{0,64}?(?:%s)(?:[_-]?\d{1,3})?(?:=|%%3d)([^&\s#\"'<>]{%d,256})"

# An option or an XML element named for a secret ("--api-key", "<db:password>"):
# the rest of a longer name before it ("--db-password", "<AppSecret>"). An
# option's value follows one space or "=" (help text sets its description
# further off); an element's text may be CDATA.
_OPTION = r"(?<![\w-])--?(?:[a-z0-9]+[_-]){0,4}(?:%s)(?![\w-])[ \t=][\"']?([^\s\"']{%d,256})"
_ELEMENT = (
    r"<[\w.:-]{0,64}?(?:%s)(?:\s[^<>]{0,256})?>\s*(?:<!\[cdata\[)?([^<>\s]{%d,256}?)"
    r"(?:\]\]>)?\s*</"
)
_PASSWORD_OPTIONS = _PASSWORD_WORDS + r"|pass(?:in|out)?|(?:src|dest)?(?:store|key)pass"


def _a_password(value: str) -> bool:
    """What an element or a quoted key that names a password holds: anything
    but a placeholder or code (`under_key`)."""
    return under_key(value, "password")


def _an_option_password(value: str) -> bool:
    """As `_a_password`, and no word in lower case (prose that names the
    option: "set --password interactively"), another option (a flag's
    neighbour: `--no-password --host db`), a help text's metavar
    (`--password TEXT`) or where openssl reads it from (`-pass env:VAR`)."""
    return (
        _a_password(value)
        and not (value.isalpha() and value.islower())
        and not _NOT_AN_OPTION_VALUE.fullmatch(value)
    )


def _an_option_secret(value: str) -> bool:
    """`secret_like`, and none of what `_an_option_password` leaves, nor the
    name, path or spec a secret option takes (`--secret db_password_v2`,
    `--secret id=npmrc,src=...`, `--credentials arn:aws:...`)."""
    return (
        secret_like(value)
        and not _NOT_AN_OPTION_VALUE.fullmatch(value)
        and not _A_SECRETS_NAME.fullmatch(value)
    )


def _a_query_secret(value: str) -> bool:
    """A query's `token=`, `api_key=`: `secret_like`, or six or more characters
    that are no word and no placeholder (a URL's token is often short)."""
    return secret_like(value) or (
        len(value) >= 6 and not value.isalpha() and not not_a_secret(value)
    )


_NOT_AN_OPTION_VALUE = re.compile(
    r"-.*|\[.*|[A-Z][A-Z0-9_]*\]?|(?:env|file|fd):.*|stdin", re.DOTALL
)
_A_SECRETS_NAME = re.compile(
    r"[a-z]+=.*|arn:.*|[A-Za-z]:\\.*|[a-z0-9_.-]+(?:/[a-z0-9_.-]+)+|[a-z]+(?:[_-][a-z0-9]+)+",
    re.DOTALL,
)


_PASSWORD_KEYWORDS = ("pass", "pwd")
_SECRET_KEYWORDS = ("secret", "key", "token", "credential")

# A secret the option, the element or the query's field before it names:
# (rule id, pattern, check, keywords).
_NAMED: tuple[tuple[str, str, Callable[[str], bool], tuple[str, ...]], ...] = (
    # `--password hunter2!`, `--db-pass=S3cret`, openssl's `-pass pass:x`, keytool's `-storepass`.
    ("password-after-option", _OPTION % (_PASSWORD_OPTIONS, 4), _an_option_password,
     _PASSWORD_KEYWORDS),
    # `--api-key sk_live_...`, `--token ghp_...` (not `--page-token`).
    ("secret-after-option", _OPTION % (_SECRET_WORDS, 8), _an_option_secret, _SECRET_KEYWORDS),
    # `<password>sunshine</password>`, `<db:Password>...</db:Password>`.
    ("password-element", _ELEMENT % (_PASSWORD_WORDS, 4), _a_password, _PASSWORD_KEYWORDS),
    # `<SecretAccessKey>...</SecretAccessKey>` (not `<NextToken>`).
    ("secret-element", _ELEMENT % (_SECRET_WORDS, 8), secret_like, _SECRET_KEYWORDS),
    # `?user=bob&password=hunter2&remember=1`, `&pwd%3Ds3cret`.
    ("password-in-query", _QUERY % (_PASSWORD_WORDS, 4), _a_password, _PASSWORD_KEYWORDS),
    # `?api_key=abc123&format=json`, `&access_token=...` (not `&page_token=`).
    ("secret-in-query", _QUERY % (_SECRET_WORDS, 6), _a_query_secret, _SECRET_KEYWORDS),
)  # fmt: skip


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
            # Letters of any script (`jürgen@bücher.de`), and "%40" for the
            # "@" of an address in a URL's query.
            r"(?<![\w.%+-])(?<!//)\w[\w.%+-]{0,63}(?:@|%40)(?:[^\W_][\w-]{0,62}\.)+"
            r"[^\W\d_]{2,24}(?![\w-]|\.\w|:[\w~/])",
            kind="email",
            check=is_address,
            keywords=("@", "%40"),
        ),
        Rule(
            "card-number",
            # Every issuer's numbers start with 2 to 6. A JSON number ("id":
            # 4111...) is an id in JSON text, as is a string under an id's key
            # ("order_id": "4111..."): as a value, a number counts under a key
            # that names a card, and a string of digits under an id's does not
            # (`_walk`). (The first digit comes before the look-behinds, which
            # let Python's re skip ahead to a 2 to 6: half the time on text
            # full of digits.)
            r"[2-6](?<![\w.-][2-6])(?<!\":[2-6])(?<!\": [2-6])"
            r"(?<![iI]d\":\"[2-6])(?<![iI]d\": \"[2-6])\d(?:[ -]?\d){11,17}(?![\w-])",
            kind="card",
            check=is_card,
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
            check=is_card,
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
            check=is_phone,
            keywords=("+",),
        ),
        Rule(
            "phone-us",
            r"(?<![\w-])(?:\(\d{3}\) ?|\d{3}[-.])\d{3}[-.]\d{4}(?![\w-])",
            kind="phone",
            check=is_phone,
        ),
        Rule(
            "secret-after-word",
            # ("secret_2": a numbered name is the same name.)
            # (Not after ":": an ARN's "secret:" names a secret, it holds none.)
            # (`\\"`: JSON inside a JSON string.)
            rf"(?<!:){_NOT_IN_A_QUERY}(?:{_SECRET_WORDS})(?:[_-]?\d{{1,3}})?(?:\\?[\"'])?"
            rf"{_IS_OR_COLON}\s*(?:\\?[\"'`])?{_A_VALUE}",
            kind="secret",
            group=1,
            check=secret_like,
            keywords=("pass", "pwd", "secret", "key", "token", "credential"),
            lowercase=True,
        ),
        Rule(
            "password-after-word",
            # A password need not look random: "password: hunter2024".
            r"(?<!:)" + _NOT_IN_A_QUERY + r"(?:" + _PASSWORD_WORDS + r"|(?<=[_-])pass(?![a-z]))"
            r"(?:[_-]?\d{1,3})?(?:\\?[\"'])?" + _IS_OR_COLON + r"\s*(?:\\?[\"'`])?" + _A_VALUE,
            kind="secret",
            group=1,
            check=password_like,
            keywords=("pass", "pwd"),
            lowercase=True,
        ),
        Rule(
            "password-quoted-key",
            # A password under its key in JSON text or a Python dict's repr
            # (`{"password": "hunter2"}`): the key says what the value is, so
            # it need not look like one (`under_key`). (No space: a sentence
            # there is a form's message, "This field is required.")
            _PASSWORD_QUOTED_KEY + r"\\?[\"']([^\"'\\\s]{4,256})\\?[\"']",
            kind="secret",
            group=1,
            check=_a_password,
            keywords=_PASSWORD_KEYWORDS,
            lowercase=True,
        ),
        Rule(
            "password-json-number",
            # The JSON number under a key that names a password (a PIN):
            # `{"password": 48151623}` as JSON text, as `password-quoted-key`
            # finds a quoted one (and as a dict's number is, by its key).
            _PASSWORD_QUOTED_KEY + r"(-?\d{4,256})(?![\w.])",
            kind="secret",
            group=1,
            check=_a_password,
            keywords=_PASSWORD_KEYWORDS,
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
            check=lambda value: not (not_a_secret(value) or PORTS.fullmatch(value)),
            keywords=("mysql", "mariadb", "sshpass", "docker"),
        ),
        *(
            Rule(
                rule_id,
                pattern,
                kind="secret",
                group=1,
                check=check,
                keywords=words,
                lowercase=True,
            )
            for rule_id, pattern, check, words in _NAMED
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
            r"\s+([a-z0-9._~+/=-]{8,})",
            kind="secret",
            group=1,
            keywords=("authorization",),
            lowercase=True,
        ),
        Rule(
            "cookie-header",
            # A session's cookies: the whole header value.
            r"(?<![\w-])(?:set-)?cookie[\"']?\s*:\s*[\"']?([^\r\n\"']{8,})",
            kind="secret",
            group=1,
            check=session_cookie,
            keywords=("cookie",),
            lowercase=True,
        ),
        Rule(
            "url-password",
            # A connection string's password: postgres://app:s3cr3t@db:5432/app
            # (the user may be an address: smtp://alerts@example.com:pw@mail).
            r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/\"'`]{0,256}:([^\s/@\"'`]{3,256})@"
            r"[\w.\[\]:-]",
            kind="secret",
            group=1,
            check=lambda value: not not_a_secret(value),
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
