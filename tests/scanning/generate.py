"""Synthetic secrets and personal data, and the scanner's test corpora made from them.

The content scanner (`toolbus.scanning`) is measured on two corpora committed in
`tests/scanning/corpus/`:

- `planted.jsonl`: tool outputs (free text, JSON, logs) with planted secrets and
  personal data the scanner must find, then decoys (card numbers and IBANs
  whose check digits are wrong) it must not flag;
- `ordinary.jsonl`: ordinary tool outputs with nothing to find, its
  false-positive yardstick.

Both are made here from seeded random generators (`Planter` for the first,
`Ordinary` for the second), so a reviewer can regenerate them and get
byte-identical files:

    python -m tests.scanning.generate

Every value is synthetic: random, shaped like the real thing (prefixes,
lengths, Luhn and mod-97 check digits), never a real credential or a real
person's data. `luhn_ok`, `iban_ok` and the candidate finders are the reference
checks the corpora are verified with (tests/scanning/test_corpus.py).
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeAlias

Output: TypeAlias = str | dict[str, Any] | list[Any]
"""A tool output: text, or a JSON-like object or array."""
Pairs: TypeAlias = list[tuple[str, str]]
"""(kind, value) pairs: what a document holds."""

KINDS: Final = (
    "private_key",
    "aws",
    "github",
    "gitlab",
    "slack",
    "stripe",
    "google",
    "openai",
    "anthropic",
    "jwt",
    "generic_secret",
    "email",
    "card",
    "iban",
    "phone",
)
SECRET_KINDS: Final = KINDS[:11]
PERSONAL_KINDS: Final = KINDS[11:]

PLANTED_SEED: Final = 20261203
ORDINARY_SEED: Final = 20261204
PLANTED_DOCUMENTS: Final = 300
DECOY_DOCUMENTS: Final = 40
ORDINARY_DOCUMENTS: Final = 330
CORPUS_DIR: Final = Path(__file__).resolve().parent / "corpus"

# -- reference checks ---------------------------------------------------------

IBAN_LENGTHS: Final = {
    "AT": 20, "BE": 16, "CH": 21, "CZ": 24, "DE": 22, "DK": 18, "ES": 24, "FI": 18,
    "FR": 27, "GB": 22, "GR": 27, "IE": 22, "IT": 27, "LU": 20, "NL": 18, "NO": 15,
    "PL": 28, "PT": 25, "SE": 24,
}  # fmt: skip
_IBAN_SHAPE: Final = re.compile(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}")
_DIGIT_RUN: Final = re.compile(r"(?<![0-9])[0-9]+(?:[ -][0-9]+)*")
_IBAN_START: Final = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}[A-Z0-9]*")
_IBAN_GROUP: Final = re.compile(r" ([A-Z0-9]+)")
EMAIL_RE: Final = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
AT_IN_WORD_RE: Final = re.compile(r"\w@\w")
SECRET_KEY_RE: Final = re.compile(r"(?i)pass(?:word|wd)?|secret|token|api_?key|credential|auth")
"""A JSON key under which a bare value is a secret (`password`, `SecretAccessKey`, ...)."""
SECRET_CONTEXT_RE: Final = re.compile(
    r"(?i)(?:password|passwd|secret|token|api key|credentials?)(?:: ?|=| = | is )$"
)
"""What text right before a generic secret ends with (`... password: `, `api key is `)."""
SECRET_WORD_VALUE_RE: Final = re.compile(
    r"(?i)\b(?:password|passwd|secret|token|api[ _-]?key|credential|key)s?\b\s*(?::|=|\bis\b)"
)
"""A secret-looking word followed by a value: never in the ordinary corpus."""
KNOWN_PREFIX_RE: Final = re.compile(
    r"AKIA|ghp_|github_pat_|glpat-|xox[abpr]-|sk_live_|AIza|(?<![A-Za-z0-9])sk-|T3BlbkFJ"
    r"|PRIVATE KEY|(?<![A-Za-z0-9])eyJ"
)
"""The marks of the secret kinds: never in the ordinary corpus or in a generic secret."""
PHONE_RE: Final = re.compile(
    r"(?<![\w+])\+[0-9][0-9 -]{6,}[0-9]|\([0-9]{3}\) ?[0-9]{3}-[0-9]{4}"
    r"|(?<![0-9-])[0-9]{3}[-.][0-9]{3}[-.][0-9]{4}(?![0-9])"
)
"""Phone-number shapes: never in the ordinary corpus."""


def luhn_ok(digits: str) -> bool:
    """Whether `digits` (single spaces or dashes allowed between digits) passes Luhn."""
    compact = digits.replace(" ", "").replace("-", "")
    if len(compact) < 2 or not (compact.isascii() and compact.isdigit()):
        return False
    total = 0
    for i, ch in enumerate(reversed(compact)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _luhn_check_digit(partial: str) -> str:
    """The digit that makes `partial` + it pass Luhn."""
    return str((10 - _luhn_sum(partial + "0")) % 10)


def _luhn_sum(compact: str) -> int:
    total = 0
    for i, ch in enumerate(reversed(compact)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10


def mod97(compact: str) -> int:
    """The IBAN remainder of `compact` (letters are 10-35, the first four chars moved last)."""
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97


def iban_ok(text: str) -> bool:
    """Whether `text` (compact, or in groups separated by spaces) is a valid IBAN:
    its shape, its country's length (for the countries in IBAN_LENGTHS) and mod 97 == 1."""
    compact = text.replace(" ", "")
    if not _IBAN_SHAPE.fullmatch(compact):
        return False
    expected = IBAN_LENGTHS.get(compact[:2])
    if expected is not None and len(compact) != expected:
        return False
    return mod97(compact) == 1


def card_candidates(text: str) -> Iterator[str]:
    """Every digit string a card scanner could read in `text`: in each run of digits
    (single spaces or dashes allowed between groups, not preceded or followed by a
    digit), each span of whole groups that holds 13 to 19 digits.

    Wider than a scanner that wants word boundaries (`\\b`), so a text this finds
    nothing Luhn-valid in is clean for such a scanner too."""
    for match in _DIGIT_RUN.finditer(text):
        groups = re.split(r"[ -]", match.group())
        for i in range(len(groups)):
            total = 0
            for j in range(i, len(groups)):
                total += len(groups[j])
                if total > 19:
                    break
                if total >= 13:
                    yield "".join(groups[i : j + 1])


def iban_candidates(text: str) -> Iterator[str]:
    """Every compact string an IBAN scanner could read in `text`: from each
    two capitals and two digits not preceded by a letter or digit, the
    following capitals and digits, then any groups of them each after one
    space, cut after each group, when 15 to 34 characters long."""
    for match in _IBAN_START.finditer(text):
        parts = [match.group()]
        pos = match.end()
        while (group := _IBAN_GROUP.match(text, pos)) is not None:
            parts.append(group.group(1))
            pos = group.end()
        compact = ""
        for part in parts:
            compact += part
            if len(compact) > 34:
                break
            if len(compact) >= 15:
                yield compact


def texts_of(output: object) -> list[str]:
    """The texts a scanner reads in a tool output: a string itself; for JSON, the
    serialised document, then every key and every string value."""
    if isinstance(output, str):
        return [output]
    texts = [json.dumps(output, ensure_ascii=False)]
    stack: list[object] = [output]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                texts.append(str(key))
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            texts.append(node)
    return texts


def luhn_hits(output: object) -> set[str]:
    """The Luhn-valid card candidates in an output."""
    return {c for t in texts_of(output) for c in card_candidates(t) if luhn_ok(c)}


def iban_hits(output: object) -> set[str]:
    """The mod-97-valid IBAN candidates in an output (any country, any length)."""
    return {c for t in texts_of(output) for c in iban_candidates(t) if mod97(c) == 1}


def email_hits(output: object) -> set[str]:
    """The e-mail addresses in an output."""
    return {e for t in texts_of(output) for e in EMAIL_RE.findall(t)}


def compact_card(value: str) -> str:
    return value.replace(" ", "").replace("-", "")


def planted_problems(output: object, planted: Pairs) -> list[str]:
    """What is wrong with a planted document: a value missing from the output, or a
    Luhn-valid digit run, valid IBAN or e-mail address in it that was not planted."""
    texts = texts_of(output)
    problems = [
        f"{k} {v!r} not in the output" for k, v in planted if not any(v in t for t in texts)
    ]
    cards = {compact_card(v) for k, v in planted if k == "card"}
    ibans = {v.replace(" ", "") for k, v in planted if k == "iban"}
    emails = {v for k, v in planted if k == "email"}
    problems += [f"unplanted card {c}" for c in sorted(luhn_hits(output) - cards)]
    problems += [f"unplanted IBAN {c}" for c in sorted(iban_hits(output) - ibans)]
    problems += [f"unplanted e-mail {e}" for e in sorted(email_hits(output) - emails)]
    if not emails and any(AT_IN_WORD_RE.search(t) for t in texts):
        problems.append("an @ between word characters")
    return problems


def decoy_problems(output: object, decoys: Pairs) -> list[str]:
    """What is wrong with a decoy document: a decoy missing or valid after all, or
    anything a correct scanner would flag (a Luhn-valid run, a valid IBAN, an e-mail)."""
    texts = texts_of(output)
    problems = [f"{k} {v!r} not in the output" for k, v in decoys if not any(v in t for t in texts)]
    problems += [f"valid decoy {v}" for k, v in decoys if k == "card" and luhn_ok(v)]
    problems += [f"valid decoy {v}" for k, v in decoys if k == "iban" and iban_ok(v)]
    problems += [f"Luhn-valid run {c}" for c in sorted(luhn_hits(output))]
    problems += [f"valid IBAN {c}" for c in sorted(iban_hits(output))]
    problems += [f"e-mail {e}" for e in sorted(email_hits(output))]
    return problems


def ordinary_problems(output: object) -> list[str]:
    """What would make an ordinary document not clean: a Luhn-valid 13-19 digit run,
    a mod-97-valid IBAN-shaped string, an @ between word characters, a phone-number
    shape, a secret kind's prefix, a secret word followed by a value, or a JSON key
    under which a value would be taken for a secret."""
    texts = texts_of(output)
    problems = [f"Luhn-valid run {c}" for c in sorted(luhn_hits(output))]
    problems += [f"valid IBAN {c}" for c in sorted(iban_hits(output))]
    for text in texts:
        for regex, what in (
            (AT_IN_WORD_RE, "@ between word characters"),
            (PHONE_RE, "phone-number shape"),
            (KNOWN_PREFIX_RE, "secret prefix"),
            (SECRET_WORD_VALUE_RE, "secret word with a value"),
        ):
            if (m := regex.search(text)) is not None:
                problems.append(f"{what}: {m.group()!r}")
    problems += [f"secret-looking key {k!r}" for k in _json_keys(output) if SECRET_KEY_RE.search(k)]
    return problems


def _json_keys(output: object) -> Iterator[str]:
    stack: list[object] = [output]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield from (str(k) for k in node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


# -- alphabets and word pools -------------------------------------------------

_ALNUM: Final = string.ascii_letters + string.digits
_B32: Final = string.ascii_uppercase + "234567"
_B64: Final = _ALNUM + "+/"
_URLSAFE: Final = _ALNUM + "-_"
_GENERIC: Final = _ALNUM + "_-+/="
_GENERIC_SYMBOLS: Final = "_-+/="
_HEX: Final = "0123456789abcdef"

_FIRST_NAMES: Final = (
    "jane", "john", "maria", "wei", "aisha", "lukas", "sofia", "omar", "emma", "noah",
    "priya", "diego", "hana", "liam", "fatima", "mateo", "yuki", "olivia", "ivan", "chloe",
    "kwame", "elena", "arjun", "nora", "tomas", "leila", "samuel", "ingrid", "rahul", "zoe",
)  # fmt: skip
_LAST_NAMES: Final = (
    "doe", "smith", "garcia", "chen", "khan", "muller", "rossi", "haddad", "brown", "nguyen",
    "patel", "lopez", "tanaka", "walsh", "okafor", "novak", "silva", "jensen", "kowalski",
    "dubois", "ivanova", "murphy", "schmidt", "moreau", "costa", "larsen", "sato", "mensah",
    "fischer", "reyes",
)  # fmt: skip
_EMAIL_DOMAINS: Final = (
    "example.com", "example.org", "example.net", "mail.example.com", "corp.example.org",
    "support.example.net", "eu.example.com",
)  # fmt: skip
_US_AREA_CODES: Final = (
    "212", "213", "303", "312", "404", "415", "503", "512", "617", "646", "702", "718", "206",
)  # fmt: skip

# -- how planted values sit in text and JSON ----------------------------------

_TEXT_TEMPLATES: Final[dict[str, tuple[str, ...]]] = {
    "private_key": (
        "Here is the deploy key for the build box:\n{v}\nPlease rotate it after the migration.",
        "The old server still had this key on disk:\n\n{v}\n\nWe removed it from the image.",
        "Attached key (do not share outside the team):\n{v}",
    ),
    "aws": (
        "the key is {v} for the bucket with the nightly exports.",
        "Access key {v} belongs to the backup user.",
        "We found {v} in the Terraform state file.",
        "AWS access key id: {v}",
    ),
    "aws_secret": (
        "The config had {v} in plain text.",
        "Someone pasted {v} into the shared channel.",
        "{v}",
    ),
    "github": (
        "Use {v} to push to the mirror.",
        "GitHub token {v} expires next month.",
        "The CI job reads {v} from the environment.",
    ),
    "gitlab": (
        "GitLab personal access token {v} was created for the runner.",
        'curl --header "PRIVATE-TOKEN: {v}" https://gitlab.example.com/api/v4/projects',
        "The runner registered with {v} yesterday.",
    ),
    "slack": (
        "The bot posts with {v} to the alerts channel.",
        "SLACK_BOT_TOKEN={v}",
        "Slack bot token {v} is still in the old config.",
    ),
    "stripe": (
        "Stripe live key {v} is used by the billing worker.",
        "STRIPE_SECRET_KEY={v}",
        "The checkout service was started with {v} by mistake.",
    ),
    "google": (
        "Geocoding calls go to https://maps.googleapis.com/maps/api/geocode/json?address=Lisbon&key={v}",
        "Google API key {v} is restricted to the web app.",
        "The mobile build embeds {v} for the maps view.",
    ),
    "openai": (
        "OPENAI_API_KEY={v}",
        "The notebook calls the API with {v} hard-coded in the first cell.",
        "Authorization: Bearer {v}",
    ),
    "anthropic": (
        "ANTHROPIC_API_KEY={v}",
        "x-api-key: {v}",
        "The eval script uses {v} for the batch run.",
    ),
    "jwt": (
        "Authorization: Bearer {v}",
        "The session cookie held {v} after login.",
        "Decoded {v} to check when it expires.",
    ),
    "generic_secret": (
        "The staging {v} (do not share).",
        "Log in to the router with {v} until the new one is set up.",
        "{v}",
        "Reminder, the shared {v} and it changes on Monday.",
    ),
    "email": (
        "Contact: {v}",
        "Send the invoice to {v} by Friday.",
        "The ticket was opened by {v} yesterday.",
        "cc {v}",
    ),
    "card": (
        "Card on file: {v} (exp 09/28)",
        "The customer paid with {v} on the second attempt.",
        "card number {v}",
    ),
    "iban": (
        "IBAN: {v}",
        "Please transfer the deposit to {v} before the first of the month.",
        "Refunds go to account {v} as agreed.",
    ),
    "phone": (
        "Call me on {v} after six.",
        "Phone: {v}",
        "The courier can reach the front desk at {v} during office hours.",
    ),
}
_LOG_TEMPLATES: Final[dict[str, tuple[str, ...]]] = {
    "private_key": ("loaded key material:\n{v}",),
    "aws": ("s3 client configured with access key {v}", "assumed role via {v}"),
    "aws_secret": ("environment dump: {v}",),
    "github": ("cloning mirror with token {v}", "GITHUB_TOKEN={v} exported for the release step"),
    "gitlab": ("registering runner with {v}",),
    "slack": ("posting alert with {v} to the ops channel",),
    "stripe": ("billing client init key={v}",),
    "google": ("GET https://maps.googleapis.com/maps/api/place/nearbysearch/json?key={v} 200",),
    "openai": ("request headers: Authorization: Bearer {v}",),
    "anthropic": ("request headers: x-api-key: {v}",),
    "jwt": ("incoming request with bearer {v}", "refreshed session, new jwt {v}"),
    "generic_secret": ("connecting with {v}", "config loaded, {v}"),
    "email": ("sent receipt to {v}", "password reset requested for {v}"),
    "card": ("charge declined for card {v} (insufficient funds)", "tokenising card {v}"),
    "iban": ("payout scheduled to {v}", "SEPA mandate created for {v}"),
    "phone": ("SMS code sent to {v}", "callback requested at {v}"),
}
_JSON_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "private_key": ("private_key", "ssh_key", "key_pem", "signing_key"),
    "aws": ("aws_access_key_id", "AccessKeyId", "access_key_id"),
    "aws_secret": ("aws_secret_access_key", "SecretAccessKey", "AWS_SECRET_ACCESS_KEY"),
    "github": ("github_token", "GITHUB_TOKEN", "gh_token"),
    "gitlab": ("gitlab_token", "private_token", "runner_token"),
    "slack": ("slack_bot_token", "bot_token", "SLACK_TOKEN"),
    "stripe": ("stripe_secret_key", "stripe_key", "STRIPE_API_KEY"),
    "google": ("google_api_key", "maps_key", "apiKey"),
    "openai": ("openai_api_key", "OPENAI_API_KEY", "llm_key"),
    "anthropic": ("anthropic_api_key", "ANTHROPIC_API_KEY", "x-api-key"),
    "jwt": ("access_token", "id_token", "session"),
    "generic_secret": (
        "password",
        "db_password",
        "client_secret",
        "secret",
        "api_key",
        "token",
        "credentials",
        "passwd",
        "smtp_password",
    ),
    "email": ("email", "contact", "reply_to", "billing_email"),
    "card": ("card_number", "pan", "payment_card"),
    "iban": ("iban", "payout_account", "bank_account"),
    "phone": ("phone", "mobile", "contact_phone", "tel"),
}
_SECRETISH_KEYS: Final = ("api_key", "secret", "token", "credential", "auth_token", "apiKey")
_INNOCUOUS_KEYS: Final = ("note", "body", "message", "comment", "description", "text", "summary")
_SECRET_WORDS: Final = (
    "password", "passwd", "secret", "token", "api key", "credential", "db password",
    "client secret", "access token", "API key", "admin password", "wifi password",
)  # fmt: skip
_SECRET_SEPS: Final = (": ", "=", " = ", " is ")
_AWS_SECRET_PHRASES: Final = (
    "aws_secret_access_key={v}", "aws_secret_access_key = {v}", "AWS_SECRET_ACCESS_KEY={v}",
    "aws_secret_access_key: {v}", "SecretAccessKey: {v}",
)  # fmt: skip

_PROSE: Final = (
    "The migration to the new cluster finished ahead of schedule.",
    "Most of the remaining work is in the reporting service.",
    "We agreed to revisit the retention policy next quarter.",
    "The nightly job failed twice this week because of a full disk.",
    "Support reported that the export button is hard to find.",
    "The staging environment was rebuilt from scratch on Tuesday.",
    "Please review the attached notes before the planning meeting.",
    "Latency went back to normal once the cache was warmed.",
    "The vendor confirmed the shipment left the warehouse.",
    "A few customers asked whether the invoice layout could change.",
    "The key insight from the incident review was that alerts fired too late.",
    "As a token of thanks, the team ordered lunch for the on-call crew.",
    "Nobody could explain why the old cron entry was still there.",
    "The dashboard now shows the error budget for each service.",
    "We should document the rollback steps before the next release.",
    "The build is green again after the flaky test was quarantined.",
    "The contract renewal is waiting on the legal review.",
    "Traffic from the mobile app doubled after the launch.",
    "I cleaned up the unused feature flags while I was there.",
    "The secret to a calm release turned out to be a longer freeze.",
)
_LOG_FILLER: Final = (
    "worker started",
    "GET /api/v1/orders?page=2&sort=asc 200 in 41 ms",
    "retrying upload (attempt 2 of 5)",
    "cache warmed, 812 entries",
    "connection pool resized to 8",
    "health check ok",
    "scheduled job nightly-export finished",
    "POST /api/v1/sessions 201 in 88 ms",
    "slow query took 1480 ms on orders_by_customer",
    "received SIGTERM, draining connections",
    "feature flag new-checkout enabled for 10 percent of traffic",
    "GET /static/app.css 304 in 3 ms",
)
_LOG_COMPONENTS: Final = ("api", "worker", "auth", "billing", "scheduler", "gateway", "mailer")
_LOG_LEVELS: Final = ("DEBUG", "INFO", "INFO", "INFO", "WARN", "ERROR")


@dataclass(frozen=True)
class _Item:
    kind: str
    value: str
    form: str  # the template family: the kind, or "aws_secret"


class Planter:
    """Valid-looking random secrets and personal data, from its own `random.Random(seed)`:
    the same seed gives the same values in the same order."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def _chars(self, alphabet: str, n: int) -> str:
        return "".join(self.rng.choices(alphabet, k=n))

    def _digits(self, n: int) -> str:
        return self._chars(string.digits, n)

    def _clean(self, kind: str, make: Callable[[], str]) -> str:
        """`make()` until its value holds nothing of another kind a scanner could
        read (a Luhn-valid digit run in an IBAN or a Slack token, ...)."""
        for _ in range(1000):
            value = make()
            if kind != "card" and luhn_hits(value):
                continue
            if kind != "iban" and iban_hits(value):
                continue
            if kind != "email" and "@" in value:
                continue
            return value
        raise RuntimeError(f"no clean {kind} value in 1000 tries")

    # -- secrets --

    def aws_access_key_id(self) -> str:
        return self._clean("aws", lambda: "AKIA" + self._chars(_B32, 16))

    def aws_secret_access_key(self) -> str:
        """40 base64 characters; a secret only after a keyword such as `aws_secret_access_key=`."""
        return self._clean("aws", lambda: self._chars(_B64, 40))

    def github_token(self) -> str:
        def make() -> str:
            if self.rng.random() < 0.6:
                return "ghp_" + self._chars(_ALNUM, 36)
            return "github_pat_" + self._chars(_ALNUM, 22) + "_" + self._chars(_ALNUM, 59)

        return self._clean("github", make)

    def gitlab_token(self) -> str:
        return self._clean("gitlab", lambda: "glpat-" + self._chars(_URLSAFE, 20))

    def slack_token(self) -> str:
        def make() -> str:
            team = str(self.rng.randint(1, 9)) + self._digits(self.rng.randint(9, 12))
            bot = str(self.rng.randint(1, 9)) + self._digits(self.rng.randint(9, 12))
            return f"xoxb-{team}-{bot}-{self._chars(_ALNUM, 24)}"

        return self._clean("slack", make)

    def stripe_key(self) -> str:
        return self._clean(
            "stripe", lambda: "sk_live_" + self._chars(_ALNUM, self.rng.randint(24, 99))
        )

    def google_api_key(self) -> str:
        return self._clean("google", lambda: "AIza" + self._chars(_URLSAFE, 35))

    def openai_key(self) -> str:
        def make() -> str:
            if self.rng.random() < 0.7:
                return f"sk-proj-{self._chars(_URLSAFE, 74)}T3BlbkFJ{self._chars(_URLSAFE, 74)}"
            return f"sk-{self._chars(_ALNUM, 20)}T3BlbkFJ{self._chars(_ALNUM, 20)}"

        return self._clean("openai", make)

    def anthropic_key(self) -> str:
        return self._clean("anthropic", lambda: f"sk-ant-api03-{self._chars(_URLSAFE, 93)}AA")

    def private_key_pem(self) -> str:
        """A PEM block (RSA, PKCS#8 or OpenSSH) of 10-25 random base64 lines of 64
        characters, starting with the bytes real keys of its kind start with."""

        def make() -> str:
            label, header = self.rng.choice(
                (
                    ("RSA PRIVATE KEY", bytes.fromhex("308204a40201000282010100")),
                    (
                        "PRIVATE KEY",
                        bytes.fromhex("308204be020100300d06092a864886f70d0101010500048204a8"),
                    ),
                    ("OPENSSH PRIVATE KEY", b"openssh-key-v1\x00\x00\x00\x00\x04none"),
                )
            )
            n_lines = self.rng.randint(10, 25)
            raw = header + self.rng.randbytes(48 * n_lines - len(header))
            body = base64.b64encode(raw).decode()
            lines = [body[i : i + 64] for i in range(0, len(body), 64)]
            return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])

        return self._clean("private_key", make)

    def jwt(self) -> str:
        """header.payload.signature: `{"alg":"HS256","typ":"JWT"}`, a payload with
        sub, iat and exp, and a random 43-character signature, all base64url."""

        def b64url(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).decode().rstrip("=")

        def make() -> str:
            header = json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":"))
            if self.rng.random() < 0.5:
                sub = "usr_" + self._chars(_HEX, 12)
            else:
                sub = str(self.rng.randint(100000, 99999999))
            iat = self.rng.randint(1735689600, 1798761599)
            exp = iat + self.rng.choice((900, 3600, 86400, 604800))
            payload = json.dumps({"sub": sub, "iat": iat, "exp": exp}, separators=(",", ":"))
            signature = b64url(self.rng.randbytes(32))
            return f"{b64url(header.encode())}.{b64url(payload.encode())}.{signature}"

        return self._clean("jwt", make)

    def generic_secret(self) -> str:
        """20-40 high-entropy characters (letters, digits and `_-+/=`, at least one of
        each sort); a secret only right after a word such as `password:`."""

        def make() -> str:
            while True:
                n = self.rng.randint(20, 40)
                value = self.rng.choice(_ALNUM) + self._chars(_GENERIC, n - 1)
                if (
                    any(c.isupper() for c in value)
                    and any(c.islower() for c in value)
                    and any(c.isdigit() for c in value)
                    and any(c in _GENERIC_SYMBOLS for c in value)
                    and not KNOWN_PREFIX_RE.search(value)
                ):
                    return value

        return self._clean("generic_secret", make)

    # -- personal data --

    def email(self) -> str:
        first = self.rng.choice(_FIRST_NAMES)
        last = self.rng.choice(_LAST_NAMES)
        local = self.rng.choice(
            (
                f"{first}.{last}",
                f"{first[0]}{last}",
                f"{first}{self.rng.randint(1, 99)}",
                f"{first}_{last}",
                f"{first}.{last}+{self.rng.choice(('billing', 'news', 'work'))}",
                f"{last}.{first[0]}",
            )
        )
        return f"{local}@{self.rng.choice(_EMAIL_DOMAINS)}"

    def _card(self, valid: bool) -> str:
        brand = self.rng.choice(("visa", "visa", "mastercard", "mastercard", "amex"))
        if brand == "visa":
            prefix, length = "4", 16
        elif brand == "mastercard":
            prefix = str(
                self.rng.randint(51, 55)
                if self.rng.random() < 0.6
                else self.rng.randint(2221, 2720)
            )
            length = 16
        else:
            prefix, length = self.rng.choice(("34", "37")), 15
        partial = prefix + self._digits(length - 1 - len(prefix))
        check = int(_luhn_check_digit(partial))
        if not valid:
            check = (check + self.rng.randint(1, 9)) % 10
        digits = partial + str(check)
        sizes = (4, 6, 5) if length == 15 else (4, 4, 4, 4)
        groups, pos = [], 0
        for size in sizes:
            groups.append(digits[pos : pos + size])
            pos += size
        return self.rng.choice(("", " ", "-")).join(groups)

    def card(self) -> str:
        """A Luhn-valid Visa (16 digits, 4...), Mastercard (51-55 or 2221-2720) or Amex
        (34 or 37, 15 digits) number: compact, or in groups separated by spaces or dashes."""
        return self._card(valid=True)

    def bad_card(self) -> str:
        """Like `card()`, but the Luhn check digit is wrong."""
        return self._card(valid=False)

    def _bban(self, country: str) -> str:
        rng = self.rng
        if country == "DE":
            return self._digits(8) + self._digits(10)
        if country == "GB":
            return self._chars(string.ascii_uppercase, 4) + self._digits(6) + self._digits(8)
        if country == "FR":
            bank, branch, account = self._digits(5), self._digits(5), self._digits(11)
            rib = 97 - (89 * int(bank) + 15 * int(branch) + 3 * int(account)) % 97
            return f"{bank}{branch}{account}{rib:02d}"
        if country == "NL":
            return self._chars(string.ascii_uppercase, 4) + self._digits(10)
        if country == "ES":
            bank, branch, account = self._digits(4), self._digits(4), self._digits(10)

            def control(digits: str, weights: Sequence[int]) -> str:
                d = 11 - sum(int(c) * w for c, w in zip(digits, weights, strict=True)) % 11
                return str({11: 0, 10: 1}.get(d, d))

            first = control(bank + branch, (4, 8, 5, 10, 9, 7, 3, 6))
            second = control(account, (1, 2, 4, 8, 5, 10, 9, 7, 3, 6))
            return bank + branch + first + second + account
        # IT: a check letter (CIN), 5-digit ABI, 5-digit CAB, 12-character account
        return (
            rng.choice(string.ascii_uppercase)
            + self._digits(5)
            + self._digits(5)
            + self._digits(12)
        )

    def _iban(self, valid: bool) -> str:
        country = self.rng.choice(("DE", "GB", "FR", "NL", "ES", "IT"))
        bban = self._bban(country)
        check = 98 - mod97(f"{country}00{bban}")
        if not valid:
            check = self.rng.choice([c for c in range(2, 99) if c != check])
        compact = f"{country}{check:02d}{bban}"
        if self.rng.random() < 0.5:
            return compact
        return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))

    def iban(self) -> str:
        """A valid IBAN (DE, GB, FR, NL, ES or IT, with their lengths and check digits),
        compact or in groups of four separated by spaces."""
        return self._clean("iban", lambda: self._iban(valid=True))

    def bad_iban(self) -> str:
        """Like `iban()`, but the mod-97 check digits are wrong."""
        return self._clean("iban", lambda: self._iban(valid=False))

    def phone(self) -> str:
        """E.164 (`+14155552671`, `+44 20 7946 0958`, `+49 30 901820`, ...) or a US
        national number (`(415) 555-2671`, `415-555-2671`)."""
        rng = self.rng
        area = rng.choice(_US_AREA_CODES)
        exchange = str(rng.randint(200, 999))
        line = self._digits(4)
        form = rng.randrange(8)
        if form == 0:
            return f"+1{area}{exchange}{line}"
        if form == 1:
            return f"+44 20 {rng.choice('378')}{self._digits(3)} {self._digits(4)}"
        if form == 2:
            return f"+44 7700 900{self._digits(3)}"
        if form == 3:
            city = rng.choice(("30", "40", "89", "69", "221"))
            return f"+49 {city} {rng.randint(1, 9)}{self._digits(rng.randint(4, 6))}"
        if form == 4:
            return f"+33 {rng.randint(1, 7)} " + " ".join(self._digits(2) for _ in range(4))
        if form == 5:
            return f"+4420{rng.choice('378')}{self._digits(7)}"
        if form == 6:
            return f"({area}) {exchange}-{line}"
        return f"{area}-{exchange}-{line}"

    # -- documents --

    def _item(self, kind: str) -> _Item:
        makers: dict[str, Callable[[], str]] = {
            "private_key": self.private_key_pem,
            "github": self.github_token,
            "gitlab": self.gitlab_token,
            "slack": self.slack_token,
            "stripe": self.stripe_key,
            "google": self.google_api_key,
            "openai": self.openai_key,
            "anthropic": self.anthropic_key,
            "jwt": self.jwt,
            "generic_secret": self.generic_secret,
            "email": self.email,
            "card": self.card,
            "iban": self.iban,
            "phone": self.phone,
        }
        if kind == "aws":
            if self.rng.random() < 0.5:
                return _Item("aws", self.aws_access_key_id(), "aws")
            return _Item("aws", self.aws_secret_access_key(), "aws_secret")
        return _Item(kind, makers[kind](), kind)

    def _phrase(self, item: _Item) -> str:
        """The value with what must stand right before it (a keyword for a generic or AWS secret)."""
        if item.form == "generic_secret":
            word = self.rng.choice(_SECRET_WORDS)
            return f"{word}{self.rng.choice(_SECRET_SEPS)}{item.value}"
        if item.form == "aws_secret":
            return self.rng.choice(_AWS_SECRET_PHRASES).replace("{v}", item.value)
        return item.value

    def _sentence(self, item: _Item) -> str:
        template = self.rng.choice(_TEXT_TEMPLATES[item.form])
        sentence = template.replace("{v}", self._phrase(item))
        if template.startswith("{v}") and item.form == "generic_secret":
            return sentence[0].upper() + sentence[1:]
        return sentence

    def _log_message(self, item: _Item) -> str:
        return self.rng.choice(_LOG_TEMPLATES[item.form]).replace("{v}", self._phrase(item))

    def _json_pair(self, item: _Item) -> tuple[str, str]:
        """A key and the value under it: the bare value under a key that suits it or
        looks secret, or under an innocuous key, bare or in a sentence."""
        roll = self.rng.random()
        if roll < 0.5:
            key = self.rng.choice(_JSON_KEYS[item.form])
            if item.form == "jwt" and self.rng.random() < 0.2:
                return "Authorization", f"Bearer {item.value}"
            return key, item.value
        if roll < 0.7 and item.kind in SECRET_KINDS:
            return self.rng.choice(_SECRETISH_KEYS), item.value
        key = self.rng.choice(_INNOCUOUS_KEYS)
        bare_ok = item.form not in {"generic_secret", "aws_secret"}
        if bare_ok and self.rng.random() < 0.4:
            return key, item.value
        return key, self._sentence(item)

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _when(self) -> datetime:
        start = datetime(2025, 1, 1, tzinfo=UTC)
        return start + timedelta(seconds=self.rng.randint(0, 2 * 365 * 86400))

    def _text_document(self, items: list[_Item]) -> str:
        fillers: list[str | _Item] = list(self.rng.sample(_PROSE, self.rng.randint(2, 5)))
        parts = fillers + list(items)
        self.rng.shuffle(parts)
        blocks: list[str] = []
        paragraph: list[str] = []
        for part in parts:
            if isinstance(part, str):
                paragraph.append(part)
                continue
            if paragraph:
                blocks.append(" ".join(paragraph))
                paragraph = []
            blocks.append(self._sentence(part))
        if paragraph:
            blocks.append(" ".join(paragraph))
        heading = self.rng.choice(
            (
                "",
                "Notes from the handover:",
                "Summary of the ticket:",
                "Re: staging access",
                "Draft reply:",
            )
        )
        return "\n".join([heading, *blocks] if heading else blocks)

    def _log_document(self, items: list[_Item]) -> str:
        lines: list[str | _Item] = list(self.rng.choices(_LOG_FILLER, k=self.rng.randint(3, 10)))
        for item in items:
            lines.insert(self.rng.randint(0, len(lines)), item)
        when = self._when()
        out = []
        for line in lines:
            when += timedelta(milliseconds=self.rng.randint(1, 4000))
            stamp = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
            component = self.rng.choice(_LOG_COMPONENTS)
            if isinstance(line, str):
                level, message = self.rng.choice(_LOG_LEVELS), line
            else:
                level, message = self.rng.choice(("DEBUG", "INFO", "WARN")), self._log_message(line)
            out.append(f"{stamp} {level:<5} [{component}] {message}")
        return "\n".join(out)

    def _json_document(self, items: list[_Item]) -> Output:
        rng = self.rng
        style = rng.choice(("api", "config", "records", "list"))
        dicts: list[dict[str, Any]]
        lists: list[list[Any]] = []
        root: dict[str, Any] | list[Any]
        created = self._when().strftime("%Y-%m-%dT%H:%M:%SZ")
        if style == "api":
            details: dict[str, Any] = {
                "source": rng.choice(("import", "web", "support")),
                "tags": ["triage"],
            }
            data: dict[str, Any] = {"id": self._uuid(), "created_at": created, "details": details}
            notes: list[Any] = []
            root = {"status": "ok", "request_id": self._uuid(), "data": data, "notes": notes}
            dicts, lists = [data, details], [notes]
        elif style == "config":
            settings: dict[str, Any] = {
                "region": rng.choice(("eu-west-1", "us-east-2")),
                "replicas": rng.randint(1, 6),
            }
            nested: dict[str, Any] = {"enabled": True}
            settings["integrations"] = nested
            root = {
                "service": rng.choice(("billing", "search", "reports", "gateway")),
                "environment": rng.choice(("staging", "production", "dev")),
                "version": f"{rng.randint(0, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
                "settings": settings,
            }
            dicts = [root, settings, nested]
        elif style == "records":
            records = [
                {
                    "id": rng.randint(1000, 99999),
                    "type": rng.choice(("ticket", "comment", "task")),
                    "updated_at": created,
                }
                for _ in range(rng.randint(1, 3))
            ]
            root = {"count": len(records), "results": records, "meta": {"page": 1}}
            dicts = [*records, root["meta"]]
        else:
            entries: list[Any] = [
                {"event": rng.choice(("created", "updated", "shared")), "at": created}
                for _ in range(rng.randint(1, 3))
            ]
            root, dicts = entries, list(entries)
        for item in items:
            if lists and rng.random() < 0.25:
                rng.choice(lists).append(self._sentence(item))
                continue
            key, value = self._json_pair(item)
            target = rng.choice(dicts)
            unique, n = key, 2
            while unique in target:
                unique, n = f"{key}_{n}", n + 1
            target[unique] = value
        return root

    def document(self, n_items: int, kinds: Sequence[str] | None = None) -> tuple[Output, Pairs]:
        """One tool output with `n_items` planted values (of `kinds`, or of random
        kinds, all different when there are at most 15) mixed into ordinary
        content: free text, a JSON object or array, or a log.

        Returns the output and the planted (kind, value) pairs, in planting order.
        Nothing else in the output reads as a card, an IBAN or an e-mail address."""
        for _ in range(200):
            if kinds is not None:
                chosen = list(kinds)
            elif n_items <= len(KINDS):
                chosen = self.rng.sample(KINDS, n_items)
            else:
                chosen = self.rng.choices(KINDS, k=n_items)
            items = [self._item(kind) for kind in chosen]
            shape = self.rng.choice(("text", "json", "log"))
            output: Output
            if shape == "text":
                output = self._text_document(items)
            elif shape == "log":
                output = self._log_document(items)
            else:
                output = self._json_document(items)
            planted = [(item.kind, item.value) for item in items]
            if not planted_problems(output, planted):
                return output, planted
        raise RuntimeError("no consistent document in 200 tries")

    def decoy_document(self, n_items: int) -> tuple[Output, Pairs]:
        """One tool output holding only decoys: `bad_card()` and `bad_iban()` values,
        in text or JSON. A correct scanner flags nothing in it."""
        for _ in range(200):
            decoys: Pairs = []
            for _ in range(n_items):
                if self.rng.random() < 0.5:
                    decoys.append(("card", self.bad_card()))
                else:
                    decoys.append(("iban", self.bad_iban()))
            output: Output
            if self.rng.random() < 0.5:
                lines = list(self.rng.sample(_PROSE, self.rng.randint(1, 3)))
                for kind, value in decoys:
                    item = _Item(kind, value, kind)
                    lines.insert(self.rng.randint(0, len(lines)), self._sentence(item))
                output = "\n".join(lines)
            else:
                record: dict[str, Any] = {
                    "id": self._uuid(),
                    "status": self.rng.choice(("pending", "failed")),
                }
                for kind, value in decoys:
                    key = self.rng.choice(_JSON_KEYS[kind] + ("reference", "note"))
                    if key in record:
                        key = f"{key}_{len(record)}"
                    record[key] = value
                output = record if self.rng.random() < 0.7 else [record]
            if not decoy_problems(output, decoys):
                return output, decoys
        raise RuntimeError("no clean decoy document in 200 tries")


# -- the corpora --------------------------------------------------------------


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def planted_records() -> list[dict[str, Any]]:
    """planted.jsonl's records: 300 documents of 1-4 planted values, then 40 of decoys."""
    planter = Planter(seed=PLANTED_SEED)
    records: list[dict[str, Any]] = []
    for i in range(PLANTED_DOCUMENTS):
        output, planted = planter.document(planter.rng.randint(1, 4))
        records.append(
            {"id": f"p{i + 1:03d}", "output": output, "planted": [list(p) for p in planted]}
        )
    for i in range(DECOY_DOCUMENTS):
        output, decoys = planter.decoy_document(planter.rng.randint(1, 3))
        records.append(
            {
                "id": f"p{PLANTED_DOCUMENTS + i + 1:03d}",
                "output": output,
                "planted": [],
                "decoys": [list(d) for d in decoys],
            }
        )
    return records


def planted_jsonl() -> str:
    return _jsonl(planted_records())


def ordinary_records() -> list[dict[str, Any]]:
    """ordinary.jsonl's records: documents with no secret and no personal data."""
    maker = Ordinary(seed=ORDINARY_SEED)
    return [
        {"id": f"o{i + 1:03d}", "kind": kind, "output": output}
        for i, (kind, output) in enumerate(maker.documents(ORDINARY_DOCUMENTS))
    ]


def ordinary_jsonl() -> str:
    return _jsonl(ordinary_records())


def write_corpora(directory: Path = CORPUS_DIR) -> None:
    """(Re)write planted.jsonl and ordinary.jsonl in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "planted.jsonl").write_text(planted_jsonl(), encoding="utf-8", newline="\n")
    (directory / "ordinary.jsonl").write_text(ordinary_jsonl(), encoding="utf-8", newline="\n")


# -- ordinary documents -------------------------------------------------------

_CITIES: Final = (
    ("Portland, OR", "97205"), ("Austin, TX", "78701"), ("Denver, CO", "80202"),
    ("Madison, WI", "53703"), ("Burlington, VT", "05401"), ("Tucson, AZ", "85701"),
    ("Raleigh, NC", "27601"), ("Boise, ID", "83702"), ("Savannah, GA", "31401"),
    ("Duluth, MN", "55802"), ("Santa Fe, NM", "87501"), ("Ann Arbor, MI", "48104"),
)  # fmt: skip
_CONDITIONS: Final = (
    "Mostly sunny", "Partly cloudy", "Light rain developing in the afternoon", "Scattered showers",
    "Overcast with patchy fog early", "Clear and cold", "Breezy with high clouds",
    "Isolated thunderstorms after 3 PM", "Snow showers tapering off by evening", "Hazy sunshine",
)  # fmt: skip
_WEATHER_EXTRAS: Final = (
    "A frost advisory is in effect until 9 AM.",
    "Air quality is moderate; sensitive groups should limit long outdoor exertion.",
    "The UV index peaks at 7 around midday.",
    "Expect slick roads on bridges and overpasses overnight.",
    "Pollen counts are high for tree pollen.",
    "Sunrise at 6:52 AM, sunset at 7:31 PM.",
    "Rainfall totals of a quarter to half an inch are possible.",
    "",
)
_PRODUCTS: Final = (
    ("desk lamp", "aluminium", "warm and cool light modes and a weighted base"),
    ("backpack", "recycled nylon", "a padded laptop sleeve and water-resistant zips"),
    ("chef's knife", "high-carbon stainless steel", "a full tang and a walnut handle"),
    ("standing desk", "bamboo", "two motors, four height presets and a cable tray"),
    ("rain jacket", "three-layer shell fabric", "taped seams and pit zips"),
    ("coffee grinder", "stainless steel", "40 grind settings and conical burrs"),
    ("bike light", "anodised aluminium", "a 1200-lumen beam and USB-C charging"),
    ("office chair", "mesh and steel", "adjustable lumbar support and 4D armrests"),
    ("cast-iron skillet", "pre-seasoned cast iron", "a helper handle and pour spouts"),
    ("mechanical keyboard", "PBT plastic and aluminium", "hot-swappable switches"),
    ("tent", "ripstop polyester", "two doors, two vestibules and colour-coded poles"),
    ("water bottle", "double-wall stainless steel", "a leak-proof lid"),
)  # fmt: skip
_TEAMS: Final = (
    "the platform team", "the data team", "the support lead", "the mobile team", "design",
    "the release manager", "security", "the on-call engineer", "finance", "the web team",
)  # fmt: skip
_TASKS: Final = (
    "move the nightly export to the new scheduler", "draft the rollback plan for the schema change",
    "audit the unused feature flags", "add alerting on queue depth", "update the onboarding guide",
    "benchmark the new storage class", "review the vendor contract", "split the monolith's billing module",
    "triage the backlog of flaky tests", "retire the legacy search endpoint",
    "write the postmortem for last week's outage", "price out the reserved instances",
)  # fmt: skip
_ERRORS: Final = (
    "Error: connect ECONNREFUSED 10.0.{a}.{b}:5432",
    "HTTP 503 Service Unavailable: upstream timed out after 30000 ms (route /v2/search)",
    "PermissionError: [Errno 13] Permission denied: '/var/lib/app/cache/index.db'",
    "error[E0382]: borrow of moved value: `config` at src/main.rs:{n}:{c}",
    "FATAL: remaining connection slots are reserved for non-replication superuser connections",
    "npm ERR! code ERESOLVE: unable to resolve dependency tree for react-dom {v}",
    "OSError: [Errno 28] No space left on device: '/tmp/build-{h}'",
    "ValueError: invalid literal for int() with base 10: 'n/a' (row {n} of inventory.csv)",
    "kubelet: Back-off restarting failed container api in pod api-{h}-x2k4p",
    "TLS handshake failed: certificate has expired (notAfter 2025-11-30T23:59:59Z)",
    "java.net.SocketTimeoutException: Read timed out after {n} ms",
    "fatal: unable to access 'https://git.example.org/platform/infra.git/': Could not resolve host",
    "429 Too Many Requests: retry after {c} seconds",
    "Segmentation fault (core dumped) in worker pid {n}",
)  # fmt: skip
_PY_FRAMES: Final = (
    ("/srv/app/worker/main.py", "<module>", "run()"),
    ("/srv/app/worker/jobs.py", "run", "result = handler(payload)"),
    ("/srv/app/worker/handlers/export.py", "handle", "rows = fetch_rows(query, limit=page_size)"),
    ("/srv/app/lib/db.py", "fetch_rows", "cursor.execute(sql, params)"),
    ("/usr/lib/python3.11/json/__init__.py", "loads", "return _default_decoder.decode(s)"),
    ("/usr/lib/python3.11/json/decoder.py", "decode", "obj, end = self.raw_decode(s, idx=_w(s, 0).end())"),
    ("/opt/venv/lib/python3.11/site-packages/httpx/_client.py", "send", "response = self._send_handling_auth("),
    ("/srv/app/api/views/reports.py", "summary", "total = sum(r.amount for r in rows) / len(rows)"),
    ("/srv/app/api/serializers.py", "to_dict", 'return {"id": obj.id, "name": obj.display_name}'),
)  # fmt: skip
_PY_EXCEPTIONS: Final = (
    "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
    "ZeroDivisionError: division by zero",
    "KeyError: 'region'",
    "AttributeError: 'NoneType' object has no attribute 'display_name'",
    "httpx.ConnectTimeout: timed out",
    "psycopg.errors.UndefinedColumn: column \"archived_at\" does not exist",
    "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
)  # fmt: skip
_JAVA_FRAMES: Final = (
    "com.example.inventory.ItemService.normalize(ItemService.java:{n})",
    "com.example.inventory.ItemController.update(ItemController.java:{n})",
    "org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:{n})",
    "jakarta.servlet.http.HttpServlet.service(HttpServlet.java:{n})",
    "java.base/java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:{n})",
    "java.base/java.lang.Thread.run(Thread.java:{n})",
    "com.example.billing.InvoiceRenderer.render(InvoiceRenderer.java:{n})",
)  # fmt: skip
_JAVA_EXCEPTIONS: Final = (
    'java.lang.NullPointerException: Cannot invoke "String.length()" because "name" is null',
    "java.lang.IllegalStateException: Connection pool shut down",
    "java.lang.ArrayIndexOutOfBoundsException: Index 5 out of bounds for length 5",
    "java.util.ConcurrentModificationException",
)  # fmt: skip
_NODE_ERRORS: Final = (
    "TypeError: Cannot read properties of undefined (reading 'map')",
    "RangeError: Maximum call stack size exceeded",
    "Error: ENOENT: no such file or directory, open '/app/config/settings.json'",
    "SyntaxError: Unexpected token '<', \"<!DOCTYPE \"... is not valid JSON",
)  # fmt: skip
_NODE_FRAMES: Final = (
    "renderList (/app/src/components/List.js:{n}:{c})",
    "Array.forEach (<anonymous>)",
    "loadConfig (/app/src/config.js:{n}:{c})",
    "processTicksAndRejections (node:internal/process/task_queues:95:5)",
    "async Promise.all (index 0)",
    "Server.handle (/app/node_modules/express/lib/router/index.js:{n}:{c})",
)  # fmt: skip
_CHANGES: Final = {
    "Added": (
        "Export of reports as CSV and Parquet", "A `--dry-run` flag for the migrate command",
        "Dark mode for the settings page", "Retry with exponential backoff for webhook deliveries",
        "Support for Python 3.13", "Per-project rate limits",
    ),
    "Changed": (
        "The default page size is now 50", "Log lines are JSON by default",
        "Uploads larger than 100 MB are streamed", "The CLI prints durations in milliseconds",
    ),
    "Fixed": (
        "A crash when the config file was empty", "Off-by-one in the pagination cursor",
        "Time zones in the weekly digest", "A memory leak in the image resizer",
        "Sorting by date in the audit log",
    ),
    "Removed": ("The deprecated v1 search endpoint", "Support for Node 16"),
}  # fmt: skip
_COMMIT_SUBJECTS: Final = (
    "Fix off-by-one in pagination cursor", "Bump urllib3 from 2.2.1 to 2.2.2",
    "Add retry to webhook delivery", "Refactor report builder into smaller steps",
    "Docs: clarify install steps for Windows", "Speed up CSV export by streaming rows",
    "Remove unused feature flags", "Pin base image to bookworm", "Handle empty config file",
    "Tests: quarantine flaky upload test", "Merge pull request #{n} from release/{v}",
)  # fmt: skip
_PIP_PACKAGES: Final = (
    ("requests", "2.32.3"), ("urllib3", "2.2.2"), ("certifi", "2024.7.4"), ("idna", "3.7"),
    ("numpy", "2.0.1"), ("pandas", "2.2.2"), ("pydantic", "2.8.2"), ("fastapi", "0.111.1"),
    ("uvicorn", "0.30.3"), ("sqlalchemy", "2.0.31"), ("alembic", "1.13.2"), ("click", "8.1.7"),
    ("rich", "13.7.1"), ("pytest", "8.3.2"), ("attrs", "23.2.0"), ("python-dateutil", "2.9.0.post0"),
    ("pyyaml", "6.0.1"), ("jinja2", "3.1.4"), ("markupsafe", "2.1.5"), ("orjson", "3.10.6"),
    ("httpx", "0.27.0"), ("anyio", "4.4.0"), ("boto3", "1.34.149"), ("botocore", "1.34.149"),
)  # fmt: skip
_NPM_PACKAGES: Final = (
    ("react", "18.3.1"), ("react-dom", "18.3.1"), ("express", "4.19.2"), ("lodash", "4.17.21"),
    ("axios", "1.7.2"), ("typescript", "5.5.4"), ("vite", "5.3.5"), ("eslint", "9.8.0"),
    ("zod", "3.23.8"), ("date-fns", "3.6.0"), ("prettier", "3.3.3"), ("vitest", "2.0.4"),
    ("dotenv", "16.4.5"), ("commander", "12.1.0"), ("chalk", "5.3.0"),
)  # fmt: skip
_BOOKS: Final = (
    "Pride and Prejudice", "Moby-Dick", "The Time Machine", "Middlemarch", "Great Expectations",
    "The Count of Monte Cristo", "Frankenstein", "Dracula", "Walden", "Little Women",
    "The Adventures of Huckleberry Finn", "Jane Eyre", "War and Peace", "Anna Karenina",
)  # fmt: skip
_PUBLISHERS: Final = (
    "Penguin Classics",
    "Oxford World's Classics",
    "Vintage",
    "Everyman's Library",
    "Dover",
)
_VIDEO_TOPICS: Final = (
    "How to sharpen a kitchen knife", "Beginner sourdough, start to finish", "Fixing a slow drain",
    "Rust ownership explained", "Walking tour of Lisbon", "Repotting a monstera",
    "Bike chain maintenance in 5 minutes", "The history of the printing press", "Lo-fi beats to study to",
)  # fmt: skip
_CHANNELS: Final = (
    "Home Workshop",
    "Kitchen Basics",
    "Plain Code",
    "Slow Travel",
    "Green Thumb Daily",
)
_TEXT_SNIPPETS: Final = (
    "hello from the build server", "deploy finished at noon", "version 2 of the report template",
    "# Notes\n\nThis folder holds the quarterly reports.\n", "weekly digest: 14 new issues, 9 closed",
    "The quick brown fox jumps over the lazy dog", "meeting moved to Thursday",
    "static assets rebuilt", "lorem ipsum dolor sit amet",
)  # fmt: skip
_PODS: Final = ("api", "worker", "web", "scheduler", "search-indexer", "billing", "gateway")
_MEETING_DECISIONS: Final = (
    "Keep the current on-call rotation until the new hires are onboarded.",
    "Ship the redesigned checkout behind a flag first.",
    "Freeze schema changes during the last week of the quarter.",
    "Move the retrospective to every other Friday.",
    "Use the managed queue instead of running our own broker.",
    "Drop support for the oldest mobile app version in June.",
)  # fmt: skip
_MEETING_REMARKS: Final = (
    "The key takeaway was that most pages came from two noisy alerts.",
    "As a token of thanks for the launch weekend, everyone gets Friday off.",
    "Nobody wants to keep the release process a secret from support anymore.",
    "Latency is the key metric for the next two sprints.",
    "The token bucket limiter behaved well under the load test.",
    "The whole team agreed the secret sauce is smaller pull requests.",
)  # fmt: skip
_ARTICLES: Final = (
    (
        "Resetting your account access",
        "If you forgot how to sign in, open the sign-in page and choose Forgot password. "
        "We send a reset link that works for 30 minutes. Choose a long passphrase you do not "
        "use anywhere else, and turn on two-step verification from the Security tab.",
    ),
    (
        "Rotating access keys safely",
        "Create the new key first, deploy it to every service, then disable the old key and "
        "watch the error rate for a day before deleting it. Never paste keys into tickets or chat.",
    ),
    (
        "Why sessions expire",
        "Each session token has a lifetime of 12 hours. When it runs out, the app asks you to "
        "sign in again; this limits the damage if a device is lost.",
    ),
    (
        "Storing secrets in CI",
        "Keep credentials in the CI system's encrypted variables rather than in the repository. "
        "Masked variables are hidden in job logs, and protected ones are only exposed to "
        "protected branches.",
    ),
)
_DICTIONARY: Final = (
    (
        "token",
        "noun. 1. A thing serving as a visible representation of a fact, quality or feeling. "
        "2. A voucher exchangeable for goods. 3. In computing, a unit of text a model reads. "
        'Example: "a token of our appreciation".',
    ),
    (
        "key",
        "noun. 1. A small piece of shaped metal used to open a lock. 2. A set of musical notes "
        'based on one tonic. adjective. Of crucial importance: "the key issue".',
    ),
    (
        "secret",
        "adjective. Not known or seen by others. noun. Something kept from others; a method of "
        'achieving something that is not generally known: "the secret of good bread".',
    ),
    (
        "ledger",
        "noun. A book or other collection of financial accounts of a particular type.",
    ),
    (
        "cipher",
        "noun. 1. A secret or disguised way of writing. 2. A zero; a figure 0.",
    ),
)
_RECIPES: Final = (
    ("Weeknight tomato soup", ("olive oil", "onion", "garlic", "canned tomatoes", "stock", "basil")),
    ("Overnight oats", ("rolled oats", "milk", "yoghurt", "chia seeds", "berries")),
    ("Lemon roast chicken", ("chicken thighs", "lemon", "thyme", "potatoes", "garlic")),
    ("Chickpea curry", ("chickpeas", "coconut milk", "curry paste", "spinach", "rice")),
    ("Banana bread", ("ripe bananas", "flour", "butter", "brown sugar", "eggs", "baking soda")),
)  # fmt: skip
_CVE_PACKAGES: Final = (
    ("urllib3", "2.2.1", "2.2.2"), ("jinja2", "3.1.3", "3.1.4"), ("requests", "2.31.0", "2.32.0"),
    ("express", "4.18.2", "4.19.2"), ("lodash", "4.17.20", "4.17.21"), ("certifi", "2024.2.2", "2024.7.4"),
)  # fmt: skip
_SEARCH_RESULTS: Final = (
    ("Installing on Linux", "https://docs.example.org/guide/install?os=linux&version=2.4"),
    ("Configuration reference", "https://docs.example.org/reference/config#logging"),
    ("Release notes", "https://example.com/blog/releases?page=2&sort=asc"),
    ("Troubleshooting timeouts", "https://support.example.net/kb/articles/timeouts?lang=en"),
    ("Pricing", "https://www.example.com/pricing?plan=team&billing=annual"),
    ("API changelog", "https://developer.example.com/changelog?since=2025-01-01"),
    ("Status history", "https://status.example.com/history?page=3"),
)  # fmt: skip


class Ordinary:
    """Ordinary tool outputs (prose, JSON API responses, logs, listings) with no
    secret and no personal data, from its own `random.Random(seed)`."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    # -- small values --

    def _hex(self, n: int) -> str:
        return "".join(self.rng.choices(_HEX, k=n))

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _when(self) -> datetime:
        start = datetime(2025, 1, 1, tzinfo=UTC)
        return start + timedelta(seconds=self.rng.randint(0, 2 * 365 * 86400))

    def _ts(self) -> str:
        return self._when().strftime("%Y-%m-%dT%H:%M:%SZ")

    def _date(self) -> str:
        return self._when().strftime("%Y-%m-%d")

    def _semver(self) -> str:
        return f"{self.rng.randint(0, 5)}.{self.rng.randint(0, 30)}.{self.rng.randint(0, 12)}"

    def _price(self) -> str:
        return f"{self.rng.randint(3, 1999)}.{self.rng.choice(('00', '49', '95', '99'))}"

    def _numeric_id(self, lo: int = 10, hi: int = 19) -> str:
        """A numeric id of lo-hi digits that is not Luhn-valid."""
        n = self.rng.randint(lo, hi)
        digits = str(self.rng.randint(1, 9)) + "".join(self.rng.choices(string.digits, k=n - 1))
        if luhn_ok(digits):
            digits = digits[:-1] + str((int(digits[-1]) + 1) % 10)
        return digits

    def _order_number(self) -> str:
        return str(self.rng.randint(1, 9)) + "".join(
            self.rng.choices(string.digits, k=self.rng.randint(5, 9))
        )

    def _ip(self) -> str:
        net = self.rng.choice(
            ("192.0.2", "198.51.100", "203.0.113", "10.20.3", "10.0.14", "172.16.8")
        )
        return f"{net}.{self.rng.randint(1, 254)}"

    def _mac(self) -> str:
        return ":".join(self._hex(2) for _ in range(6))

    def _isbn13(self) -> str:
        body = self.rng.choice(("978", "979")) + "".join(self.rng.choices(string.digits, k=9))
        check = (10 - sum(int(d) * (1 if i % 2 == 0 else 3) for i, d in enumerate(body)) % 10) % 10
        digits = body + str(check)
        if self.rng.random() < 0.5:
            return digits
        reg = self.rng.randint(2, 5)
        return f"{digits[:3]}-{digits[3]}-{digits[4 : 4 + reg]}-{digits[4 + reg : 12]}-{digits[12]}"

    def _isbn10(self) -> str:
        body = "".join(self.rng.choices(string.digits, k=9))
        check = sum((10 - i) * int(d) for i, d in enumerate(body)) % 11
        check = (11 - check) % 11
        return body + ("X" if check == 10 else str(check))

    def _tracking(self) -> tuple[str, str]:
        carrier = self.rng.choice(("UPS", "USPS", "FedEx", "DHL"))
        if carrier == "UPS":
            return carrier, "1Z" + "".join(
                self.rng.choices(string.ascii_uppercase + string.digits, k=6)
            ) + "03" + "".join(self.rng.choices(string.digits, k=8))
        if carrier == "USPS":
            digits = "9400" + "".join(self.rng.choices(string.digits, k=18))
            if self.rng.random() < 0.5:
                return carrier, digits
            return carrier, " ".join(digits[i : i + 4] for i in range(0, 22, 4))
        if carrier == "FedEx":
            return carrier, "".join(self.rng.choices(string.digits, k=12))
        return carrier, "JD" + "".join(self.rng.choices(string.digits, k=18))

    def _video_id(self) -> str:
        return "".join(self.rng.choices(_URLSAFE, k=11))

    def _b64_text(self) -> str:
        return base64.b64encode(self.rng.choice(_TEXT_SNIPPETS).encode()).decode()

    def _pick(self, pool: Sequence[str], lo: int, hi: int) -> list[str]:
        return list(self.rng.sample(pool, self.rng.randint(lo, hi)))

    def _in_order(self, pool: Sequence[str], lo: int, hi: int) -> list[str]:
        """A sample of `pool` in the pool's own order (a stack's frames)."""
        picked = set(self.rng.sample(range(len(pool)), self.rng.randint(lo, hi)))
        return [item for i, item in enumerate(pool) if i in picked]

    # -- documents --

    def weather(self) -> Output:
        rng = self.rng
        city, zip_code = rng.choice(_CITIES)
        hi = rng.randint(28, 98)
        lo = hi - rng.randint(8, 25)
        wind = rng.randint(3, 22)
        return (
            f"Forecast for {city} {zip_code}, {self._when():%A %B %d}: {rng.choice(_CONDITIONS)}. "
            f"High {hi}°F, low {lo}°F. Winds {rng.choice(('N', 'NE', 'SW', 'W', 'SE'))} at {wind} mph, "
            f"gusting to {wind + rng.randint(5, 15)} mph. Chance of precipitation {rng.randrange(0, 100, 10)}%. "
            f"{rng.choice(_WEATHER_EXTRAS)}"
        ).strip()

    def product(self) -> Output:
        rng = self.rng
        name, material, feature = rng.choice(_PRODUCTS)
        adjective = rng.choice(
            ("Lightweight", "Durable", "Compact", "Handsome", "No-nonsense", "Versatile")
        )
        weight = f"{rng.randint(1, 40)}.{rng.randint(0, 9)} lb"
        price = rng.randint(9, 899)
        return (
            f"{adjective} {name} made of {material}, with {feature}. Weighs {weight}; "
            f"ships in {rng.randint(2, 5)} business days. Price ${price}.99 "
            f"(was ${price + rng.randint(5, 60)}.99). Rated {rng.randint(36, 50) / 10} out of 5 "
            f"from {rng.randint(12, 4800):,} reviews. Model {rng.choice(('A', 'B', 'C', 'X'))}{rng.randint(100, 999)}, "
            f"SKU {rng.randint(10, 99)}-{rng.randint(1000, 9999)}-{rng.randint(10, 99)}."
        )

    def meeting_notes(self) -> Output:
        rng = self.rng
        teams = self._pick(_TEAMS, 3, 5)
        day = self._when()
        lines = [f"Weekly sync, {day:%Y-%m-%d}", f"Present: {', '.join(teams)}", "", "Decisions:"]
        lines += [f"- {d}" for d in self._pick(_MEETING_DECISIONS, 1, 3)]
        lines += ["", "Action items:"]
        for task in self._pick(_TASKS, 2, 4):
            due = day + timedelta(days=rng.randint(2, 30))
            lines.append(f"- {rng.choice(teams).capitalize()} to {task} by {due:%Y-%m-%d}")
        lines += ["", rng.choice(_MEETING_REMARKS)]
        return "\n".join(lines)

    def error_message(self) -> Output:
        rng = self.rng
        template = rng.choice(_ERRORS)
        return template.format(
            a=rng.randint(0, 9),
            b=rng.randint(2, 250),
            n=rng.randint(12, 9000),
            c=rng.randint(1, 80),
            h=self._hex(8),
            v=self._semver(),
        )

    def python_traceback(self) -> Output:
        frames = self._in_order([f[0] for f in _PY_FRAMES], 2, 5)
        lines = ["Traceback (most recent call last):"]
        for path in frames:
            _, func, code = next(f for f in _PY_FRAMES if f[0] == path)
            lines.append(f'  File "{path}", line {self.rng.randint(12, 900)}, in {func}')
            lines.append(f"    {code}")
        lines.append(self.rng.choice(_PY_EXCEPTIONS))
        return "\n".join(lines)

    def java_trace(self) -> Output:
        lines = [
            f'Exception in thread "{self.rng.choice(("main", "http-nio-8080-exec-3", "pool-2-thread-1"))}" '
            f"{self.rng.choice(_JAVA_EXCEPTIONS)}"
        ]
        lines += [
            f"\tat {f.format(n=self.rng.randint(20, 1200))}"
            for f in reversed(self._in_order(_JAVA_FRAMES, 3, 6))
        ]
        return "\n".join(lines)

    def node_trace(self) -> Output:
        lines = [self.rng.choice(_NODE_ERRORS)]
        lines += [
            f"    at {f.format(n=self.rng.randint(5, 400), c=self.rng.randint(1, 60))}"
            for f in self._in_order(_NODE_FRAMES, 2, 5)
        ]
        return "\n".join(lines)

    def changelog(self) -> Output:
        lines = [f"## {self._semver()} ({self._date()})", ""]
        for section in self._pick(list(_CHANGES), 1, 3):
            lines.append(f"### {section}")
            for change in self._pick(_CHANGES[section], 1, 2):
                lines.append(f"- {change} (#{self.rng.randint(100, 4999)}, {self._hex(7)})")
            lines.append("")
        return "\n".join(lines).rstrip()

    def orders_api(self) -> Output:
        rng = self.rng
        page = rng.randint(1, 9)
        orders = []
        for _ in range(rng.randint(1, 4)):
            items = [
                {
                    "sku": f"{rng.choice('ABCDEFGH')}{rng.randint(100, 999)}-{rng.choice(('S', 'M', 'L', 'XL'))}",
                    "qty": rng.randint(1, 4),
                    "unit_price": self._price(),
                }
                for _ in range(rng.randint(1, 3))
            ]
            city, zip_code = rng.choice(_CITIES)
            orders.append(
                {
                    "id": self._uuid(),
                    "order_number": self._order_number(),
                    "status": rng.choice(("pending", "paid", "shipped", "delivered", "refunded")),
                    "placed_at": self._ts(),
                    "total": {
                        "amount": self._price(),
                        "currency": rng.choice(("USD", "EUR", "GBP")),
                    },
                    "items": items,
                    "shipping": {
                        "city": city.split(",")[0],
                        "postal_code": zip_code,
                        "country": "US",
                    },
                }
            )
        return {
            "page": page,
            "per_page": 25,
            "total": rng.randint(page * 25, page * 25 + 400),
            "orders": orders,
            "links": {
                "next": f"https://api.shop.example.com/v2/orders?page={page + 1}&per_page=25&sort=asc"
            },
        }

    def git_log(self) -> Output:
        lines = []
        for _ in range(self.rng.randint(3, 10)):
            subject = self.rng.choice(_COMMIT_SUBJECTS).format(
                n=self.rng.randint(100, 2999), v=self._semver()
            )
            if self.rng.random() < 0.5:
                lines.append(f"{self._hex(7)} {subject}")
            else:
                lines.append(f"{self._hex(40)} {self._date()} {subject}")
        return "\n".join(lines)

    def commit_api(self) -> Output:
        rng = self.rng
        sha = self._hex(40)
        files = [
            {
                "filename": rng.choice(
                    ("src/app.py", "src/db.py", "README.md", "tests/test_api.py", "docs/install.md")
                ),
                "status": rng.choice(("modified", "added")),
                "additions": rng.randint(0, 80),
                "deletions": rng.randint(0, 40),
            }
            for _ in range(rng.randint(1, 3))
        ]
        return {
            "sha": sha,
            "html_url": f"https://github.com/example-org/inventory/commit/{sha}",
            "commit": {
                "message": rng.choice(_COMMIT_SUBJECTS).format(
                    n=rng.randint(100, 2999), v=self._semver()
                ),
                "committer": {"date": self._ts()},
                "tree": {"sha": self._hex(40)},
            },
            "parents": [{"sha": self._hex(40)}],
            "stats": {
                "additions": sum(f["additions"] for f in files),
                "deletions": sum(f["deletions"] for f in files),
            },
            "files": files,
        }

    def docker_inspect(self) -> Output:
        rng = self.rng
        name = rng.choice(("platform/api", "platform/worker", "data/etl", "web/frontend"))
        version = self._semver()
        return [
            {
                "Id": f"sha256:{self._hex(64)}",
                "RepoTags": [
                    f"registry.example.com/{name}:{version}",
                    f"registry.example.com/{name}:latest",
                ],
                "Digest": f"sha256:{self._hex(64)}",
                "Created": self._ts(),
                "Architecture": rng.choice(("amd64", "arm64")),
                "Os": "linux",
                "Size": rng.randint(30_000_000, 900_000_000),
                "Config": {
                    "Env": [
                        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        f"PYTHON_VERSION=3.11.{rng.randint(1, 9)}",
                        "LANG=C.UTF-8",
                    ],
                    "Cmd": ["python", "-m", name.split("/")[1]],
                    "ExposedPorts": {f"{rng.choice((8000, 8080, 9090))}/tcp": {}},
                    "WorkingDir": "/app",
                },
                "RootFS": {
                    "Type": "layers",
                    "Layers": [f"sha256:{self._hex(64)}" for _ in range(rng.randint(2, 5))],
                },
            }
        ]

    def pip_freeze(self) -> Output:
        packages = sorted(self.rng.sample(_PIP_PACKAGES, self.rng.randint(6, 16)))
        return "\n".join(f"{name}=={version}" for name, version in packages)

    def package_json(self) -> Output:
        rng = self.rng
        deps = sorted(rng.sample(_NPM_PACKAGES, rng.randint(3, 8)))
        dev = sorted(rng.sample(_NPM_PACKAGES, rng.randint(1, 4)))
        return {
            "name": rng.choice(("@example/web", "inventory-ui", "@example/cli", "docs-site")),
            "version": self._semver(),
            "private": True,
            "scripts": {"build": "vite build", "test": "vitest run", "lint": "eslint ."},
            "dependencies": {n: f"^{v}" for n, v in deps},
            "devDependencies": {n: f"~{v}" for n, v in dev},
        }

    def npm_lock(self) -> Output:
        packages: dict[str, Any] = {}
        for name, version in sorted(self.rng.sample(_NPM_PACKAGES, self.rng.randint(2, 5))):
            packages[f"node_modules/{name}"] = {
                "version": version,
                "resolved": f"https://registry.npmjs.org/{name}/-/{name}-{version}.tgz",
                "integrity": "sha512-" + base64.b64encode(self.rng.randbytes(64)).decode(),
                "license": self.rng.choice(("MIT", "Apache-2.0", "ISC")),
            }
        return {
            "name": "inventory-ui",
            "lockfileVersion": 3,
            "requires": True,
            "packages": packages,
        }

    def csv_measurements(self) -> Output:
        rng = self.rng
        station = f"ST-{rng.randint(1, 40):02d}"
        when = self._when()
        rows = ["timestamp,station,temp_c,humidity_pct,pressure_hpa,wind_ms"]
        temp, humidity, pressure = rng.uniform(-5, 30), rng.randint(30, 90), rng.uniform(990, 1030)
        for _ in range(rng.randint(5, 18)):
            temp += rng.uniform(-0.8, 0.8)
            humidity = min(99, max(15, humidity + rng.randint(-3, 3)))
            pressure += rng.uniform(-0.6, 0.6)
            rows.append(
                f"{when:%Y-%m-%dT%H:%M:%SZ},{station},{temp:.1f},{humidity},{pressure:.1f},{rng.uniform(0, 12):.1f}"
            )
            when += timedelta(minutes=rng.choice((10, 15, 30)))
        return "\n".join(rows)

    def chat_messages(self) -> Output:
        rng = self.rng
        channel = self._numeric_id(17, 19)
        messages = [
            {
                "id": self._numeric_id(17, 19),
                "channel_id": channel,
                "timestamp": self._ts(),
                "content": rng.choice(_PROSE),
                "reactions": rng.randint(0, 12),
                "thread_id": int(self._numeric_id(10, 19)) if rng.random() < 0.4 else None,
            }
            for _ in range(rng.randint(1, 4))
        ]
        return {"channel_id": channel, "guild_id": self._numeric_id(17, 19), "messages": messages}

    def event_ids(self) -> Output:
        rng = self.rng
        return {
            "events": [
                {
                    "event_id": int(self._numeric_id(10, 19)),
                    "type": rng.choice(("click", "view", "purchase", "signup")),
                    "session": self._uuid(),
                    "ts": int(self._when().timestamp()),
                }
                for _ in range(rng.randint(2, 6))
            ],
            "next_cursor": self._numeric_id(13, 19),
        }

    def tracking(self) -> Output:
        rng = self.rng
        carrier, number = self._tracking()
        places = (
            "Louisville, KY, US",
            "Memphis, TN, US",
            "Leipzig, DE",
            "Ontario, CA, US",
            "Chicago, IL, US",
        )
        events = [
            {
                "time": self._ts(),
                "location": rng.choice(places),
                "description": rng.choice(
                    (
                        "Departed facility",
                        "Arrived at facility",
                        "Out for delivery",
                        "Label created",
                    )
                ),
            }
            for _ in range(rng.randint(1, 4))
        ]
        return {
            "carrier": carrier,
            "tracking_number": number,
            "status": rng.choice(("in_transit", "delivered", "label_created")),
            "estimated_delivery": self._date(),
            "events": events,
        }

    def tracking_text(self) -> Output:
        carrier, number = self._tracking()
        return (
            f"Your package is on its way. Carrier: {carrier}. Tracking number {number}. "
            f"Expected delivery {self._date()}; order #{self._order_number()} ships in "
            f"{self.rng.randint(1, 3)} boxes."
        )

    def book_catalog(self) -> Output:
        rng = self.rng
        return {
            "query": "classics",
            "results": [
                {
                    "title": title,
                    "isbn_13": self._isbn13(),
                    "isbn_10": self._isbn10(),
                    "publisher": rng.choice(_PUBLISHERS),
                    "year": rng.randint(1950, 2024),
                    "pages": rng.randint(120, 1300),
                    "price": {"amount": self._price(), "currency": "USD"},
                }
                for title in self._pick(_BOOKS, 1, 4)
            ],
        }

    def network_inventory(self) -> Output:
        rng = self.rng
        rows = [f"{'HOST':<14}{'IP':<16}{'MAC':<19}{'VLAN':<6}STATUS"]
        for i in range(rng.randint(3, 9)):
            host = f"rack{rng.randint(1, 9)}-{rng.choice(('sw', 'db', 'app', 'lb'))}{i + 1:02d}"
            rows.append(
                f"{host:<14}{self._ip():<16}{self._mac():<19}{rng.choice((10, 20, 120, 300)):<6}"
                f"{rng.choice(('up', 'up', 'up', 'down', 'maint'))}"
            )
        return "\n".join(rows)

    def video_search(self) -> Output:
        rng = self.rng
        items = [
            {
                "kind": "youtube#searchResult",
                "etag": "".join(rng.choices(_URLSAFE, k=27)),
                "id": {"kind": "youtube#video", "videoId": self._video_id()},
                "snippet": {
                    "publishedAt": self._ts(),
                    "channelId": "UC" + "".join(rng.choices(_URLSAFE, k=22)),
                    "title": rng.choice(_VIDEO_TOPICS),
                    "channelTitle": rng.choice(_CHANNELS),
                    "liveBroadcastContent": "none",
                },
            }
            for _ in range(rng.randint(1, 4))
        ]
        return {
            "kind": "youtube#searchListResponse",
            "regionCode": rng.choice(("US", "GB", "DE")),
            "pageInfo": {"totalResults": rng.randint(1000, 1000000), "resultsPerPage": len(items)},
            "items": items,
        }

    def s3_listing(self) -> Output:
        rng = self.rng
        when = self._when()
        prefix = f"{rng.choice(('logs', 'exports', 'backups', 'media'))}/{when:%Y/%m}/"
        contents = []
        for _ in range(rng.randint(2, 6)):
            key = f"{prefix}{rng.randint(1, 28):02d}/{rng.choice(('web-01', 'web-02', 'etl'))}/part-{self._hex(8)}.{rng.choice(('log.gz', 'parquet', 'json'))}"
            contents.append(
                {
                    "Key": key,
                    "LastModified": self._ts(),
                    "ETag": f'"{self._hex(32)}"',
                    "Size": rng.randint(512, 90_000_000),
                    "StorageClass": rng.choice(("STANDARD", "GLACIER_IR")),
                }
            )
        return {
            "Name": rng.choice(("example-logs", "acme-data-lake")),
            "Prefix": prefix,
            "KeyCount": len(contents),
            "MaxKeys": 1000,
            "IsTruncated": False,
            "Contents": contents,
        }

    def access_log(self) -> Output:
        rng = self.rng
        when = self._when()
        paths = (
            "/products?page=2&sort=asc",
            "/",
            "/static/app.css",
            "/api/v1/items?limit=50&offset=100",
            "/search?q=standing+desk",
            "/favicon.ico",
            "/health",
        )
        agents = (
            "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
            "curl/8.5.0",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 Safari/605.1.15",
        )
        lines = []
        for _ in range(rng.randint(3, 10)):
            when += timedelta(seconds=rng.randint(0, 30))
            lines.append(
                f'{self._ip()} - - [{when:%d/%b/%Y:%H:%M:%S} +0000] "{rng.choice(("GET", "GET", "POST", "HEAD"))} '
                f'{rng.choice(paths)} HTTP/1.1" {rng.choice((200, 200, 301, 304, 404, 500))} {rng.randint(0, 90000)} '
                f'"-" "{rng.choice(agents)}"'
            )
        return "\n".join(lines)

    def search_results(self) -> Output:
        return [
            {
                "title": title,
                "url": url,
                "snippet": self.rng.choice(_PROSE),
                "fetched_at": self._ts(),
            }
            for title, url in self.rng.sample(_SEARCH_RESULTS, self.rng.randint(2, 5))
        ]

    def directory_listing(self) -> Output:
        rng = self.rng
        names = (
            "README.md",
            "pyproject.toml",
            "src",
            "tests",
            "docs",
            "Makefile",
            ".gitignore",
            "CHANGELOG.md",
            "LICENSE",
            "uv.lock",
            "Dockerfile",
            "scripts",
        )
        lines = [f"total {rng.randint(16, 400)}"]
        for name in sorted(rng.sample(names, rng.randint(4, 10))):
            is_dir = "." not in name and name not in {"Makefile", "LICENSE", "Dockerfile"}
            mode = "drwxr-xr-x" if is_dir else "-rw-r--r--"
            size = 4096 if is_dir else rng.randint(90, 60000)
            lines.append(
                f"{mode} {rng.randint(1, 9):>2} app app {size:>6} {self._when():%b %d %H:%M} {name}"
            )
        return "\n".join(lines)

    def file_contents_api(self) -> Output:
        text = "\n".join(self.rng.sample(_TEXT_SNIPPETS, 3)).encode()
        encoded = base64.b64encode(text).decode()
        path = self.rng.choice(("docs/README.md", "notes/todo.txt", "config/motd.txt"))
        return {
            "type": "file",
            "encoding": "base64",
            "size": len(text),
            "name": path.rsplit("/", 1)[1],
            "path": path,
            "sha": self._hex(40),
            "content": "\n".join(encoded[i : i + 60] for i in range(0, len(encoded), 60)) + "\n",
        }

    def base64_payloads(self) -> Output:
        return {
            "messages": [
                {"message_id": self._uuid(), "data": self._b64_text(), "publish_time": self._ts()}
                for _ in range(self.rng.randint(1, 4))
            ],
            "subscription": "projects/example-project/subscriptions/build-events",
        }

    def checksums(self) -> Output:
        version = self._semver()
        files = (
            f"dist/inventory-{version}.tar.gz",
            f"dist/inventory-{version}-py3-none-any.whl",
            f"dist/inventory-{version}-linux-amd64.zip",
            f"dist/inventory-{version}-darwin-arm64.zip",
        )
        return "\n".join(
            f"{self._hex(64)}  {f}" for f in self.rng.sample(files, self.rng.randint(2, 4))
        )

    def kubectl_pods(self) -> Output:
        rng = self.rng
        lines = [f"{'NAME':<34}{'READY':<8}{'STATUS':<18}{'RESTARTS':<10}AGE"]
        for pod in rng.sample(_PODS, rng.randint(2, 6)):
            suffix = "".join(rng.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
            name = f"{pod}-{self._hex(10)}-{suffix}"
            status = rng.choice(
                ("Running", "Running", "Running", "CrashLoopBackOff", "Pending", "Completed")
            )
            lines.append(
                f"{name:<34}{'1/1' if status == 'Running' else '0/1':<8}{status:<18}"
                f"{rng.randint(0, 14):<10}{rng.randint(1, 40)}d"
            )
        return "\n".join(lines)

    def sql_result(self) -> Output:
        rng = self.rng
        lines = [
            " product_id | name                 |  price  | stock",
            "------------+----------------------+---------+-------",
        ]
        picked = rng.sample(_PRODUCTS, rng.randint(2, 6))
        for product in picked:
            lines.append(
                f" {rng.randint(1000, 99999):>10} | {product[0]:<20} | {self._price():>7} | {rng.randint(0, 500):>5}"
            )
        lines.append(f"({len(picked)} rows)")
        return "\n".join(lines)

    def ci_log(self) -> Output:
        rng = self.rng
        steps = [
            "Checking out repository at " + self._hex(40),
            f"Using Python 3.11.{rng.randint(1, 9)}",
            f"Installed {rng.randint(30, 140)} packages in {rng.randint(2, 40)}.{rng.randint(0, 9)}s",
            "ruff check: All checks passed!",
            f"mypy: Success: no issues found in {rng.randint(40, 300)} source files",
            f"pytest: {rng.randint(200, 2000)} passed, {rng.randint(0, 9)} skipped in {rng.randint(20, 400)}.{rng.randint(10, 99)}s",
            f"Building image registry.example.com/platform/api:{self._semver()}",
            f"Pushed layer sha256:{self._hex(64)}",
            f"Uploading artifact coverage.xml ({rng.randint(20, 900)} KB)",
            f"Job finished in {rng.randint(1, 30)}m {rng.randint(0, 59)}s",
        ]
        return "\n".join(
            f"[{i + 1:02d}] {s}" for i, s in enumerate(steps[: rng.randint(5, len(steps))])
        )

    def exchange_rates(self) -> Output:
        rng = self.rng
        base = {
            "USD": 1.08,
            "GBP": 0.85,
            "JPY": 162.0,
            "CHF": 0.95,
            "SEK": 11.4,
            "CAD": 1.47,
            "AUD": 1.63,
            "NOK": 11.6,
        }
        rates = {
            c: round(base[c] * rng.uniform(0.97, 1.03), 4)
            for c in sorted(rng.sample(sorted(base), 5))
        }
        return {
            "base": "EUR",
            "date": self._date(),
            "rates": rates,
            "source": "https://rates.example.org/latest?base=EUR",
        }

    def calendar(self) -> Output:
        rng = self.rng
        events = []
        for _ in range(rng.randint(1, 4)):
            start = self._when().replace(minute=rng.choice((0, 30)), second=0)
            events.append(
                {
                    "id": self._uuid(),
                    "summary": rng.choice(
                        (
                            "Quarterly planning",
                            "Design review",
                            "Sprint demo",
                            "Office hours",
                            "Incident review",
                            "Budget check-in",
                        )
                    ),
                    "start": f"{start:%Y-%m-%dT%H:%M:%S}Z",
                    "end": f"{start + timedelta(minutes=rng.choice((30, 45, 60))):%Y-%m-%dT%H:%M:%S}Z",
                    "location": f"Room {rng.randint(1, 6)}{rng.choice('ABCD')}",
                    "recurring": rng.random() < 0.3,
                }
            )
        return {"calendar": "Engineering", "time_zone": "UTC", "events": events}

    def dictionary(self) -> Output:
        word, definition = self.rng.choice(_DICTIONARY)
        return f"{word}\n{definition}"

    def support_article(self) -> Output:
        title, body = self.rng.choice(_ARTICLES)
        return f"{title}\n\n{body}\n\nLast updated {self._date()}. Article {self.rng.randint(1000, 99999)}."

    def release_notes(self) -> Output:
        rng = self.rng
        return (
            f"Version {self._semver()} is out. {rng.choice(_CHANGES['Added'])} and "
            f"{rng.choice(_CHANGES['Fixed']).lower()} are the headline changes. Upgrading from "
            f"{self._semver()} needs no migration; see https://example.com/blog/releases?page=1&sort=desc "
            f"for the full list. Thanks to everyone who filed issues: {rng.randint(12, 90)} of them were closed "
            f"this cycle."
        )

    def metrics(self) -> Output:
        rng = self.rng
        return {
            "host": f"app-{rng.randint(1, 30):02d}.internal.example.net",
            "collected_at": self._ts(),
            "cpu": {
                "user_pct": round(rng.uniform(1, 90), 1),
                "system_pct": round(rng.uniform(0, 20), 1),
            },
            "memory": {"used_bytes": rng.randint(10**8, 6 * 10**10), "total_bytes": 64 * 2**30},
            "disk": [
                {"mount": m, "used_pct": round(rng.uniform(5, 97), 1)}
                for m in ("/", "/var", "/data")
            ],
            "load_avg": [round(rng.uniform(0, 8), 2) for _ in range(3)],
            "uptime_s": rng.randint(60, 9_000_000),
        }

    def recipe(self) -> Output:
        title, ingredients = self.rng.choice(_RECIPES)
        return (
            f"{title} (serves {self.rng.randint(2, 6)}, {self.rng.randint(15, 90)} minutes)\n"
            f"Ingredients: {', '.join(ingredients)}.\n"
            f"Heat the oven to {self.rng.choice((180, 200, 220))}°C if baking. The key step is not to rush "
            f"the first stage; a pinch of salt early is the only secret ingredient."
        )

    def geocode(self) -> Output:
        rng = self.rng
        city, zip_code = rng.choice(_CITIES)
        return {
            "query": city,
            "results": [
                {
                    "formatted": f"{city} {zip_code}, USA",
                    "postal_code": zip_code,
                    "geometry": {
                        "lat": round(rng.uniform(25, 48), 6),
                        "lng": round(rng.uniform(-123, -71), 6),
                    },
                    "confidence": rng.randint(6, 10),
                    "place_id": self._numeric_id(10, 12),
                }
            ],
            "status": "OK",
        }

    def vulnerabilities(self) -> Output:
        rng = self.rng
        findings = [
            {
                "id": f"CVE-{rng.randint(2021, 2026)}-{rng.randint(1000, 49999)}",
                "package": name,
                "installed": bad,
                "fixed_in": good,
                "severity": rng.choice(("low", "medium", "high", "critical")),
                "cvss": round(rng.uniform(2, 9.8), 1),
                "published": self._date(),
            }
            for name, bad, good in rng.sample(_CVE_PACKAGES, rng.randint(1, 3))
        ]
        return {
            "scanned_at": self._ts(),
            "image": f"registry.example.com/platform/api:{self._semver()}",
            "findings": findings,
        }

    def network_text(self) -> Output:
        rng = self.rng
        return (
            f"Interface eth0 has address {self._ip()}/24, gateway {self._ip()}, hardware address {self._mac()}. "
            f"MTU {rng.choice((1500, 9000))}. Received {rng.randint(10**5, 10**9):,} bytes, sent "
            f"{rng.randint(10**5, 10**9):,} bytes since {self._ts()}."
        )

    def invoice_summary(self) -> Output:
        rng = self.rng
        lines = [
            f"Invoice INV-{rng.randint(2025, 2026)}-{rng.randint(1000, 9999)} dated {self._date()}"
        ]
        subtotal = 0.0
        for name, _, _ in rng.sample(_PRODUCTS, rng.randint(1, 4)):
            price = rng.randint(5, 400) + rng.choice((0.0, 0.49, 0.95, 0.99))
            qty = rng.randint(1, 5)
            subtotal += price * qty
            lines.append(f"  {qty} x {name} at ${price:,.2f}")
        lines.append(
            f"Subtotal ${subtotal:,.2f}; shipping to ZIP {rng.choice(_CITIES)[1]} ${rng.randint(0, 40)}.00"
        )
        lines.append(f"Order #{self._order_number()}, paid on {self._date()}.")
        return "\n".join(lines)

    def _makers(self) -> list[tuple[str, Callable[[], Output]]]:
        return [
            ("weather report", self.weather),
            ("product description", self.product),
            ("meeting notes", self.meeting_notes),
            ("error message", self.error_message),
            ("python traceback", self.python_traceback),
            ("java stack trace", self.java_trace),
            ("node stack trace", self.node_trace),
            ("changelog entry", self.changelog),
            ("orders API response", self.orders_api),
            ("git log", self.git_log),
            ("commit API response", self.commit_api),
            ("docker image inspect", self.docker_inspect),
            ("pip freeze", self.pip_freeze),
            ("package.json", self.package_json),
            ("npm lockfile excerpt", self.npm_lock),
            ("CSV measurements", self.csv_measurements),
            ("chat messages with numeric ids", self.chat_messages),
            ("analytics events with numeric ids", self.event_ids),
            ("shipment tracking", self.tracking),
            ("shipping notice", self.tracking_text),
            ("book catalog with ISBNs", self.book_catalog),
            ("network inventory", self.network_inventory),
            ("video search results", self.video_search),
            ("S3 object listing", self.s3_listing),
            ("HTTP access log", self.access_log),
            ("web search results", self.search_results),
            ("directory listing", self.directory_listing),
            ("file contents API response", self.file_contents_api),
            ("base64 message payloads", self.base64_payloads),
            ("checksums file", self.checksums),
            ("kubectl get pods", self.kubectl_pods),
            ("SQL query result", self.sql_result),
            ("CI build log", self.ci_log),
            ("exchange rates", self.exchange_rates),
            ("calendar events", self.calendar),
            ("dictionary entry", self.dictionary),
            ("support article", self.support_article),
            ("release notes", self.release_notes),
            ("host metrics", self.metrics),
            ("recipe", self.recipe),
            ("geocoding result", self.geocode),
            ("vulnerability report", self.vulnerabilities),
            ("network interface summary", self.network_text),
            ("invoice summary", self.invoice_summary),
        ]

    def documents(self, n: int) -> list[tuple[str, Output]]:
        """`n` (kind, output) documents, the kinds taken in shuffled rounds; a document
        that `ordinary_problems` finds anything in is made again."""
        makers = self._makers()
        order: list[tuple[str, Callable[[], Output]]] = []
        while len(order) < n:
            batch = list(makers)
            self.rng.shuffle(batch)
            order.extend(batch)
        documents = []
        for kind, make in order[:n]:
            for _ in range(200):
                output = make()
                if not ordinary_problems(output):
                    break
            else:
                raise RuntimeError(f"no clean {kind} document in 200 tries")
            documents.append((kind, output))
        return documents


if __name__ == "__main__":
    write_corpora()
