"""Which rules may match a text: hyperscan when it is installed, else all.

Every rule is compiled once into one hyperscan database in prefilter mode
(`HS_FLAG_PREFILTER`): hyperscan then reports, in one pass over the text at a
few microseconds per KB, a superset of the rules that match, and Python's `re`
finds the exact matches of those few. Without hyperscan (the `scan` extra),
every rule is a candidate, and the rules' keywords do the filtering.

Hyperscan's `\\w`, `\\d` and `\\s` are ASCII-only where Python's are not. So
hyperscan sees every other character as an ASCII one that its patterns treat
alike (a letter as a letter, a digit as a digit, a space as a space): what it
reports stays a superset of what Python finds, and what is found never
depends on whether hyperscan is installed.

The texts of one value (an output's strings and keys) are scanned together,
joined by newlines, a group of about a KB per scan (`located`): a pattern is
compiled multi-line, and `\\A`, `\\Z` and `\\z` stand as `^` and `$`, so each
text's own beginning and end still match. Most groups hold no candidate at
all, and cost one scan; where one does, the scan says where its first
candidate ends, and the group is scanned again from the text after it.
"""

from __future__ import annotations

import bisect
import codecs
import functools
import itertools
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ._rules import Rule

__all__ = ["Candidates", "Prefilter", "hyperscan_available", "make_prefilter"]

_hs: Any
try:  # the `scan` extra
    import hyperscan as _hs
except ImportError:  # pragma: no cover - exercised by the engine="re" tests
    _hs = None


def hyperscan_available() -> bool:
    return _hs is not None


class Prefilter:
    """The rules (by index) that may match a text: all of them (pure `re`).

    Candidates map each rule to where its first candidate in the text ends
    (0: not known): no match of it ends before, so Python's `re` may start
    as far before that as the rule's longest match (`Rule.width`)."""

    engine: Literal["hyperscan", "re"] = "re"

    def __init__(self, rules: Sequence[Rule]) -> None:
        # Returned for "any rule may match": the caller tells it by identity.
        self.every: Candidates = dict.fromkeys(range(len(rules)), 0)
        self._keywordless = [i for i, r in enumerate(rules) if not r.keywords]
        by_keyword: dict[str, list[int]] = {}
        for i, r in enumerate(rules):
            for k in r.keywords:
                by_keyword.setdefault(k, []).append(i)
        self._by_keyword = tuple(by_keyword.items())

    def candidates(self, text: str) -> Candidates:
        return self.every

    def located(self, texts: Sequence[str]) -> dict[int, Candidates]:
        """The rules that may match each of `texts` (by index), for those
        that any may match: here, the rules whose keywords are in any of
        them (each text is then checked for its own)."""
        chosen = self.with_keywords_in("\n".join(texts).lower())
        return dict.fromkeys(range(len(texts)), dict.fromkeys(sorted(chosen), 0))

    def with_keywords_in(self, low: str) -> set[int]:
        """The rules without keywords, and those with one in `low` (a text
        lower-cased), each keyword looked for once."""
        chosen = set(self._keywordless)
        for k, rules in self._by_keyword:
            if k in low:
                chosen.update(rules)
        return chosen


Candidates = Mapping[int, int]
"""Rule (by index) -> where its first candidate ends in the text (0: not known)."""

# Texts joined for one scan: about a KB (a scan costs about as much as a KB of
# text), down to `_SHORTEST` where candidates are dense.
_GROUP = 1024
_SHORTEST = 64


class _Hyperscan(Prefilter):
    engine: Literal["hyperscan", "re"] = "hyperscan"

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        assert _hs is not None
        # A rule hyperscan cannot compile (Python syntax it lacks, say) is
        # always a candidate: Python's re decides it on every text.
        everything = list(range(len(rules)))
        # A rule's candidate counts in a scan of joined texts only where one
        # of its keywords is (a git SHA is 40 hex digits, as a Sourcegraph
        # token may be, but not after "sgp_"): no scan again for it.
        self._keywords = [r.keywords for r in rules]
        # On a text that is not ASCII, a rule whose pattern holds a negated
        # class (`[^a-zA-Z0-9+/]`: an "é" is one, its stand-in "a" is not) or
        # a character that is not ASCII may match where hyperscan sees none.
        self._unicode = [i for i, r in enumerate(rules) if _unicode_sensitive(r.pattern)]
        # A rule that asks for one of the separators hyperscan sees as spaces.
        separators = [i for i, r in enumerate(rules) if _SEPARATOR_ESCAPE.search(r.pattern)]
        try:
            self._always: list[int] = separators
            self._db = _database(rules, [i for i in everything if i not in separators])
        except Exception:  # hyperscan.error: find which, one by one
            self._always = sorted(
                {*separators, *(i for i, r in enumerate(rules) if not _compiles(r))}
            )
            bad = set(self._always)
            self._db = _database(rules, [i for i in everything if i not in bad])
        # Scratch space is per database and not for two scans at once.
        self._local = threading.local()

    def candidates(self, text: str) -> Candidates:
        if self._db is None:  # no rule hyperscan could compile
            return self.every
        first = self._first_ends(_encoded(text))
        for i in self._always:
            first[i] = 0
        if not text.isascii():
            for i in self._unicode:
                first[i] = 0
        return first

    def located(self, texts: Sequence[str]) -> dict[int, Candidates]:
        n = len(texts)
        if self._db is None:
            return dict.fromkeys(range(n), self.every)
        always = dict.fromkeys(self._always, 0)
        out: dict[int, Candidates] = dict.fromkeys(range(n), always) if always else {}
        joined = "\n".join(texts)
        data = _encoded(joined)
        sizes = list(itertools.accumulate(map(len, texts), initial=0))

        def begin(i: int) -> int:  # where text i begins in `data` (one byte a character)
            return sizes[i] + i

        index = range(n + 1)
        # A text longer than a window is scanned alone: never again for a hit
        # in a short text beside it.
        long = [k for k, size in enumerate(map(len, texts)) if size > _GROUP]
        window = _GROUP
        i = 0
        while i < n:
            # A scan of whole texts, i to j: about `window` characters.
            at = begin(i)
            j = max(i + 1, bisect.bisect_left(index, at + window, i + 1, n, key=begin))
            if long and (k := bisect.bisect_left(long, i)) < len(long) and long[k] < j:
                j = max(i + 1, long[k])  # up to the long text, or it alone
            end = begin(j) - 1
            first = self._first_ends(data[at:end])
            if first and any(self._keywords[r] for r in first):
                low = joined[at:end].lower()
                first = {
                    r: e
                    for r, e in first.items()
                    if not self._keywords[r] or any(k in low for k in self._keywords[r])
                }
            if not first:
                window = min(_GROUP, window * 2)
                i = j
                continue
            # Where candidates are dense, a long window would be scanned again
            # for each: shorter windows then, longer again once they are clean.
            window = max(_SHORTEST, window // 4)
            # The text each rule's first candidate ends in (its last character,
            # or the newline after it, is that text's), and the earliest of them.
            where = {
                rule: bisect.bisect_right(index, at + max(e, 1) - 1, i, j, key=begin) - 1
                for rule, e in first.items()
            }
            nearest = min(where.values())
            # Where each candidate ends in that text.
            base = begin(nearest) - at
            out[nearest] = {
                **always,
                **{r: max(first[r] - base, 0) for r, w in where.items() if w == nearest},
            }
            # What was before it matched nothing; what is after it, scanned again.
            i = nearest + 1
        if self._unicode and not joined.isascii():
            for i, text in enumerate(texts):
                if not text.isascii():
                    out[i] = {**out.get(i, {}), **dict.fromkeys(self._unicode, 0)}
        return out

    def _first_ends(self, data: bytes) -> dict[int, int]:
        """For each rule with a candidate in `data`, where the first one ends."""
        first: dict[int, int] = {}
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _hs.Scratch(self._db)
        self._db.scan(data, match_event_handler=_collect, context=first, scratch=scratch)
        return first


def _encoded(text: str) -> bytes:
    """`text` as hyperscan sees it: one ASCII byte per character."""
    data = text.encode() if text.isascii() else text.encode("ascii", _STAND_IN)
    # Python's \s matches the four ASCII separators \x1c-\x1f; hyperscan's not.
    return data.translate(_SEPARATORS_AS_SPACE)


def _flags(rule: Rule) -> int:
    # A lowercase rule matches the text lower-cased: here, any case.
    flags: int = _hs.HS_FLAG_PREFILTER | _hs.HS_FLAG_SINGLEMATCH | _hs.HS_FLAG_MULTILINE
    return flags | (_hs.HS_FLAG_CASELESS if rule.lowercase else 0)


# `\A`, `\Z`, `\z` (not after another backslash): a text's own ends, which in
# texts joined by newlines multi-line `^` and `$` still find (and more).
_TEXT_ENDS = re.compile(r"(?<!\\)((?:\\\\)*)\\([AZz])")


# Python's `{,n}` (0 to n) and `{,}` (any number); hyperscan reads them as text.
_UP_TO = re.compile(r"(?<!\\)((?:\\\\)*)\{,(\d*)\}")
# A character that is not ASCII, written in the pattern or as an escape.
_NOT_ASCII_ESCAPE = re.compile(r"\\(?:x[89a-fA-F][0-9a-fA-F]|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{)")
_SEPARATOR_ESCAPE = re.compile(r"\\x1[c-fC-F]|[\x1c-\x1f]")


# A negated class, and an escape inside one.
_NEGATED_CLASS = re.compile(r"\[\^((?:\\.|[^\]])*)\]")
_ESCAPE = re.compile(r"\\.")


def _unicode_sensitive(pattern: str) -> bool:
    """Whether `pattern` may match a text that is not ASCII where hyperscan,
    seeing stand-ins, finds nothing: a negated class that lists letters or
    digits (an "é" is no `[a-zA-Z]`, its stand-in "a" is; `[^\\s"']` treats
    both alike), or a character that is not ASCII."""
    if not pattern.isascii() or _NOT_ASCII_ESCAPE.search(pattern):
        return True
    return any(
        # (A letter, a digit, or the space and "~" that other spaces and symbols
        # stand in as.)
        re.search(r"[A-Za-z0-9 ~]", _ESCAPE.sub("", body))
        for body in _NEGATED_CLASS.findall(pattern)
    )


def _joinable(pattern: str) -> bytes:
    """`pattern` as hyperscan compiles it (a superset of what Python finds)."""
    pattern = _without_gitleaks_ending(pattern)
    pattern = _UP_TO.sub(lambda m: f"{m[1]}{{0,{m[2]}}}", pattern)
    return _TEXT_ENDS.sub(lambda m: m[1] + ("^" if m[2] == "A" else "$"), pattern).encode()


# What gitleaks ends most of its patterns with: what may follow a secret (a
# quote, a space, `;`, an escaped newline or the end of a line).
_GITLEAKS_ENDING = r"""(?:[\x60'"\s;]|\\[nr]|$)"""


def _without_gitleaks_ending(pattern: str) -> str:
    """`pattern` without gitleaks' ending, where it is the last thing in it.

    The ending is the last item of the last branch: without it the pattern
    matches more, and a match of it ends no later, as a prefilter needs. With
    it, a counted run before it (`[0-9a-z_-]{27,40}`) makes an automaton that
    runs at every byte: it was three fifths of a scan of the default rules.
    """
    head = pattern.removesuffix(_GITLEAKS_ENDING)
    escaped = len(head) - len(head.rstrip("\\")) if head != pattern else 0
    return pattern if head == pattern or escaped % 2 else head


def _database(rules: Sequence[Rule], kept: Sequence[int]) -> Any:
    """The rules `kept`, compiled (None: none to compile)."""
    if not kept:
        return None
    db = _hs.Database()
    db.compile(
        expressions=[_joinable(rules[i].pattern) for i in kept],
        ids=list(kept),
        elements=len(kept),
        flags=[_flags(rules[i]) for i in kept],
    )
    return db


def _compiles(rule: Rule) -> bool:
    try:
        _database([rule], [0])
    except Exception:  # hyperscan.error
        return False
    return True


_WORD = re.compile(r"\w")
_SEPARATORS_AS_SPACE = bytes.maketrans(b"\x1c\x1d\x1e\x1f", b"    ")
# Letters Python's `(?i)` takes for an ASCII one though they do not lower-case to it.
_FOLDS = {"\u017f": "s", "\u0130": "i", "\u0131": "i", "\u212a": "k", "\u212b": "a"}
_STAND_IN = "toolbus-scan-stand-in"


@functools.lru_cache(maxsize=4096)
def _stand_in(char: str) -> str:
    """The ASCII character hyperscan sees for `char`: what it folds to in a
    case-insensitive match if that is ASCII (the Kelvin sign is a "k" to
    Python's `(?i)`), else a digit, a letter, a space or a symbol, as
    Python's classes see it."""
    folded = _FOLDS.get(char) or char.lower()
    if folded.isascii() and len(folded) == 1:
        return folded
    if char.isdecimal():
        return "0"
    if _WORD.match(char):
        return "a"
    return " " if char.isspace() else "~"


def _replace(error: UnicodeError) -> tuple[str, int]:
    assert isinstance(error, UnicodeEncodeError)
    part = error.object[error.start : error.end]
    return "".join(map(_stand_in, part)), error.end


codecs.register_error(_STAND_IN, _replace)


def _collect(rule: int, start: int, end: int, flags: int, first: Any) -> None:
    first[rule] = end  # once per rule and scan: SINGLEMATCH


# Compiling the default rules takes about a second: each set is compiled once
# per process, whatever number of scanners use it.
_cache: dict[tuple[tuple[str, bool, tuple[str, ...]], ...], Prefilter] = {}
_cache_lock = threading.Lock()


def make_prefilter(rules: Sequence[Rule], engine: str) -> Prefilter:
    """The prefilter for `rules`: "hyperscan", "re", or "auto" (hyperscan if
    installed). "hyperscan" when it is not installed is a `ValueError`."""
    if engine == "re" or (engine == "auto" and _hs is None):
        return Prefilter(rules)
    if _hs is None:
        raise ValueError(
            "ContentScanner: engine='hyperscan' needs the hyperscan package "
            "(pip install 'toolbus[scan]')"
        )
    # Keywords too: `located` filters a rule's candidates by them.
    key = tuple((r.pattern, r.lowercase, r.keywords) for r in rules)
    with _cache_lock:
        found = _cache.get(key)
        if found is None:
            found = _cache[key] = _Hyperscan(rules)
    return found
