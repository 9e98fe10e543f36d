"""`ConfigError`: a configuration file that cannot be used, and where."""

from __future__ import annotations

from typing import Any

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A configuration file toolbus cannot use: the file, the key and the reason.

    `str(error)` is `"<file>: <key>: <reason>"`, e.g.
    `toolbus.toml: tools."search".timeout: must be > 0 (inf for no deadline), got -1`;
    the parts are `path`, `key` (None when the file as a whole is at fault:
    missing, not TOML) and `reason`. A `ValueError`, as a bad option given in
    code is.
    """

    def __init__(self, path: str, key: str | None, reason: str) -> None:
        super().__init__(f"{path}: {key}: {reason}" if key else f"{path}: {reason}")
        self.path = path
        self.key = key
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        # The default (`cls(*self.args)`) would pass the whole message as `path`.
        return (type(self), (self.path, self.key, self.reason))
