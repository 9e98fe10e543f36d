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
"""

from __future__ import annotations

import codecs
import functools
import re
import threading
from collections.abc import Sequence
from typing import Any

from ._rules import Rule

__all__ = ["Prefilter", "hyperscan_available", "make_prefilter"]

_hs: Any
try:  # the `scan` extra
    import hyperscan as _hs
except ImportError:  # pragma: no cover - exercised by the engine="re" tests
    _hs = None


def hyperscan_available() -> bool:
    return _hs is not None


class Prefilter:
    """The rules (by index) that may match a text: all of them (pure `re`)."""

    engine = "re"

    def __init__(self, rules: Sequence[Rule]) -> None:
        # Returned for "any rule may match": the caller tells it by identity.
        self.every: Sequence[int] = tuple(range(len(rules)))

    def candidates(self, text: str) -> Sequence[int]:
        return self.every


class _Hyperscan(Prefilter):
    engine = "hyperscan"

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        assert _hs is not None
        # A rule hyperscan cannot compile (Python syntax it lacks, say) is
        # always a candidate: Python's re decides it on every text.
        everything = list(range(len(rules)))
        try:
            self._always: list[int] = []
            self._db = _database(rules, everything)
        except Exception:  # hyperscan.error: find which, one by one
            self._always = [i for i, r in enumerate(rules) if not _compiles(r)]
            bad = set(self._always)
            self._db = _database(rules, [i for i in everything if i not in bad])
        # Scratch space is per database and not for two scans at once.
        self._local = threading.local()

    def candidates(self, text: str) -> Sequence[int]:
        if self._db is None:  # no rule hyperscan could compile
            return self.every
        data = text.encode() if text.isascii() else text.encode("ascii", _STAND_IN)
        # Python's \s matches the four ASCII separators \x1c-\x1f; hyperscan's not.
        data = data.translate(_SEPARATORS_AS_SPACE)
        hits: list[int] = []
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _hs.Scratch(self._db)
        self._db.scan(data, match_event_handler=_collect, context=hits, scratch=scratch)
        hits.extend(self._always)
        # In rule order, as without hyperscan: of two rules that find the same
        # value, the one listed first names it.
        hits.sort()
        return hits


def _flags(rule: Rule) -> int:
    # A lowercase rule matches the text lower-cased: here, any case.
    flags: int = _hs.HS_FLAG_PREFILTER | _hs.HS_FLAG_SINGLEMATCH
    return flags | (_hs.HS_FLAG_CASELESS if rule.lowercase else 0)


def _database(rules: Sequence[Rule], kept: Sequence[int]) -> Any:
    """The rules `kept`, compiled (None: none to compile)."""
    if not kept:
        return None
    db = _hs.Database()
    db.compile(
        expressions=[rules[i].pattern.encode() for i in kept],
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


def _collect(rule: int, start: int, end: int, flags: int, hits: Any) -> None:
    hits.append(rule)


# Compiling the default rules takes about a second: each set is compiled once
# per process, whatever number of scanners use it.
_cache: dict[tuple[tuple[str, bool], ...], Prefilter] = {}
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
    key = tuple((r.pattern, r.lowercase) for r in rules)
    with _cache_lock:
        found = _cache.get(key)
        if found is None:
            found = _cache[key] = _Hyperscan(rules)
    return found
