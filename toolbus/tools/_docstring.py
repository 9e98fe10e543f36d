"""Parameter descriptions from a docstring: Google, NumPy and Sphinx styles.

`parse_docstring` finds the description part (the text before the first
section) and one description per documented parameter, as the OpenAI Agents
SDK and pydantic-ai (through griffe) read them, so a function tool's schema
tells the model what each parameter means:

    Google:  Args:                NumPy:  Parameters        Sphinx:  :param city: The city.
                 city (str): ...          ----------                 :param int days: How
                 days: How many ...       city : str                     many days ahead.
                     days ahead.              The city.
                                          days : int, optional
                                              How many days ahead.

Only what is needed for a schema is read: the names and their descriptions
(types come from the annotations). A docstring may mix styles; the first
description found for a name wins. Anything that does not parse is left out,
never an error.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Docstring", "parse_docstring"]

# Reads the first line of an entry: the names it documents and the start of its text.
_EntryParser = Callable[[str], "tuple[list[str], str] | None"]


@dataclass(frozen=True, slots=True)
class Docstring:
    """`description`: the text before the first section, paragraphs separated by
    a blank line. `params`: each documented parameter's description, lines of a
    paragraph joined with spaces, paragraphs with a blank line."""

    description: str = ""
    params: dict[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """The description's first paragraph, on one line."""
        return self.description.split("\n\n", 1)[0].replace("\n", " ").strip()


def parse_docstring(doc: str | None) -> Docstring:
    """The description and the parameter descriptions of `doc` (a raw
    `__doc__` or an already cleaned one, as `inspect.getdoc` returns)."""
    if not doc or not doc.strip():
        return Docstring()
    lines = inspect.cleandoc(doc).splitlines()
    params: dict[str, str] = {}
    starts = [len(lines)]
    for parser in (_google, _numpy, _sphinx):
        found, start = parser(lines)
        for name, text in found.items():
            params.setdefault(name, text)
        starts.append(start)
    description = _paragraphs(lines[: min(starts)])
    return Docstring(description=description, params=params)


# -- Google ---------------------------------------------------------------------------

_GOOGLE_PARAM_SECTIONS = frozenset(
    {
        "args",
        "arguments",
        "parameters",
        "params",
        "keyword args",
        "keyword arguments",
        "kwargs",
        "other args",
        "other arguments",
        "other parameters",
        "other params",
    }
)
_GOOGLE_OTHER_SECTIONS = frozenset(
    {
        "attributes",
        "example",
        "examples",
        "except",
        "exceptions",
        "methods",
        "note",
        "notes",
        "raise",
        "raises",
        "references",
        "return",
        "returns",
        "see also",
        "todo",
        "warning",
        "warnings",
        "warns",
        "yield",
        "yields",
    }
)
_GOOGLE_HEADER = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*:\s*$")
# `name (type, optional): text`; the type may hold one level of parentheses.
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\((?:[^()]|\([^()]*\))*\))?\s*:(?:\s+(.*))?$")


def _google_header(line: str) -> str | None:
    m = _GOOGLE_HEADER.match(line)
    if m is None:
        return None
    name = m.group(1).lower()
    return name if name in _GOOGLE_PARAM_SECTIONS or name in _GOOGLE_OTHER_SECTIONS else None


def _google(lines: list[str]) -> tuple[dict[str, str], int]:
    params: dict[str, str] = {}
    first = len(lines)
    i = 0
    while i < len(lines):
        section = _google_header(lines[i])
        if section is None:
            i += 1
            continue
        first = min(first, i)
        header_indent = _indent(lines[i])
        i += 1
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > header_indent):
            body.append(lines[i])
            i += 1
        if section in _GOOGLE_PARAM_SECTIONS:
            for name, text in _entries(body, _google_entry).items():
                params.setdefault(name, text)
    return params, first


def _google_entry(line: str) -> tuple[list[str], str] | None:
    m = _GOOGLE_ENTRY.match(line.strip())
    if m is None:
        return None
    return [m.group(1)], m.group(2) or ""


# -- NumPy ----------------------------------------------------------------------------

_NUMPY_PARAM_SECTIONS = frozenset({"parameters", "other parameters", "keyword arguments"})
_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
# `name : type`, `x, y : int`, `*args`, or a name alone.
_NUMPY_ENTRY = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?$")


def _numpy(lines: list[str]) -> tuple[dict[str, str], int]:
    headers = [
        i
        for i in range(len(lines) - 1)
        if lines[i].strip() and not _UNDERLINE.match(lines[i]) and _UNDERLINE.match(lines[i + 1])
    ]
    params: dict[str, str] = {}
    for n, i in enumerate(headers):
        if lines[i].strip().lower() not in _NUMPY_PARAM_SECTIONS:
            continue
        end = headers[n + 1] if n + 1 < len(headers) else len(lines)
        for name, text in _entries(lines[i + 2 : end], _numpy_entry).items():
            params.setdefault(name, text)
    return params, headers[0] if headers else len(lines)


def _numpy_entry(line: str) -> tuple[list[str], str] | None:
    m = _NUMPY_ENTRY.match(line.strip())
    if m is None:
        return None
    return [n.strip() for n in m.group(1).split(",")], ""


# -- Sphinx (reST field lists) ----------------------------------------------------------

_SPHINX_PARAM_FIELDS = frozenset({"param", "parameter", "arg", "argument", "key", "keyword"})
_SPHINX_FIELD = re.compile(r"^:(\w+)((?:\s+[^:]+?)?)\s*:(?:\s+(.*))?$")


def _sphinx(lines: list[str]) -> tuple[dict[str, str], int]:
    params: dict[str, str] = {}
    first = len(lines)
    i = 0
    while i < len(lines):
        m = _SPHINX_FIELD.match(lines[i].strip())
        if m is None:
            i += 1
            continue
        first = min(first, i)
        indent = _indent(lines[i])
        body = [m.group(3) or ""]
        i += 1
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
            if not lines[i].strip() and not _continues(lines, i, indent):
                break
            body.append(lines[i].strip())
            i += 1
        words = m.group(2).split()
        if m.group(1).lower() in _SPHINX_PARAM_FIELDS and words:
            params.setdefault(words[-1].lstrip("*"), _paragraphs(body))
    return params, first


def _continues(lines: list[str], i: int, indent: int) -> bool:
    """Whether the blank line `i` is inside a field: more indented text follows."""
    for line in lines[i + 1 :]:
        if line.strip():
            return _indent(line) > indent
    return False


# -- shared ---------------------------------------------------------------------------


def _entries(body: list[str], entry: _EntryParser) -> dict[str, str]:
    """Entries of a parameters section: lines at the section's own indentation
    start one (parsed by `entry`), deeper lines continue its description."""
    present = [line for line in body if line.strip()]
    if not present:
        return {}
    base = min(_indent(line) for line in present)
    out: dict[str, str] = {}
    names: list[str] = []
    text: list[str] = []

    def close() -> None:
        described = _paragraphs(text)
        for name in names:
            out.setdefault(name.lstrip("*"), described)

    for line in body:
        if line.strip() and _indent(line) == base:
            close()
            parsed = entry(line)
            names, text = (parsed[0], [parsed[1]]) if parsed is not None else ([], [])
        else:
            text.append(line.strip())
    close()
    return {name: text for name, text in out.items() if text}


def _paragraphs(lines: list[str]) -> str:
    """Lines as text: each paragraph's lines joined with spaces, paragraphs
    separated by a blank line."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())
