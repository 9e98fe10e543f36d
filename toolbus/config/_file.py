"""Finding and reading the configuration file: `toolbus.toml`, or `[tool.toolbus]`
in `pyproject.toml`."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import ConfigError

__all__ = ["PYPROJECT_TOML", "TOOLBUS_TOML", "FileTable", "find_config", "read_config"]

TOOLBUS_TOML = "toolbus.toml"
PYPROJECT_TOML = "pyproject.toml"
# Where the table sits in a pyproject.toml; its keys are named from here in errors.
_PYPROJECT_PREFIX = "tool.toolbus."


@dataclass(frozen=True, slots=True)
class FileTable:
    """The file's toolbus table, with how errors name the file and its keys."""

    path: Path
    shown: str  # the file as errors name it: the path as given or found
    prefix: str  # "" for toolbus.toml, "tool.toolbus." for pyproject.toml
    table: dict[str, Any]


def find_config(directory: str | os.PathLike[str] | None = None) -> Path | None:
    """The file `Executor.from_config` reads when given no path: `toolbus.toml`
    in `directory` (default: the current one), else `pyproject.toml` there if
    it has a `[tool.toolbus]` table; None when neither.

    Only `directory` itself is looked in, not its parents: which file applies
    should not depend on where above the project the process happens to start.
    """
    base = Path(directory) if directory is not None else Path()
    toolbus_toml = base / TOOLBUS_TOML
    if toolbus_toml.is_file():
        return toolbus_toml
    pyproject = base / PYPROJECT_TOML
    if pyproject.is_file() and _toolbus_table(_parse(pyproject), str(pyproject)) is not None:
        return pyproject
    return None


def read_config(path: str | os.PathLike[str] | None) -> FileTable | None:
    """The toolbus table of `path` (a file, or a directory to search as
    `find_config` does; None: the current directory). None when the current
    directory has no configuration: it is optional. `ConfigError` for a path
    given that has none (a missing file, a directory without one, a
    pyproject.toml without `[tool.toolbus]`) or that is not TOML."""
    if path is None or Path(path).is_dir():
        found = find_config(path)
        if found is None and path is not None:
            raise ConfigError(
                str(path),
                None,
                f"has no {TOOLBUS_TOML}, nor a {PYPROJECT_TOML} with [tool.toolbus]",
            )
        if found is None:
            return None
        path = found
    file = Path(path)
    shown = str(path)
    if not file.is_file():
        if file.exists():
            raise ConfigError(shown, None, "is not a regular file (a device or a pipe?)")
        raise ConfigError(shown, None, "no such file")
    data = _parse(file)
    if file.name != PYPROJECT_TOML:
        return FileTable(file, shown, "", data)
    table = _toolbus_table(data, shown)
    if table is None:
        raise ConfigError(shown, None, "has no [tool.toolbus] table")
    return FileTable(file, shown, _PYPROJECT_PREFIX, table)


def _parse(file: Path) -> dict[str, Any]:
    shown = str(file)
    try:
        with file.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(shown, None, f"not valid TOML: {e}") from None
    except UnicodeDecodeError as e:  # TOML is UTF-8 (a Latin-1 editor's file is not)
        bad = bytes(e.object[e.start : e.start + 1])
        why = f"not valid TOML: not UTF-8 (byte {e.start}: {bad!r})"
        raise ConfigError(shown, None, why) from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ConfigError(
            shown, None, "not usable TOML: its arrays or tables nest too deeply"
        ) from None
    except OSError as e:
        raise ConfigError(shown, None, f"cannot be read: {e.strerror or e}") from None


def _toolbus_table(data: dict[str, Any], shown: str) -> dict[str, Any] | None:
    tool = data.get("tool")
    table = tool.get("toolbus") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(shown, "tool.toolbus", f"must be a table, got {_toml_type(table)}")
    return table


def _toml_type(value: object) -> str:
    return "a table" if isinstance(value, dict) else f"{type(value).__name__} {value!r}"
