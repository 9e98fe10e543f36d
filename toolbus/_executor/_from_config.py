"""`Executor.from_config`: an executor made from a configuration file.

`toolbus.config` reads files and turns them into `Executor` options; it sits
above the executor, which therefore never imports it (not even deferred,
inside `from_config`). It is reached through the seam `_seams.config_reader`
(`toolbus/_seams.py`), which `toolbus/_wiring.py` fills with
`toolbus.config.executor_options` before any executor can be made.

The reader (`ConfigReader`) takes `(registry, path, overrides)` and returns what
`executor_from_config` makes the executor of: the registry the executor runs (the
given one, or a view with the file's tool settings), the executor's keyword
options (the file's, then `overrides`), and the journal the file named,
opened (or None), which the executor is to own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .. import _seams

if TYPE_CHECKING:
    from ..executor import Executor
    from ..journal import Journal
    from ..tools import ToolRegistry

__all__ = ["ConfigReader", "FileOptions", "executor_from_config"]

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


def executor_from_config(
    cls: type[E],
    registry: ToolRegistry,
    path: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any],
) -> E:
    """`cls.from_config(registry, path, **overrides)`: an executor made with the
    configuration layer's options, owning the journal the file named."""
    view, options, journal = _seams.config_reader.call(registry, path, overrides)
    try:
        executor = cls(view, **options)
    except BaseException:
        if journal is not None:
            journal.close(1.0)
        raise
    if journal is not None:
        executor._journal_owned = True  # made from the file's path: it closes with the executor
    return executor
