"""The seam through which `Executor.from_config` reaches the configuration layer.

`toolbus.config` reads files and turns them into `Executor` options; it sits
above the executor, which therefore never imports it (not even deferred,
inside `from_config`). Instead the config layer installs its reader here when
it is imported (`install_config_reader`, at the end of
`toolbus/config/__init__.py`). `toolbus/__init__.py` imports `toolbus.config`
before `toolbus.executor`, and Python runs a package's `__init__` before any
of its submodules, so the reader is in place before any executor can be made.

The reader takes `(registry, path, overrides)` and returns what
`executor_from_config` makes the executor of: the registry the executor runs (the
given one, or a view with the file's tool settings), the executor's keyword
options (the file's, then `overrides`), and the journal the file named,
opened (or None), which the executor is to own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from ..executor import Executor
    from ..journal import Journal
    from ..tools import ToolRegistry

__all__ = ["ConfigReader", "FileOptions", "executor_from_config", "install_config_reader"]

E = TypeVar("E", bound="Executor")

FileOptions = tuple["ToolRegistry", dict[str, Any], "Journal | None"]


class ConfigReader(Protocol):
    """What `toolbus.config` installs: a file's options for an executor."""

    def __call__(
        self,
        registry: ToolRegistry,
        path: str | os.PathLike[str] | None,
        overrides: Mapping[str, Any],
    ) -> FileOptions: ...


_reader: ConfigReader | None = None


def install_config_reader(reader: ConfigReader) -> None:
    """Called by `toolbus.config` as it is imported (the last one installed wins)."""
    global _reader
    _reader = reader


def executor_from_config(
    cls: type[E],
    registry: ToolRegistry,
    path: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any],
) -> E:
    """`cls.from_config(registry, path, **overrides)`: an executor made with the
    installed reader's options, owning the journal the file named. A
    `RuntimeError` if no reader was installed (only if `toolbus.config` failed
    to import)."""
    if _reader is None:
        raise RuntimeError(
            "Executor.from_config: toolbus.config installed no configuration reader "
            "(import toolbus.config first)"
        )
    view, options, journal = _reader(registry, path, overrides)
    try:
        executor = cls(view, **options)
    except BaseException:
        if journal is not None:
            journal.close(1.0)
        raise
    if journal is not None:
        executor._journal_owned = True  # made from the file's path: it closes with the executor
    return executor
