"""What a command tool is made of, checked when it is made: its argv
templates, its environment; and the argv of one call, filled in and bounded.

Pure functions, no I/O. Errors name the tool (`owner`) and never quote an
argument's value, which may be a secret.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._errors import ArgumentError
from ._command_secrets import reveal

__all__ = ["MAX_ARG_BYTES", "check_argv", "check_command_size", "check_env", "check_inherit",
           "fill_argv", "format_fields"]  # fmt: skip


# The longest argument a command can be given, in bytes: Linux's
# MAX_ARG_STRLEN (32 pages, its NUL included). Every platform gets the same.
MAX_ARG_BYTES = 32 * 4096 - 1
# What execve counts for each string besides its bytes (a pointer), and some
# slack for what it needs besides (the program's path, the aux vector).
_POINTER = 8
_SLACK = 4096
# Width and precision in a format spec (`{x:>{w}}`, `{x:.{n}f}`, filled in by
# the model): refused above `MAX_ARG_BYTES` before `format` builds the string.
_SPEC_NUMBER = re.compile(r"\d+")


class _Filler(string.Formatter):
    """`str.format`, with secrets revealed wherever a field reaches them
    (`{key}`, `{creds.password}`, `{keys[0]}`), and each format spec checked
    before it is applied."""

    def get_field(self, field_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        value, used = super().get_field(field_name, args, kwargs)
        return reveal(value), used

    def format_field(self, value: Any, format_spec: str) -> Any:
        if len(format_spec) > MAX_ARG_BYTES or any(
            len(n) > 6 or int(n) > MAX_ARG_BYTES for n in _SPEC_NUMBER.findall(format_spec)
        ):
            raise _TooLong
        return format(value, format_spec)


class _TooLong(Exception):
    pass


_FILLER = _Filler()


def fill_argv(
    templates: Sequence[str], fields: frozenset[str], values: Mapping[str, Any], tool: str
) -> list[str]:
    """Each template filled in from `values` on its own (never joined, never a
    shell); `ArgumentError` if a field it needs has no value or an argument
    cannot be made (a NUL in it, or longer than `MAX_ARG_BYTES`, checked
    before a width or precision that long is applied)."""
    for field in sorted(fields):
        if values.get(field) is None:
            raise ArgumentError(f"Invalid arguments for '{tool}': {field} needs a value")
    args = []
    for i, template in enumerate(templates, 1):
        too_long = (
            f"Invalid arguments for '{tool}': argv[{i}] would be longer than {MAX_ARG_BYTES} "
            "bytes, the most a command can be given in one argument"
        )
        try:
            arg = _FILLER.vformat(template, (), values)
        except _TooLong:
            raise ArgumentError(f"{too_long} (a width or precision too large)") from None
        except (LookupError, AttributeError, ValueError, TypeError) as e:
            # The exception's type only: its text could quote a value.
            raise ArgumentError(
                f"Invalid arguments for '{tool}': argv[{i}] cannot be filled in "
                f"({type(e).__name__})"
            ) from None
        if "\0" in arg:
            raise ArgumentError(f"Invalid arguments for '{tool}': argv[{i}] would hold a NUL")
        if len(arg) > MAX_ARG_BYTES // 4 and _size(arg) > MAX_ARG_BYTES:
            raise ArgumentError(too_long)
        args.append(arg)
    return args


def check_command_size(command: Sequence[str], env: Mapping[str, str], tool: str) -> None:
    """`ArgumentError` if `command` and `env` are more than the system lets a
    program be given (`ARG_MAX`): its start would fail with E2BIG."""
    try:
        limit = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):  # not known here: the start itself will tell
        return
    if limit <= 0:
        return
    size = sum(_size(a) + 1 + _POINTER for a in command)
    room = limit - _SLACK - sum(_size(k) + _size(v) + 2 + _POINTER for k, v in env.items())
    if size > room:
        raise ArgumentError(
            f"Invalid arguments for '{tool}': the command line would be {size} bytes, more than "
            f"the {max(room, 0)} the system allows (ARG_MAX {limit}, less the environment)"
        )


def _size(text: str) -> int:
    return len(text.encode(errors="surrogateescape"))


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
            found = format_fields(element)
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


def format_fields(template: str) -> list[str]:
    """The field names of a format string, those nested in format specs included."""
    names: list[str] = []
    for _, field, spec, _ in string.Formatter().parse(template):
        if field is not None:
            names.append(field)
        if spec:
            names.extend(format_fields(spec))
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
