"""What a configuration file may set, and its values checked.

Every value goes through the validator its option uses in code (`_options`,
`RetryPolicy`, `Retention`, `SecretKeys`, the executor's own checks), so a
value the file accepts is one `Executor(...)` or a tool would accept, and the
reason given is the one code would get; only the prefix changes, to the file
and the key.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._options import (
    check_memory_limit,
    check_on_full,
    own_bound,
    positive_int,
    positive_number,
    timeout_seconds,
)
from ..backends._resolve import check_spec
from ..journal import Retention
from ..masking import SecretKeys
from ..retry import RetryPolicy
from ._errors import ConfigError
from ._file import FileTable

__all__ = ["EXECUTOR_KEYS", "TOOL_KEYS", "Config", "ToolSettings", "parse_config"]

# A key's check: (key, value, the file's directory) -> the option's value.
Check = Callable[[str, Any, Path], Any]


def _positive_int(key: str, value: Any, _: Path) -> int:
    return positive_int(value, key)


def _positive_number(key: str, value: Any, _: Path) -> float:
    return positive_number(value, key)


def _timeout(key: str, value: Any, _: Path) -> float | None:
    return timeout_seconds(value, key)


def _tool_call_timeout(key: str, value: Any, _: Path) -> float | None:
    # A tool's own bound: the executor's still applies (inf is no bound of its own).
    return timeout_seconds(value, key, hint=own_bound("the executor's call_timeout still applies"))


def _retries(key: str, value: Any, _: Path) -> RetryPolicy:
    return RetryPolicy(max_retries=value)


def _backend(key: str, value: Any, _: Path) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a backend's name, got {_shown(value)}")
    check_spec(value, owner=key)
    return value


def _secret_keys(key: str, value: Any, _: Path) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError(f"{key} must be an array of names, got {_shown(value)}")
    return SecretKeys(value).extra


def _groups(key: str, value: Any, _: Path) -> dict[str, Any]:
    """`groups = { db = 4 }`, or a table per group: `db = { limit = 4, max_queued = 100 }`."""
    from .._executor._options import check_groups as _check_groups

    limits, queues = _check_groups(value)
    return {
        name: {"limit": limit, "max_queued": queues[name]} if name in queues else limit
        for name, limit in limits.items()
    }


def _on_full(key: str, value: Any, _: Path) -> str:
    return check_on_full(value, key)


def _journal(key: str, value: Any, directory: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{key} must be a path (a non-empty string), got {_shown(value)}")
    # Relative to the file, not to wherever the process was started.
    return directory / Path(value).expanduser()


def _retention(key: str, value: Any, _: Path) -> Retention:
    return Retention.coerce(value, key)


def _name(key: str, value: Any, _: Path) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"{key} must be a non-empty string, got {_shown(value)}")
    return value


def _enabled(key: str, value: Any, _: Path) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{key} must be true or false, got {_shown(value)}")
    return value


def _rate_limit(key: str, value: Any, _: Path) -> str:
    # Its syntax is the policy's to check: when it is made (`rate_limit(value)`).
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f'{key} must be a string such as "10/minute", got {_shown(value)}')
    return value


# The file's keys for the executor: key -> (the Executor option it sets, its check).
EXECUTOR_KEYS: dict[str, tuple[str, Check]] = {
    "max_parallel": ("max_parallel", _positive_int),
    "timeout": ("timeout", _timeout),
    "call_timeout": ("call_timeout", _timeout),
    "retries": ("retry", _retries),
    "max_argument_bytes": ("max_argument_bytes", _positive_int),
    "max_abandoned_workers": ("max_abandoned_workers", _positive_int),
    "max_abandoned_per_tool": ("max_abandoned_per_tool", _positive_int),
    "hook_grace": ("hook_grace", _positive_number),
    "worker_idle_timeout": ("worker_idle_timeout", _positive_number),
    "backend": ("backend", _backend),
    "secret_keys": ("secret_keys", _secret_keys),
    "groups": ("groups", _groups),
    "max_queued": ("max_queued", _positive_int),
    "on_full": ("on_full", _on_full),
    "journal": ("journal", _journal),
    "journal_retention": ("journal_retention", _retention),
    "journal_timeout": ("journal_timeout", _positive_number),
    "name": ("name", _name),
}

# A `[tools."<name>"]` table's keys: key -> (the Tool attribute it sets, or
# None for one that is not an attribute, its check).
TOOL_KEYS: dict[str, tuple[str | None, Check]] = {
    "enabled": (None, _enabled),
    "timeout": ("timeout", _timeout),
    "call_timeout": ("call_timeout", _tool_call_timeout),
    "retries": ("retry", _retries),
    "rate_limit": (None, _rate_limit),
    "cache_ttl": (None, _positive_number),
    "backend": ("backend", _backend),
    "memory_limit_mb": ("memory_limit_mb", lambda key, value, _: check_memory_limit(value)),
}


@functools.cache
def _object_options() -> frozenset[str]:
    """Executor options the file cannot set: those taking Python objects
    (hooks, a publisher, backend objects, inject, policies, a RetryPolicy).
    Worked out from the signature, so an option added later is refused with
    this reason rather than as unknown."""
    from ..executor import Executor

    settable = {option for option, _ in EXECUTOR_KEYS.values()}
    names = inspect.signature(Executor.__init__).parameters
    return frozenset(n for n in names if n not in ("self", "registry") and n not in settable)


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """One `[tools."<name>"]` table, checked."""

    enabled: bool = True
    # Tool attributes to set on the executor's copy of the tool.
    attributes: Mapping[str, Any] = field(default_factory=dict)
    rate_limit: str | None = None
    cache_ttl: float | None = None


@dataclass(frozen=True, slots=True)
class Config:
    """A configuration file, read and checked (`toolbus.config.load_config`).

    `options`: the Executor keyword options it sets (`retries` already a
    `RetryPolicy`, `journal` resolved against the file's directory). `tools`:
    the `[tools."<name>"]` tables by tool name. `path` is None when no file
    was found: the configuration then sets nothing.
    """

    path: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    tools: Mapping[str, ToolSettings] = field(default_factory=dict)
    # How errors name the file, and the keys' prefix ("tool.toolbus." in a pyproject.toml).
    shown: str = ""
    prefix: str = ""
    # The file's key for each option it sets (`retries` for `retry`).
    option_keys: Mapping[str, str] = field(default_factory=dict)

    def key(self, key: str, tool: str | None = None) -> str:
        """`key` as errors name it: `tools."search".timeout`, with the prefix."""
        if tool is None:
            return self.prefix + key
        where = f"{self.prefix}tools.{json.dumps(tool, ensure_ascii=False)}"
        return f"{where}.{key}" if key else where

    def error(self, key: str, reason: str, tool: str | None = None) -> ConfigError:
        return ConfigError(self.shown, self.key(key, tool), reason)


def parse_config(source: FileTable) -> Config:
    """Check every key and value of the file's table; `ConfigError` for the first bad one."""
    config = Config(path=source.path, shown=source.shown, prefix=source.prefix)
    # Absolute: a relative path in the file stays the file's, whatever the
    # current directory is when the executor opens it.
    directory = source.path.parent.absolute()
    options: dict[str, Any] = {}
    option_keys: dict[str, str] = {}
    tools: dict[str, ToolSettings] = {}
    for key, value in source.table.items():
        if key == "tools":
            tools = _parse_tools(config, value, directory)
            continue
        if key not in EXECUTOR_KEYS:
            raise config.error(key, _unknown_executor_key(key, value, config.prefix))
        option, check = EXECUTOR_KEYS[key]
        options[option] = _checked(config, key, None, check, value, directory)
        option_keys[option] = key
    return Config(
        path=source.path,
        options=options,
        tools=tools,
        shown=source.shown,
        prefix=source.prefix,
        option_keys=option_keys,
    )


def _parse_tools(config: Config, value: Any, directory: Path) -> dict[str, ToolSettings]:
    if not isinstance(value, dict):
        raise config.error(
            "tools", f'must be a table of [tools."<name>"] tables, got {_shown(value)}'
        )
    tools: dict[str, ToolSettings] = {}
    for name, table in value.items():
        if not isinstance(table, dict):
            raise config.error("", f"must be a table, got {_shown(table)}", name)
        enabled = True
        attributes: dict[str, Any] = {}
        rate_limit: str | None = None
        cache_ttl: float | None = None
        for key, item in table.items():
            if key not in TOOL_KEYS:
                raise config.error(key, _unknown_tool_key(key), name)
            attribute, check = TOOL_KEYS[key]
            checked = _checked(config, key, name, check, item, directory)
            if attribute is not None:
                attributes[attribute] = checked
            elif key == "enabled":
                enabled = checked
            elif key == "rate_limit":
                rate_limit = checked
            else:
                cache_ttl = checked
        tools[name] = ToolSettings(enabled, attributes, rate_limit, cache_ttl)
    return tools


def _checked(
    config: Config, key: str, tool: str | None, check: Check, value: Any, directory: Path
) -> Any:
    try:
        return check(key, value, directory)
    except (TypeError, ValueError) as e:
        raise config.error(key, reason(e, key, "max_retries"), tool) from None


_NONE_HINT = re.compile(r"\((?:or None for no deadline|inf for no deadline, None for [^)]*)\)")


def reason(error: BaseException, *names: str) -> str:
    """A validator's message without who it names: the file and key say that."""
    text = str(error)
    for owner in ("Executor: ", "RetryPolicy: "):
        text = text.removeprefix(owner)
    for name in names:
        rest = text.removeprefix(name)
        if rest != text and rest[:1] in (" ", ":"):
            text = rest.removeprefix(":").lstrip()
            break
    # TOML has no None: a file says "no deadline" with inf, and leaves a key
    # out for what None would mean.
    text = _NONE_HINT.sub("(inf for no deadline)", text)
    return text.replace("(None or inf: no bound of its own", "(inf: no bound of its own")


def _unknown_executor_key(key: str, value: Any, prefix: str) -> str:
    if key == "retry":
        return (
            "not settable from the file as a RetryPolicy; write retries = N "
            "(RetryPolicy(max_retries=N)), or pass retry= to Executor.from_config"
        )
    if key == "hooks":
        return (
            "not settable from the file: hooks are Python callables; pass pre_call=, "
            "post_call=, authorize= (or a subclass) to Executor.from_config"
        )
    if key in _object_options():
        return (
            "not settable from the file: it takes Python objects; "
            f"pass {key}= to Executor.from_config"
        )
    if key == "tool":
        return "unknown key (a toolbus.toml has its keys at the top level, not in [tool.toolbus])"
    unknown = _unknown(key, [*EXECUTOR_KEYS, "tools"])
    if isinstance(value, dict):  # [search] meant as a tool's table
        return f'{unknown}; a tool\'s table is [{prefix}tools."{key}"]'
    return unknown


def _unknown_tool_key(key: str) -> str:
    if key == "retry":
        return "unknown key; write retries = N (RetryPolicy(max_retries=N))"
    return _unknown(key, list(TOOL_KEYS))


def _unknown(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key{hint} (known: {', '.join(known)})"


def _shown(value: object) -> str:
    return f"{type(value).__name__} {value!r}"
