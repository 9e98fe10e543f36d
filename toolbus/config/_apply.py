"""A configuration applied: the executor's options, and its own view of the registry.

The caller's registry is never changed: other executors, the command line, a
test may hold it. An executor whose file configures tools gets a new registry
of its own, where each configured tool is a copy with the file's values (see
`toolbus.tools._registry.reconfigured`) and a disabled tool is absent, so it
is neither exported to a model nor callable (`TOOL_NOT_FOUND`). The view maps
each original it replaced to its copy (or to None, disabled), so a tool held
by another (a sequence's step, a spill's read_artifact) is run, or left out,
as the file says, not as the object held.
"""

from __future__ import annotations

import difflib
import os
import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._options import positive_number
from ..backends._resolve import Backends
from ..tools import Tool, ToolRegistry, error_text
from ..tools._registry import reconfigured, registry_view
from ._errors import ConfigError
from ._file import read_config
from ._settings import Config, ToolSettings, parse_config, reason

if TYPE_CHECKING:
    from ..journal import Journal

__all__ = ["apply_config", "executor_options", "load_config", "open_file_journal"]


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and check a configuration file: `path` (a `toolbus.toml`, a
    `pyproject.toml` with `[tool.toolbus]`, or a directory to look in) or, for
    None, `./toolbus.toml` then `./pyproject.toml`. With None and neither
    file, an empty `Config` (it sets nothing); a path given must hold one.
    Anything wrong with a file is a `ConfigError` naming the file, the key
    and the reason."""
    source = read_config(path)
    return parse_config(source) if source is not None else Config()


def apply_config(
    config: Config, registry: ToolRegistry, overrides: Mapping[str, Any]
) -> tuple[ToolRegistry, dict[str, Any]]:
    """The registry and the keyword options an `Executor` made from `config`
    gets: the file's options, then `overrides` over them.

    Errors the file is to blame for (a tool it names that the registry lacks,
    a backend name nothing binds, a group a tool needs that its `groups`
    lacks, a value a tool refuses) are `ConfigError`s here; the executor's own
    checks follow when it is made.
    """
    if config.path is None:  # no file: exactly Executor(registry, **overrides)
        return registry, dict(overrides)
    options = {**config.options, **overrides}
    # What the file decides: the options code did not override.
    from_file = {o for o in config.options if o not in overrides}
    view = _tool_view(config, registry) if config.tools else registry
    _check_backends(config, view, options, from_file)
    _check_groups(config, view, options, from_file)
    return view, options


def open_file_journal(
    config: Config, options: dict[str, Any], overrides: Mapping[str, Any]
) -> Journal | None:
    """The journal at the file's `journal` path, opened now, so that a path no
    journal can live at (a directory, a file that is not one, a directory
    that does not exist) is a `ConfigError` naming the file and the key, not
    an `OSError` out of `Executor(...)`. `options["journal"]` becomes the
    open journal (and `journal_retention` goes into it): the executor is to
    own it, closing it when it closes. None when the file sets no journal, or
    the code overrides it."""
    _check_journal_options(config, options, overrides)
    if "journal" not in options or "journal" in overrides or config.path is None:
        return None
    from .._executor._journal import DEFAULT_JOURNAL_TIMEOUT
    from ..journal import Journal, Retention

    # The executor's own checks of the other two options, as it would make them.
    retention = Retention.coerce(
        options.pop("journal_retention", None), "journal_retention", "Executor"
    )
    timeout = options.get("journal_timeout")
    wait = (
        DEFAULT_JOURNAL_TIMEOUT
        if timeout is None
        else positive_number(timeout, "journal_timeout", "Executor")
    )
    path = options["journal"]
    try:
        journal = Journal(path, create=True, retention=retention, timeout=wait)
    except (OSError, ValueError, sqlite3.Error) as e:  # TimeoutError is an OSError
        key = config.option_keys.get("journal", "journal")
        raise config.error(
            key, f"no journal can be kept at {str(path)!r}: {error_text(e)}"
        ) from None
    options["journal"] = journal
    return journal


def _check_journal_options(
    config: Config, options: Mapping[str, Any], overrides: Mapping[str, Any]
) -> None:
    """The file's `journal_retention` and `journal_timeout` need a journal the
    file (or the code) gives as a path: a `ConfigError` naming the file and the
    key, not the executor's own `ValueError`, when there is none (or, for the
    retention, when the code gave `journal=` a `Journal` of its own)."""
    from ..journal import Journal

    journal = options.get("journal")
    for option in ("journal_retention", "journal_timeout"):
        if option not in config.options or option in overrides or options.get(option) is None:
            continue
        key = config.option_keys.get(option, option)
        if journal is None:
            raise config.error(key, "needs a journal: set `journal` (a path) too")
        if option == "journal_retention" and isinstance(journal, Journal):
            raise config.error(
                key,
                "applies to a journal made from a path, and the code gave journal= a "
                "Journal of its own (give it Journal(path, retention=...))",
            )


def executor_options(
    registry: ToolRegistry, path: str | os.PathLike[str] | None, overrides: Mapping[str, Any]
) -> tuple[ToolRegistry, dict[str, Any], Journal | None]:
    """`Executor.from_config`'s reader (installed by `toolbus/config/__init__.py`
    into `toolbus/_executor/_from_config.py`): the registry, the options and
    the open journal (for the executor to own) of the file at `path`."""
    config = load_config(path)
    view, options = apply_config(config, registry, overrides)
    # Opened here, so that a path that cannot hold one names the file and the key.
    journal = open_file_journal(config, options, overrides)
    return view, options, journal


def _tool_view(config: Config, registry: ToolRegistry) -> ToolRegistry:
    replaced: dict[str, Tool | None] = {}
    for name, settings in config.tools.items():
        tool = registry.get(name)
        if tool is None:
            close = difflib.get_close_matches(name, registry.names(), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise config.error("", f"the registry has no tool named {name!r}{hint}", name)
        if not settings.enabled:
            replaced[name] = None
            continue
        attributes = dict(settings.attributes)
        policies = _policies(config, name, settings)
        if policies:
            attributes["policies"] = (*tool.policies, *policies)
        if attributes:
            try:
                replaced[name] = reconfigured(tool, **attributes)
            except (TypeError, ValueError) as e:  # a pairing the tool refuses
                raise config.error("", _unowned(e, name), name) from None
    try:
        return registry_view(registry, replaced)
    except ValueError as e:  # a tool a new policy brings has a name already taken
        raise ConfigError(config.shown, config.key("tools"), str(e)) from None


def _policies(config: Config, name: str, settings: ToolSettings) -> list[Any]:
    """The policies the table asks for, made for this executor (each holds its
    own state: two executors from one file do not share a rate limit).

    The cache comes first: a call it answers should not spend the rate limit.
    """
    made: list[Any] = []
    if settings.cache_ttl is not None:
        made.append(_make(config, name, "cache_ttl", "cache", ttl=settings.cache_ttl))
    if settings.rate_limit is not None:
        made.append(_make(config, name, "rate_limit", "rate_limit", settings.rate_limit))
    return made


def _make(config: Config, tool: str, key: str, factory: str, *args: Any, **kwargs: Any) -> Any:
    # Looked up by name, when needed: the configuration does not tie toolbus's
    # import to every policy module, and a build without one says so here.
    from .. import policies

    make = getattr(policies, factory, None)
    if make is None:
        raise config.error(
            key, f"toolbus.policies.{factory} is not available in this version of toolbus", tool
        )
    try:
        return make(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise config.error(key, reason(e, factory, key), tool) from None


def _check_backends(
    config: Config, view: ToolRegistry, options: Mapping[str, Any], from_file: set[str]
) -> None:
    """Backend names resolve, and each configured tool can run where it will."""
    try:
        backends = Backends(options.get("backend", "auto"), options.get("backends"))
    except (TypeError, ValueError) as e:
        if "backend" in from_file:
            key = config.option_keys["backend"]
            raise config.error(key, reason(e, "Executor(backend=...)")) from None
        return  # the code's own options: the executor says so, as it would without a file
    # With the file's default backend, every tool is the file's business;
    # otherwise only the tools it configures.
    for t in view.list():
        settings = config.tools.get(t.name)
        if settings is None and "backend" not in from_file:
            continue
        try:
            backends.for_tool(t)
        except ValueError as e:
            if settings is not None:
                raise config.error("", _unowned(e, t.name), t.name) from None
            raise config.error(config.option_keys["backend"], str(e)) from None


def _check_groups(
    config: Config, view: ToolRegistry, options: Mapping[str, Any], from_file: set[str]
) -> None:
    """The file's `groups` covers every group a tool belongs to."""
    if "groups" not in from_file:
        return
    groups = options["groups"]
    for t in view.list():
        for group in t.groups:
            if group not in groups:
                raise config.error(
                    config.option_keys["groups"],
                    f"tool {t.name!r} belongs to the group {group!r}, which it does not set "
                    f"(it sets: {', '.join(sorted(groups)) or 'none'})",
                )


def _unowned(error: BaseException, tool: str) -> str:
    """A tool's error without a leading `tool 'x': ` (the key names the tool);
    a sentence about the tool (`tool 'x' is sync: ...`) is kept whole."""
    return str(error).removeprefix(f"tool {tool!r}: ")
