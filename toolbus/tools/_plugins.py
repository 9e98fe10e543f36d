"""Plugins: tools other packages publish under the entry-point group `toolbus.tools`.

A package declares, in its pyproject.toml,

    [project.entry-points."toolbus.tools"]
    weather = "acme_tools:weather"          # a Tool
    acme = "acme_tools:registry"            # a ToolRegistry: all its tools
    more = "acme_tools:make_tools"          # a callable: one of those, or tools

and `ToolRegistry.from_entry_points()` finds them. Nothing is imported before
that call (a plugin's import may be slow, or fail): `import toolbus` never
looks. One plugin that is broken (its import fails or exits, its value is not
a tool, its factory or the generator it returns raises) or that brings a name
already taken is reported, as a `PluginWarning` and in
`registry.plugin_errors`, and skipped: a bad package in the environment must
not take the agent down with it. Only `KeyboardInterrupt` goes on up.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import error_text
from ._tool import Tool

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from ._registry import ToolRegistry

__all__ = ["ENTRY_POINT_GROUP", "PluginError", "PluginWarning", "load_plugins"]

ENTRY_POINT_GROUP = "toolbus.tools"


class PluginWarning(UserWarning):
    """A plugin was skipped (see `PluginError`); filter on it to silence or fail."""


class PluginError(Exception):
    """Why one entry point, or one tool it brought, was skipped.

    `entry_point` is its name, `value` what it points at (`module:attribute`),
    `distribution` the package that declared it (None if unknown), `tool` the
    name of the tool refused for a name collision (None when the whole entry
    point was skipped). The original exception, if any, is `__cause__`.
    """

    def __init__(
        self,
        message: str,
        *,
        entry_point: str,
        value: str,
        distribution: str | None = None,
        tool: str | None = None,
    ) -> None:
        super().__init__(message)
        self.entry_point = entry_point
        self.value = value
        self.distribution = distribution
        self.tool = tool

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only fields: the default reduce (`cls(*args)`) would lose them.
        return (_rebuild, (str(self), self.entry_point, self.value, self.distribution, self.tool))


def _rebuild(
    message: str, entry_point: str, value: str, distribution: str | None, tool: str | None
) -> PluginError:
    return PluginError(
        message, entry_point=entry_point, value=value, distribution=distribution, tool=tool
    )


@dataclass(frozen=True, slots=True)
class _Source:
    """Where a plugin's tools came from, for the messages."""

    entry_point: str
    value: str
    distribution: str | None

    @property
    def label(self) -> str:
        where = f" (from {self.distribution})" if self.distribution else ""
        return f"entry point {self.entry_point!r} = {self.value!r}{where}"

    def error(self, reason: str, tool: str | None = None) -> PluginError:
        return PluginError(
            f"toolbus plugin {self.label}: {reason}; skipped",
            entry_point=self.entry_point,
            value=self.value,
            distribution=self.distribution,
            tool=tool,
        )


def load_plugins(
    registry: ToolRegistry, group: str = ENTRY_POINT_GROUP, *, stacklevel: int = 3
) -> list[PluginError]:
    """Register into `registry` the tools of every entry point in `group`.

    Returns what was skipped, each also warned as a `PluginWarning` (with
    `warnings.warn`'s `stacklevel`, counted from here: 3 is the line that
    called the registry method that called this).

    Entry points are taken in the order of their distributions' names, then
    of their own names, so which of two colliding plugins wins depends
    neither on the order of `sys.path` nor on how a build backend wrote the
    metadata: the first keeps the name.
    """
    from importlib.metadata import entry_points  # here: `import toolbus` never scans

    found = sorted(entry_points(group=group), key=lambda ep: (_distribution_name(ep), ep.name))
    problems: list[PluginError] = []
    # Which plugin registered each name, so a collision can say with what.
    owners: dict[str, _Source] = {}
    for ep in found:
        source = _Source(ep.name, ep.value, _distribution_name(ep) or None)
        try:
            tools = _tools_of(ep, source)
        except PluginError as e:
            problems.append(e)
            continue
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # its value's code run by our checks (a __class__ property)
            problem = source.error(f"cannot be used: {error_text(e)}")
            problem.__cause__ = e
            problems.append(problem)
            continue
        for t in tools:
            known = registry.get(t.name)
            if known is t:  # brought along already (by a policy of an earlier tool)
                continue
            if known is not None:
                earlier = owners.get(t.name)
                taken = f"registered by {earlier.label}" if earlier else "already registered"
                problems.append(
                    source.error(f"its tool {t.name!r} collides with the tool {taken}", t.name)
                )
                continue
            try:
                registry.register(t)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # a name its policies bring is taken, or their code raised
                problem = source.error(f"its tool {t.name!r}: {error_text(e)}", t.name)
                problem.__cause__ = e
                problems.append(problem)
                continue
            owners[t.name] = source
    for problem in problems:
        warnings.warn(str(problem), PluginWarning, stacklevel=stacklevel)
    return problems


def _distribution_name(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None)
    return name if isinstance(name, str) else ""


def _tools_of(ep: EntryPoint, source: _Source) -> list[Tool]:
    """The tools an entry point gives; `PluginError` saying why it gives none.

    Everything the plugin's code does happens inside a `try`: its import, its
    factory, and the iteration of what the factory gave (a generator runs its
    body only then, and may raise half way). Anything it raises, `SystemExit`
    included (a plugin calling `sys.exit()` at import), skips the plugin; only
    `KeyboardInterrupt` is the user's and goes on up."""
    try:
        value = ep.load()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # an import error, the module's own code failing, sys.exit
        raise source.error(f"cannot be loaded: {error_text(e)}") from e
    from ._registry import ToolRegistry

    if isinstance(value, Tool | ToolRegistry):
        return _as_tools(value, source)
    if not callable(value):
        raise source.error(_not_a_tool(value))
    if _needs_arguments(value):
        raise source.error(
            "a callable entry point must take no arguments (a function meant as a tool: "
            "decorate it with @toolbus.tool)"
        )
    try:
        made = value()
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        raise source.error(f"calling it raised {error_text(e)}") from e
    return _as_tools(made, source)


def _as_tools(value: object, source: _Source) -> list[Tool]:
    from ._registry import ToolRegistry

    if isinstance(value, Tool):
        return [value]
    if isinstance(value, ToolRegistry):
        return value.list()
    # Text and mappings are iterable too, but of names: never of tools.
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping):
        try:
            items = list(value)  # the plugin's code runs here too (a generator's body)
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            raise source.error(f"iterating over its tools raised {error_text(e)}") from e
        wrong = [x for x in items if not isinstance(x, Tool)]
        if not wrong:
            return items
        raise source.error(f"it gave {_not_a_tool(wrong[0])} among its tools")
    raise source.error(_not_a_tool(value))


def _not_a_tool(value: object) -> str:
    return (
        f"{type(value).__name__} is not a Tool, a ToolRegistry, or a callable returning "
        "one of those or an iterable of tools"
    )


def _needs_arguments(fn: Any) -> bool:
    try:
        signature = inspect.signature(fn)
    except Exception:  # a builtin without one (or a broken __signature__): let the call decide
        return False
    return any(
        p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in signature.parameters.values()
    )
