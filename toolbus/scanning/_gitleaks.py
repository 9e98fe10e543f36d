"""gitleaks' rules, read from its configuration and translated from Go's
regular expressions to Python's.

The configuration is gitleaks' default one (MIT licence), vendored beside this
module with its licence (`rules/`). Go's engine (RE2) runs in linear time
whatever the pattern, Python's backtracks: the translation also bounds what
would cost Python the square of a line's length.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ._rules import Rule

__all__ = ["Loaded", "gitleaks_rules", "go_to_python"]

# gitleaks' rule ids whose kind is not the general "secret".
_GITLEAKS_KINDS = {"private-key": "private_key", "jwt": "jwt", "jwt-base64": "jwt"}
# Dropped: what our own rules do better here (gitleaks' generic rule matches any
# "key: <10+ word characters>", ids and hashes included, where ours asks for a
# secret word and a secret-like value).
_GITLEAKS_DROPPED = frozenset({"generic-api-key"})
# Replaced by toolbus's rule of the same id (`builtin_rules`): gitleaks' cost
# Python seconds a KB, its windows of any character around an unbounded run
# (found by review).
_GITLEAKS_REPLACED = frozenset({"kubernetes-secret-yaml"})

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
            i = _class_end(pattern, i)
            continue
        if c == "(":
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
        if rid in _GITLEAKS_REPLACED:
            skipped[rid] = "replaced by toolbus's rule of the same id"
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
_ANY_RUN = re.compile(r"\.(?:\*|\+|\{(\d+),\})(\??)")
_LONGEST_RUN = 256


def _bounded(pattern: str) -> str:
    """`pattern` with every unbounded run of any character (`.*`, `.+`,
    `.{n,}`, outside character classes) bounded to `_LONGEST_RUN`."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
        elif c == "[":
            end = _class_end(pattern, i)
            out.append(pattern[i:end])
            i = end
        elif c == "." and (m := _ANY_RUN.match(pattern, i)):
            least = 1 if m.group(0)[1] == "+" else int(m.group(1) or 0)
            out.append(f"[^\\n]{{{least},{max(least, _LONGEST_RUN)}}}{m.group(2)}")
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _class_end(pattern: str, i: int) -> int:
    """The index just past the character class opening at `i`."""
    n = len(pattern)
    i += 1
    if i < n and pattern[i] == "^":
        i += 1
    if i < n and pattern[i] == "]":
        i += 1
    while i < n and pattern[i] != "]":
        if pattern[i] == "[" and pattern.startswith("[:", i):
            close = pattern.find(":]", i + 2)
            i = close + 2 if close != -1 else i + 1
            continue
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


# gitleaks' curl rules join up to five lines with `[\r\n]{1,2}` between runs of
# any character but "\n", which match "\r" too: on a line of "\r"s (a progress
# bar's output) Python tried every way to share them out, seconds for forty of
# them (found by review). The runs take a lone "\r" anyway, so a line break is
# one or two "\n"s, and each character has one place to go.
_LINE_BREAK = r"[\r\n]{1,2}"


def _without_context(pattern: str) -> str:
    # (A break is followed by no newline: "\n\n" is one break, never two.)
    pattern = _bounded(pattern).replace(_LINE_BREAK, r"\n{1,2}(?!\n)")
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
