"""What a command tool is made of, checked when it is made: its argv
templates, its environment; and the argv of one call, filled in.

Pure functions, no I/O. Errors name the tool (`owner`) and never quote an
argument's value, which may be a secret.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import SecretBytes, SecretStr

from ._errors import ArgumentError

__all__ = ["check_argv", "check_env", "check_inherit", "fill_argv"]


def fill_argv(
    templates: Sequence[str], fields: frozenset[str], values: Mapping[str, Any], tool: str
) -> list[str]:
    """Each template filled in from `values` on its own (never joined, never a
    shell); `ArgumentError` if a field it needs has no value or an argument
    cannot be made."""
    for field in sorted(fields):
        if values.get(field) is None:
            raise ArgumentError(f"Invalid arguments for '{tool}': {field} needs a value")
    values = {k: _reveal(v) for k, v in values.items()}
    args = []
    for i, template in enumerate(templates, 1):
        try:
            arg = template.format(**values)
        except (LookupError, AttributeError, ValueError, TypeError) as e:
            # The exception's type only: its text could quote a value.
            raise ArgumentError(
                f"Invalid arguments for '{tool}': argv[{i}] cannot be filled in "
                f"({type(e).__name__})"
            ) from None
        if "\0" in arg:
            raise ArgumentError(f"Invalid arguments for '{tool}': argv[{i}] would hold a NUL")
        args.append(arg)
    return args


def _reveal(value: Any) -> Any:
    # A parameter typed secret is masked everywhere toolbus publishes it; the
    # command itself needs the value.
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, SecretBytes):
        return value.get_secret_value().decode(errors="surrogateescape")
    return value


def check_argv(argv: Any, names: set[str], owner: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """`argv` as a tuple, and the parameters its templates name.

    A non-empty list of strings; `argv[0]` literal; every field a parameter in
    `names` (by name: `{x}`, `{x!r}`, `{x:>10}`, `{x.attr}`, `{x[0]}`).
    TypeError/ValueError naming `owner` and the element otherwise."""
    if isinstance(argv, str | bytes) or not isinstance(argv, Sequence):
        raise TypeError(f"{owner}: argv must be a list of strings (never a shell command line)")
    if not argv:
        raise ValueError(f"{owner}: argv must not be empty")
    fields: set[str] = set()
    for i, element in enumerate(argv):
        if not isinstance(element, str):
            raise TypeError(f"{owner}: argv[{i}] must be a string, got {type(element).__name__}")
        try:
            found = _format_fields(element)
        except ValueError as e:
            raise ValueError(f"{owner}: argv[{i}] is not a valid format string: {e}") from None
        if found and i == 0:
            raise ValueError(f"{owner}: argv[0] is the program and must be literal text")
        for field in found:
            base = field.split(".", 1)[0].split("[", 1)[0]
            if not base or base.isdigit():
                raise ValueError(f"{owner}: argv[{i}] has a positional field; name a parameter")
            if base not in names:
                known = ", ".join(sorted(names)) or "none"
                raise ValueError(
                    f"{owner}: argv[{i}] refers to {{{base}}}, which is not a parameter "
                    f"(parameters: {known})"
                )
            fields.add(base)
    return tuple(argv), frozenset(fields)


def _format_fields(template: str) -> list[str]:
    """The field names of a format string, those nested in format specs included."""
    names: list[str] = []
    for _, field, spec, _ in string.Formatter().parse(template):
        if field is not None:
            names.append(field)
        if spec:
            names.extend(_format_fields(spec))
    return names


def check_env(env: Any, owner: str) -> dict[str, str]:
    """`env` as a dict of str to str that a process environment can hold."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"{owner}: env must be a dict of str to str, got {type(env).__name__}")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"{owner}: env must map str to str; {key!r} does not")
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ValueError(f"{owner}: env name {key!r} (or its value) cannot be used")
    return dict(env)


def check_inherit(inherit: Any, owner: str) -> bool | tuple[str, ...]:
    """True (all of os.environ) or the names of the variables to pass on."""
    if inherit is True:
        return True
    names = () if inherit is False else inherit
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"{owner}: inherit_env must be True, False or a list of names")
    names = tuple(names)
    if not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"{owner}: inherit_env names must be non-empty strings")
    return names
