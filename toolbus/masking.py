"""Masking of arguments and scrubbing of everything toolbus publishes.

Masking replaces the values under secret-looking keys, at any depth, and the
values at a tool's secret-typed paths (`mask_paths`). Every value masking hides
is remembered by a `Scrubber`, which removes it from free text (error messages,
log records, outputs) so that a secret that leaks through an exception message
never reaches an event, a log or the model.

Pure functions, no threads: unit-tested on their own.

One piece: masking and scrubbing are two halves of one promise (what masking
hides, the scrubber removes from text), and the scrubber is made of exactly
the values the maskers collect, so they change together.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import json
import re
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._cleaned_result import cleaned_result

if TYPE_CHECKING:
    from .scanning import ContentScanner

__all__ = [
    "DEFAULT_SECRET_KEYS",
    "MASK",
    "SECRET_KEY_SUFFIXES",
    "SECRET_KEY_WORDS",
    "Scrubber",
    "SecretKeys",
    "SecretPath",
    "cleaned_result",
    "hidden_values",
    "is_secret_key",
    "mask_arguments",
    "mask_paths",
    "published_arguments",
    "scrub_published",
]

MASK = "***"

SECRET_KEY_WORDS: tuple[str, ...] = (
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "apikey",
    "accesskey",
    "authorization",
    "bearer",
    "cookie",
    "credential",
    "privatekey",
    "sessionid",
    "databaseurl",
    "connectionstring",
)
"""Words masked wherever they occur in a key (compared without case or separators)."""

SECRET_KEY_SUFFIXES: tuple[str, ...] = ("auth", "pwd", "jwt", "dsn", "key")
"""Short words masked only as a whole key or its last words: `api_key`, `apiKey`,
`x-api-key`, `AUTH`, `user_pwd`, but not `author`, `oauth_scope` or `keyboard`."""

# A word is short, and matched only at the end of a key, below this length:
# "key" or "auth" inside a longer word ("monkey", "author") means nothing.
_SUBSTRING_MIN = 5

# camelCase and ACRONYMWords to snake_case, then split on separators.
_camel = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_separators = re.compile(r"[^a-z0-9]+")

# Shorter values are masked in arguments but not scrubbed from free text: erasing
# every "id" or "1" from an error message would make it unreadable, and a one-
# to three-character value is not a credential.
MIN_SCRUB_LENGTH = 4

# Concrete types first: isinstance against an ABC alone takes a slow path.
_MAPPINGS = (dict, Mapping)
_SEQUENCES = (list, tuple)
_SCALARS = (str, int, float, type(None))  # (bool is an int)


def _words(key: str) -> list[str]:
    """`key` as lower-case words: "X-Api-Key", "apiKey" and "API_KEY" give [.., "api", "key"]."""
    words = [w for w in _separators.split(_camel.sub("_", key).lower()) if w]
    # A numbered key ("api_key_2", "token1") is the same kind of key.
    while words and words[-1].isdigit():
        words.pop()
    if words:
        words[-1] = words[-1].rstrip("0123456789") or words[-1]
    return words


class SecretKeys:
    """Which argument names hold secrets: the defaults plus `extra` words.

    A word of five or more characters matches anywhere in a key, compared
    without case or separators (`token` matches `refresh-token` and
    `tokenizer`); a shorter word matches only the key's last words (`pin`
    matches `card_pin` and `PIN`, not `spinner`). `is_secret(key)` is cached:
    it runs for every key of every call's arguments.
    """

    __slots__ = ("extra", "is_secret")

    is_secret: Callable[[object], bool]
    """True if a value under this key must never be published (never for a
    key that is not a string)."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        if isinstance(extra, str | bytes) or not isinstance(extra, Iterable):
            raise TypeError(f"secret_keys must be a list of names, got {type(extra).__name__}")
        names = tuple(extra)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"secret_keys must hold strings, got {type(name).__name__}")
            if not _words(name):
                raise ValueError(f"secret_keys: {name!r} has no letters or digits to match")
        self.extra = names
        anywhere: list[str] = list(SECRET_KEY_WORDS)
        at_end: list[tuple[str, ...]] = [(w,) for w in SECRET_KEY_SUFFIXES]
        for name in names:
            words = tuple(_words(name))
            if len("".join(words)) >= _SUBSTRING_MIN:
                anywhere.append("".join(words))
            else:
                at_end.append(words)
        # The cached function itself, not a method around it: one call less per
        # key of every call's arguments.
        self.is_secret = functools.lru_cache(maxsize=4096)(
            functools.partial(_matches, tuple(anywhere), tuple(at_end))
        )

    def __repr__(self) -> str:
        return f"SecretKeys({list(self.extra)!r})"


def _matches(anywhere: tuple[str, ...], at_end: tuple[tuple[str, ...], ...], key: object) -> bool:
    if not isinstance(key, str):
        return False
    words = _words(key)
    compact = "".join(words)
    if any(word in compact for word in anywhere):
        return True
    return any(tuple(words[-len(end) :]) == end for end in at_end if len(words) >= len(end))


DEFAULT_SECRET_KEYS = SecretKeys()
"""The default names alone: what `is_secret_key` and `mask_arguments` use by default."""


def is_secret_key(key: object) -> bool:
    """True if a value under this key must never be published (default names)."""
    return isinstance(key, str) and DEFAULT_SECRET_KEYS.is_secret(key)


def mask_arguments(arguments: Any, keys: SecretKeys | None = None) -> tuple[Any, list[str]]:
    """Return `(masked, hidden values)` for JSON-like arguments.

    `masked` is a copy with the values under secret keys (`keys`, by default
    the default names) hidden, or `arguments` itself when there is nothing to
    hide. The hidden values are the text forms of every leaf under a secret key.
    """
    is_secret = (keys or DEFAULT_SECRET_KEYS).is_secret
    if not _has_secret(arguments, is_secret):
        return arguments, []
    hidden: list[str] = []
    return _mask(arguments, hidden, is_secret), hidden


def _has_secret(value: Any, is_secret: Callable[[object], bool]) -> bool:
    # Loops, not any(genexpr), and no call for a plain value (a JSON scalar, or
    # anything else that is no container): this runs for every call's arguments,
    # and `isinstance(v, Mapping)` alone would run Python code for each value.
    if isinstance(value, _MAPPINGS):
        for k, v in value.items():
            if is_secret(k) and v is not None:
                return True
            if not isinstance(v, _SCALARS) and _has_secret(v, is_secret):
                return True
        return False
    if isinstance(value, _SEQUENCES):
        for v in value:
            if not isinstance(v, _SCALARS) and _has_secret(v, is_secret):
                return True
    return False


# For the call path, which asks first whether a call's arguments hold a secret at
# all (they seldom do) without `mask_arguments`'s frame: `has_secret(args, is_secret)`.
has_secret = _has_secret


def _mask(value: Any, hidden: list[str], is_secret: Callable[[object], bool]) -> Any:
    if isinstance(value, _MAPPINGS):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if is_secret(k) and v is not None:
                _collect(v, hidden)
                out[k] = MASK
            else:
                out[k] = _mask(v, hidden, is_secret)
        return out
    if isinstance(value, _SEQUENCES):
        return [_mask(v, hidden, is_secret) for v in value]
    return value


def _collect(value: Any, hidden: list[str]) -> None:
    if isinstance(value, _MAPPINGS):
        for v in value.values():
            _collect(v, hidden)
    elif isinstance(value, _SEQUENCES):
        for v in value:
            _collect(v, hidden)
    elif value is not None and not isinstance(value, bool):
        if not isinstance(value, str | int | float):
            # An object (an injected value need not be JSON): its fields too,
            # or a plain object's text attributes (a client's token).
            fields = _fields(value)
            if fields is not None:
                _collect(fields, hidden)
            else:
                hidden.extend(_attributes(value))
        hidden.append(str(value))


def _attributes(value: Any) -> list[str]:
    """A plain object's own text attributes (`__dict__`, `__slots__`) and those
    of a small mapping among them (headers): where a client keeps its
    credentials. Not numbers (a port would be scrubbed from every text), nor a cache."""
    if isinstance(value, type | types.ModuleType):
        return []  # a namespace, not an object's data
    try:
        found = list(getattr(value, "__dict__", {}).values())
        for cls in type(value).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            for name in [slots] if isinstance(slots, str) else slots:
                if not name.startswith("__") and hasattr(value, name):
                    found.append(getattr(value, name))
        texts = [v for v in found if isinstance(v, str)]
        for v in found:
            if isinstance(v, _MAPPINGS) and len(v) <= 32:
                texts.extend(x for x in v.values() if isinstance(x, str))
    except Exception:  # an object that will not say: its text is still hidden
        return []
    return texts[:64]


def _fields(value: Any) -> Any:
    """A pydantic model's or a dataclass's fields as plain data, else None."""
    dump = getattr(value, "model_dump", None)
    try:
        if callable(dump):
            return dump(mode="json")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
    except Exception:  # an object that cannot say: its text is still hidden
        return None
    return None


SecretPath = tuple[str | None, ...]
"""Where a secret sits in a call's arguments: object keys from the top; `None`
stands for every item of an array (or every value of an object)."""


def mask_paths(masked: Any, raw: Any, paths: Sequence[SecretPath]) -> tuple[Any, list[str]]:
    """Mask the values at `paths` in already-masked arguments; return
    `(masked, the raw values hidden)`.

    `raw` are the arguments as the tool gets them and decide what is there;
    `masked` is whatever a masker made of them (it may show them unmasked, or
    be `None`). Neither is changed: containers on a masked path are copied.
    The hidden values (text of every leaf under a path, in `raw`) are returned
    even where `masked` does not show that place, so a scrubber can remove
    them from free text.
    """
    if not paths:
        return masked, []
    hidden: list[str] = []
    for path in paths:
        masked = _mask_path(masked, raw, path, hidden)
    return masked, hidden


_ABSENT: Any = object()


def _mask_path(masked: Any, raw: Any, path: SecretPath, hidden: list[str]) -> Any:
    if not path:
        if raw is None:
            return masked
        _collect(raw, hidden)
        return MASK if masked is not _ABSENT else masked
    head, rest = path[0], path[1:]
    if isinstance(raw, _MAPPINGS):
        keys = list(raw) if head is None else [head] if head in raw else []
        if not keys:
            return masked
        shown = masked if isinstance(masked, _MAPPINGS) else None
        out = masked
        for k in keys:
            before = shown[k] if shown is not None and k in shown else _ABSENT
            after = _mask_path(before, raw[k], rest, hidden)
            if after is not before:
                if out is masked:
                    out = dict(masked)
                out[k] = after
        return out
    if head is None and isinstance(raw, _SEQUENCES):
        same = isinstance(masked, _SEQUENCES) and len(masked) == len(raw)
        items = list(masked) if same else None
        changed = False
        for i, item in enumerate(raw):
            before = items[i] if items is not None else _ABSENT
            after = _mask_path(before, item, rest, hidden)
            if items is not None and after is not before:
                items[i] = after
                changed = True
        return items if changed else masked
    return masked


def hidden_values(raw: Any, masked: Any) -> list[str]:
    """The leaves of `raw` that `masked` does not show as they are.

    This is how a user-supplied masker, which only returns a masked copy, still
    tells the scrubber what it hid.
    """
    hidden: list[str] = []
    _diff(raw, masked, hidden)
    return hidden


def _diff(raw: Any, masked: Any, hidden: list[str]) -> None:
    if isinstance(raw, _MAPPINGS):
        if not isinstance(masked, Mapping):
            _collect(raw, hidden)
            return
        for k, v in raw.items():
            if k in masked:
                _diff(v, masked[k], hidden)
            else:
                _collect(v, hidden)
    elif isinstance(raw, _SEQUENCES):
        if not isinstance(masked, _SEQUENCES) or len(masked) != len(raw):
            _collect(raw, hidden)
            return
        for r, m in zip(raw, masked, strict=True):
            _diff(r, m, hidden)
    elif raw != masked and raw is not None and not isinstance(raw, bool):
        hidden.append(str(raw))


def published_arguments(raw: Any, masked: Any, forced: Sequence[str]) -> tuple[Any, Scrubber]:
    """What may be published of arguments `raw` that a masker made `masked` of,
    and the scrubber of everything hidden; `forced` are the values that must
    never be published whatever the masker did (typed secrets, injected
    values: `mask_paths`'s hidden values, already masked at their paths when
    `masked` is a mapping).

    A masker may return anything. A mapping (or list) keeps its shape; any
    other value (a text, an object) is published as its text. Whatever the
    shape, every hidden value is scrubbed from what is published, in the forms
    a text is likely to show it in (as it is, and escaped as JSON or a Python
    repr would). Values the masker shows verbatim in a text are not counted as
    hidden by it (a text cannot be compared with the arguments key by key).
    When `masked` is not a mapping and a forced value is too short to scrub
    from text (1 to 3 characters), nothing is published (`None`).
    """
    if isinstance(masked, bytes | bytearray):
        masked = bytes(masked).decode("utf-8", "surrogateescape")
    elif not isinstance(masked, _JSON_LIKE):
        fields = _fields(masked)  # a pydantic model or a dataclass: its data
        masked = fields if fields is not None else _text_of(masked)
    hidden = hidden_values(raw, masked)
    text_only = not isinstance(masked, _MAPPINGS) and masked is not None
    if text_only and hidden:
        shown = masked if isinstance(masked, str) else _text_of(masked)
        hidden = [v for v in hidden if v not in shown]
    values = dict.fromkeys((*hidden, *forced))
    scrubber = Scrubber([*values, *_escaped(values)])
    if text_only and any(0 < len(v) < MIN_SCRUB_LENGTH for v in forced):
        return None, scrubber
    return scrub_published(scrubber, masked), scrubber


_JSON_LIKE = (str, int, float, bool, type(None), dict, list, tuple, Mapping)

# A character JSON or a Python repr writes otherwise inside a string.
_ESCAPED = re.compile(r"[\\\"'\x00-\x1f\x7f-\U0010ffff]")


def _text_of(value: Any) -> str:
    try:
        return value if isinstance(value, str) else repr(value)
    except Exception:  # an object that cannot say what it is
        return MASK


def _escaped(values: Iterable[str]) -> list[str]:
    """`values` as JSON and Python reprs write them inside a text, where that
    differs; and as the repr of their bytes does (a process tool's `bytes`
    come to the agent as that text)."""
    out: list[str] = []
    for v in values:
        if _ESCAPED.search(v) is None:
            continue
        forms = [json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1], repr(v)[1:-1]]
        try:
            forms.append(repr(v.encode("utf-8", "surrogateescape"))[2:-1])
        except UnicodeEncodeError:  # a surrogate no byte stands for
            pass
        for form in forms:
            if form != v and form not in out:
                out.append(form)
    return out


def scrub_published(scrubber: Scrubber, value: Any) -> Any:
    """`value` fit to publish: secrets scrubbed from every string of a JSON-like
    value (tuples become lists), and an object whose text shows a secret
    replaced by that text, scrubbed. `value` itself where nothing changes."""
    pattern = scrubber._pattern
    if pattern is not None:
        value = _scrub_any(pattern, scrubber, value)
    return value if scrubber.scanner is None else _scanned(scrubber.scanner.value, value)


def _scrub_any(pattern: re.Pattern[str], scrubber: Scrubber, value: Any) -> Any:
    if isinstance(value, str):
        return pattern.sub(MASK, value) if pattern.search(value) else value
    if isinstance(value, _MAPPINGS):
        out: dict[Any, Any] | None = None
        for i, (k, v) in enumerate(value.items()):
            nk = _scrub_any(pattern, scrubber, k) if isinstance(k, str) else k
            nv = _scrub_any(pattern, scrubber, v)
            if out is None and (nk is not k or nv is not v or not isinstance(value, dict)):
                out = dict(list(value.items())[:i])
            if out is not None:
                out[nk] = nv
        return value if out is None else out
    if isinstance(value, _SEQUENCES):
        items = [_scrub_any(pattern, scrubber, v) for v in value]
        if isinstance(value, list) and all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return MASK if _number_text(value) in scrubber._values else value
    return _scrubbed_object(pattern, value)


def _number_text(value: int | float) -> str:
    """A number's text as a secret would hold it; an integer of more digits
    than `str()` writes (`sys.get_int_max_str_digits`) too."""
    try:
        return str(value)
    except ValueError:
        return format(decimal.Decimal(value), "f")


class Scrubber:
    """Removes a fixed set of secret values from text and JSON-like values,
    then, with a content `scanner` (`toolbus.scanning`), what it finds.

    An empty scrubber without a scanner is falsy and costs nothing to apply.
    """

    __slots__ = ("_pattern", "_values", "scanner")

    def __init__(self, values: Iterable[str] = (), scanner: ContentScanner | None = None) -> None:
        uniq = sorted({v for v in values if len(v) >= MIN_SCRUB_LENGTH}, key=len, reverse=True)
        self._values: tuple[str, ...] = tuple(uniq)
        # Longest first so a secret that contains another is replaced whole.
        self._pattern = re.compile("|".join(map(re.escape, uniq))) if uniq else None
        self.scanner = scanner

    def __bool__(self) -> bool:
        return self._pattern is not None or self.scanner is not None

    @property
    def values(self) -> tuple[str, ...]:
        return self._values

    def merged(self, other: Scrubber) -> Scrubber:
        """Both scrubbers' values, and the scanner of either."""
        if not other and other.scanner is None:
            return self
        scanner = self.scanner or other.scanner
        if not self._values and other.scanner is scanner:
            return other
        return Scrubber(self._values + other._values, scanner)

    def known(self) -> Scrubber:
        """This scrubber without its scanner: the known values alone."""
        return self if self.scanner is None else Scrubber(self._values)

    def for_model(self) -> Scrubber:
        """What scrubs a result's text for the model: this scrubber, without
        a scanner that leaves the model's copy alone (`to_model=False`)."""
        scanner = self.scanner
        return self if scanner is None or scanner.to_model else Scrubber(self._values)

    def text(self, text: str) -> str:
        """`text` with every secret value replaced by the mask (and what the
        scanner finds, as its rules say)."""
        if self._pattern is not None:
            text = self._pattern.sub(MASK, text)
        return text if self.scanner is None else _scanned(self.scanner.text, text)

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets removed from every string."""
        if self._pattern is not None:
            try:
                value = self._value(value)
            except Exception:  # a structure too deep (or cyclic) to walk: none of it shows
                return UNSCANNABLE
        return value if self.scanner is None else _scanned(self.scanner.value, value)

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._pattern.sub(MASK, value) if self._pattern is not None else value
        if isinstance(value, _MAPPINGS):
            return {
                (self._value(k) if isinstance(k, str) else k): self._value(v)
                for k, v in value.items()
            }
        if isinstance(value, _SEQUENCES):
            return [self._value(v) for v in value]
        if isinstance(value, int | float) and not isinstance(value, bool):
            return MASK if _number_text(value) in self._values else value
        if value is None or isinstance(value, bool):
            return value
        return _scrubbed_object(self._pattern, value)


def _scrubbed_object(pattern: re.Pattern[str] | None, value: Any) -> Any:
    """An object (a set, bytes, a tool's own class): as it is unless its text
    (bytes: also as UTF-8, an undecodable byte as its lone surrogate, as a
    secret read with `surrogateescape` holds it) shows a secret; then that
    text, scrubbed."""
    if pattern is None:
        return value
    try:
        rep, text = repr(value), str(value)
        if isinstance(value, bytes | bytearray):
            text = bytes(value).decode("utf-8", "surrogateescape")
    except Exception:  # an object that cannot say what it is
        return MASK
    return pattern.sub(MASK, text) if pattern.search(rep) or pattern.search(text) else value


EMPTY_SCRUBBER = Scrubber()


# What stands for a value the content scanner failed on (a structure too deep
# for it, say): nothing of it is published.
UNSCANNABLE = "[REDACTED:unscannable]"


def _scanned(scan: Callable[[Any], Any], value: Any) -> Any:
    try:
        return scan(value)
    except Exception:
        return UNSCANNABLE
