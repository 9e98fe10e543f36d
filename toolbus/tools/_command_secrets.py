"""The secrets of one command-tool call, and output cut without leaving part of one.

A command may print its own secret arguments. The executor scrubs masked values
from everything it publishes, but only where they appear whole: toolbus's own
cuts (stdout and stderr at `max_output_bytes`, the end of stderr quoted in an
error text) would otherwise leave a secret's beginning or end in clear. So the
command tool scrubs first and cuts after, with the values it knows to be secret:
its parameters typed or marked secret (`SecretStr`/`SecretBytes`, a secret
path of its schema, an injected parameter), the argv elements filled in from
them, its environment's variables named as secrets are (the application's
credentials), and what the executor's masker hid for the call.

Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr

from ..masking import DEFAULT_SECRET_KEYS, MASK, MIN_SCRUB_LENGTH, SecretPath, mask_paths

__all__ = ["ENV_SECRET_LENGTH", "Redactor", "env_secrets", "field_paths", "reveal", "secret_values"]

# A field's attribute (`.name`) or index (`[key]`) after its parameter's name.
_FIELD_PART = re.compile(r"\.([^.\[]*)|\[([^\]]*)\]")
# Places where a secret's beginning might start that are checked one by one,
# before the linear-time search takes over.
_CANDIDATES = 16


def reveal(value: Any) -> Any:
    """A secret-typed value as the command needs it; anything else as it is."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, SecretBytes):
        return value.get_secret_value().decode(errors="surrogateescape")
    return value


def field_paths(fields: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    """Each format field (`creds.password`, `keys[0]`) as the path it reads:
    `("creds", "password")`, `("keys", "0")`."""
    paths = []
    for field in fields:
        cut = min((i for i in (field.find("."), field.find("[")) if i >= 0), default=len(field))
        parts = [field[:cut]]
        parts.extend(m.group(1) if m.group(1) is not None else m.group(2)
                     for m in _FIELD_PART.finditer(field, cut))  # fmt: skip
        paths.append(tuple(parts))
    return tuple(paths)


def secret_values(
    values: Mapping[str, Any],
    paths: Sequence[SecretPath],
    templates: Sequence[tuple[tuple[str, ...], ...]],
    args: Sequence[str],
) -> list[str]:
    """The secret values of a call: the leaves at `paths` of the parameter
    `values`, every `SecretStr`/`SecretBytes` in them (nested ones too), and
    each filled-in argument in `args` whose template (its field paths, in
    `templates`) reads a secret or something holding one."""
    found: list[str] = []
    typed: list[tuple[str, ...]] = []
    plain = {k: _plain(v, (k,), found, typed) for k, v in values.items()}
    found.extend(mask_paths(None, plain, paths)[1])
    secret_paths = [*paths, *typed]
    for arg, fields in zip(args, templates, strict=True):
        if any(_overlaps(f, s) for f in fields for s in secret_paths):
            found.append(arg)
    return found


# Shorter values are not taken for credentials (`false`, `1`, `utf-8`).
ENV_SECRET_LENGTH = 8


def env_secrets(env: Mapping[str, str], named: Iterable[str]) -> list[str]:
    """The values of the variables of a command's environment, among those
    `named` for it (given in `env`, or by name in `inherit_env`: not the
    whole environment `inherit_env=True` passes on), whose names look secret
    as an argument's key would (`API_TOKEN`, `PGPASSWORD`,
    `AWS_SECRET_ACCESS_KEY`) and that are long enough to be credentials: the
    way an application hands a command its own."""
    is_secret = DEFAULT_SECRET_KEYS.is_secret
    return [
        value
        for name in named
        if len(value := env.get(name, "")) >= ENV_SECRET_LENGTH and is_secret(name)
    ]


def _plain(
    value: Any, path: tuple[str, ...], found: list[str], typed: list[tuple[str, ...]]
) -> Any:
    """`value` as plain data with its secrets revealed (each noted in `found`,
    and its path in `typed`)."""
    if isinstance(value, SecretStr | SecretBytes):
        text = reveal(value)
        found.append(text)
        typed.append(path)
        return text
    if isinstance(value, BaseModel):
        return {n: _plain(getattr(value, n), (*path, n), found, typed)
                for n in type(value).model_fields}  # fmt: skip
    if isinstance(value, Mapping):
        return {k: _plain(v, (*path, str(k)), found, typed) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, (*path, str(i)), found, typed) for i, v in enumerate(value)]
    return value


def _overlaps(field: tuple[str, ...], secret: SecretPath) -> bool:
    """Whether a field reading `field` reads a secret at `secret`, or a value
    that holds one (`None` in `secret`: any key or item)."""
    return all(s is None or s == f for f, s in zip(field, secret, strict=False))


class Redactor:
    """Replaces a call's secret values with the mask in a command's output,
    and cuts that output without leaving part of one in clear.

    `lookahead`: how many bytes past a cut must be kept to tell whether a
    secret straddles it (the longest secret, encoded)."""

    __slots__ = ("_failures", "_pattern", "lookahead", "values")

    def __init__(self, values: Iterable[str] = ()) -> None:
        # As the executor's scrubber: shorter values are not credentials.
        uniq = sorted({v for v in values if len(v) >= MIN_SCRUB_LENGTH}, key=len, reverse=True)
        self.values: tuple[str, ...] = tuple(uniq)
        # Longest first so that a secret that contains another is replaced whole.
        self._pattern = re.compile("|".join(map(re.escape, uniq))) if uniq else None
        self.lookahead = max((len(v.encode(errors="surrogateescape")) for v in uniq), default=0)
        self._failures: dict[str, list[int]] = {}

    def __bool__(self) -> bool:
        return self._pattern is not None

    def scrub(self, text: str) -> str:
        """`text` with every secret value replaced by the mask."""
        return text if self._pattern is None else self._pattern.sub(MASK, text)

    def head(self, text: str, n: int) -> str:
        """The first `n` characters of `text`, scrubbed as the whole of `text`
        shows them: a secret that starts before the cut and ends after it is
        masked (dropped, if the mask would not fit), and so is a beginning of
        a secret (4 characters or more) left at the end. Never longer than
        `text[:n]`, in characters or bytes."""
        if self._pattern is None:
            return text[:n]
        parts, pos, end = [], 0, ""
        for m in self._pattern.finditer(text):
            start, stop = m.span()
            if start >= n:
                break
            parts.append(text[pos:start])
            pos = stop
            if stop > n:  # straddles the cut: masked, if the mask fits
                end = MASK if n - start >= len(MASK) else ""
                break
            parts.append(MASK)
        if pos < n:
            parts.append(text[pos:n])
        kept = "".join(parts)
        k = max((_overlap(kept, v, partial(self._failure, v)) for v in self.values), default=0)
        if k >= MIN_SCRUB_LENGTH:
            kept, end = kept[: len(kept) - k], MASK
        return kept + end

    def tail(self, text: str, n: int) -> str:
        """The last `n` characters of (scrubbed) `text`, without an end of a
        secret (4 characters or more) at their start, where the cut fell."""
        if len(text) <= n:
            return text
        kept = text[len(text) - n :]
        if self._pattern is None:
            return kept
        # An end of a secret at the start: a beginning of the reversed secret
        # at the end of the reversed text.
        back = kept[::-1]
        ends = (v[::-1] for v in self.values)
        k = max((_overlap(back, v, partial(self._failure, v)) for v in ends), default=0)
        return MASK + kept[k:] if k >= MIN_SCRUB_LENGTH else kept

    def _failure(self, value: str) -> list[int]:
        table = self._failures.get(value)
        if table is None:
            table = self._failures[value] = _failure(value)
        return table


def _failure(s: str) -> list[int]:
    """KMP's failure function: for each prefix of `s`, the length of its
    longest proper prefix that is also its suffix."""
    table = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = table[k - 1]
        if s[i] == s[k]:
            k += 1
        table[i] = k
    return table


def _overlap(text: str, s: str, table: Callable[[], list[int]]) -> int:
    """The length of the longest beginning of `s` (4 characters or more) that
    `text` ends with, else 0; in time linear in `len(s)` whatever `s` is (a
    model may choose it)."""
    if len(s) < MIN_SCRUB_LENGTH:
        return 0
    window = text[-len(s) :]
    start = window.find(s[:MIN_SCRUB_LENGTH])
    # The usual cases, at C speed: nowhere, or a few candidates to check.
    for _ in range(_CANDIDATES):
        if start < 0:
            return 0
        if s.startswith(window[start:]):
            return len(window) - start
        start = window.find(s[:MIN_SCRUB_LENGTH], start + 1)
    if start < 0:
        return 0
    fail, k = table(), 0  # many candidates: KMP
    for ch in window:
        if k == len(s):
            k = fail[k - 1]
        while k and s[k] != ch:
            k = fail[k - 1]
        if s[k] == ch:
            k += 1
    return k if k >= MIN_SCRUB_LENGTH else 0
