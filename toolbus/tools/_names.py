"""What a tool may be called: checked when the tool is made, and again, more
strictly, where a provider's format renders it.

A tool's name is what the model sends back to call it, so a name no format
can carry makes a tool that can never be called, and one the providers
refuse fails every request it is offered in, the other tools' too. The rule
at registration is the loosest any target keeps, MCP's (2025-11-25: 1 to
128 ASCII letters, digits, `_`, `-` and `.`): a remote MCP server's tools
keep their names, and toolbus serves them on unchanged. OpenAI's and
Anthropic's rule is narrower (no `.`, at most 64: `^[a-zA-Z0-9_-]{1,64}$`),
checked where their tool lists are made, naming the tool.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_NAME_LENGTH",
    "NAME_RULE",
    "ToolNameError",
    "check_name_prefix",
    "check_prefixed_name",
    "check_provider_name",
    "check_tool_name",
    "name_problem",
    "shown_name",
]

MAX_NAME_LENGTH = 128
_CHARACTER = re.compile(r"[A-Za-z0-9_.-]")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_PROVIDER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_PROVIDER_LENGTH = 64

NAME_RULE = "1 to 128 ASCII letters, digits, '_', '-' or '.' (MCP's rule for tool names)"
_PROVIDER_RULE = "1 to 64 ASCII letters, digits, '_' or '-'"


class ToolNameError(ValueError):
    """A tool's name that breaks `NAME_RULE`."""


def shown_name(name: str) -> str:
    """`name` quoted for an error: control characters written out, a long one cut."""
    return repr(name if len(name) <= 40 else name[:39] + "…")


def name_problem(name: str) -> str | None:
    """What keeps `name` from being a tool's name (`NAME_RULE`), or None."""
    if _NAME.fullmatch(name):
        return None
    if not name:
        return "it is empty"
    bad = next((c for c in name if not _CHARACTER.match(c)), None)
    if bad is not None:
        return f"{_character(bad)} is not one"
    return f"it is {len(name)} characters long"


def _character(c: str) -> str:
    """`c` quoted, with its code point when it is not ASCII: a Cyrillic a
    (U+0430) looks like the Latin one it is not."""
    return repr(c) if c.isascii() else f"{c!r} (U+{ord(c):04X})"


def check_tool_name(name: object, *, hint: str = "") -> str:
    """`name` if it can name a tool; TypeError (not a string) or ValueError
    (naming the tool and the rule) otherwise. `hint` says what to do instead."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"a tool's name must be a non-empty string, got {name!r}")
    problem = name_problem(name)
    if problem is not None:
        raise ToolNameError(
            f"tool {shown_name(name)}: a tool's name must be {NAME_RULE}; {problem}{hint}"
        )
    return name


def check_name_prefix(prefix: object, owner: str) -> str:
    """`prefix` if names made with it (`prefix + name`) can be tools' names."""
    if not isinstance(prefix, str):
        raise TypeError(f"{owner}: prefix must be a string, got {prefix!r}")
    problem = name_problem(prefix) if prefix else None
    if problem is not None or len(prefix) >= MAX_NAME_LENGTH:
        problem = problem or f"it is {len(prefix)} characters long, leaving no room for a name"
        raise ValueError(
            f"{owner}: prefix {shown_name(prefix)} cannot start a tool's name, "
            f"which must be {NAME_RULE}; {problem}"
        )
    return prefix


def check_prefixed_name(prefix: str, name: str, owner: str) -> str:
    """`prefix + name` if it can name a tool; else `ToolNameError` naming the
    tool as it was (`name`), the prefix and `owner`: the name made is cut in
    the message, and would not tell which tool it was."""
    made = prefix + name
    problem = name_problem(made)
    if problem is None:
        return made
    raise ToolNameError(
        f"{owner}: tool {shown_name(name)} would be named {shown_name(made)} with prefix "
        f"{shown_name(prefix)}: a tool's name must be {NAME_RULE}; {problem}"
    )


def check_provider_name(name: str, provider: str, *, hint: str = "") -> None:
    """ValueError naming the tool unless `name` is one `provider` (OpenAI,
    Anthropic: `^[a-zA-Z0-9_-]{1,64}$`) takes; toolbus's own rule is looser.
    `hint` says how to offer it under another name where the caller can.

    Anthropic's limit is 64 as its Messages API documents it (the `anthropic`
    SDK's `ToolParam` says no more; 128 is its Managed Agents' limit)."""
    if _PROVIDER_NAME.fullmatch(name):
        return
    if "." in name:
        problem = "'.' is not one"
    elif len(name) > _PROVIDER_LENGTH:
        problem = f"it is {len(name)} characters long"
    else:
        problem = name_problem(name) or "it is not one"
    raise ValueError(
        f"tool {shown_name(name)}: {provider} takes tool names of {_PROVIDER_RULE}; "
        f"{problem}. {hint or 'Offer it under another name'}, "
        "or leave it out of the tools offered"
    )
