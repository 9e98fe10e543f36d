"""Connection targets and error texts without their credentials.

A server's URL may carry a password (`https://user:pw@host/mcp`) or a token in
its query (`?token=...`), and a stdio command its key (`--api-key sk-...`).
The default connection name is made from the target, and error texts quote
it (and the transport's errors quote URLs): all of it reaches logs, events
and the model. So a URL's userinfo and query values, and an argument after
a secret-looking flag (`masking`'s key matcher) or looking like a key itself,
are shown as `***`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ..masking import is_secret_key

__all__ = ["redact_argv", "redact_text", "redact_url"]

HIDDEN = "***"

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")
# Common API key and token shapes (OpenAI, GitHub, Slack, AWS, JWTs, Bearer).
_SECRET_VALUE = re.compile(
    r"^(?:sk-|sk_|pk_|rk_|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abprs]-|AKIA|ASIA|eyJ)"
    r"[A-Za-z0-9_\-.=+/]{6,}$|^Bearer\s+\S+$",
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """`url` with its userinfo and each query value (and a fragment) as `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return HIDDEN
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{HIDDEN}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{k}={HIDDEN}" for k, _ in pairs) if pairs else HIDDEN
    fragment = HIDDEN if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def redact_text(text: str) -> str:
    """`text` with every URL in it redacted (`redact_url`)."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def redact_argv(args: Iterable[str]) -> list[str]:
    """A command line with the values of secret-looking flags (`--api-key X`,
    `--token=X`, `API_KEY=X`), key-like arguments and URLs' credentials hidden."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            hide_next = False
            out.append(HIDDEN)
            continue
        key, eq, _ = arg.partition("=")
        if arg.startswith("-") and is_secret_key(key.lstrip("-")):
            if eq:
                out.append(f"{key}={HIDDEN}")
            else:
                out.append(arg)
                hide_next = True  # its value is the next argument
            continue
        if eq and not arg.startswith("-") and "://" not in key and is_secret_key(key):
            out.append(f"{key}={HIDDEN}")
        elif _SECRET_VALUE.match(arg):
            out.append(HIDDEN)
        else:
            out.append(redact_text(arg))
    return out
