"""The client's roots: where a server may work (MCP `roots/list`).

    with connect_stdio(sys.executable, ["indexer.py"], roots=["/srv/project"]) as conn:
        ...
        conn.set_roots(["/srv/project", ("/srv/docs", "docs")])  # roots/list_changed

A connection made with `roots=[...]` offers them: each a path (made absolute)
or a `file://` URI, alone or with a name (`(path, name)`). The server asks
for them whenever it likes (on 2025-11-25 with `roots/list`; a 2026-07-28
`InputRequiredResult` may carry the same request, though the protocol
deprecates roots) and gets the current list. `set_roots` replaces it whole
and tells a live 2025-11-25 session (`notifications/roots/list_changed`); a
2026-07-28 server asks again when it needs them. Without `roots=`, roots are
not offered (the capability is fixed at the handshake): a server that asks
gets the SDK's answer, not supported, and `set_roots` is refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import mcp_types as types
from mcp import Client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

__all__ = ["Roots", "RootsOption", "given_roots", "root_list", "roots_changed"]

RootsOption = Iterable[str | os.PathLike[str] | tuple[str | os.PathLike[str], str] | types.Root]
"""What `roots=` takes: paths or `file://` URIs, each alone or with its name
(or the SDK's `Root`s)."""


def root_list(roots: object, owner: str) -> tuple[types.Root, ...]:
    """`roots` as the SDK's `Root`s, checked: a `TypeError` or `ValueError`
    naming `owner` for what is not a path, a `file://` URI or a pair of one
    and a name."""
    if isinstance(roots, str | bytes | os.PathLike) or not isinstance(roots, Iterable):
        raise TypeError(
            f"{owner}: roots must be a list of paths or file:// URIs, got {type(roots).__name__}"
        )
    return tuple(_root(item, owner) for item in roots)


def _root(item: object, owner: str) -> types.Root:
    if isinstance(item, types.Root):
        return item
    name: str | None = None
    if isinstance(item, tuple):
        if len(item) != 2 or not isinstance(item[1], str):
            raise TypeError(f"{owner}: a root with a name is (path or URI, name), got {item!r}")
        item, name = item
    if isinstance(item, os.PathLike):
        item = os.fspath(item)
    if not isinstance(item, str) or not item:
        raise TypeError(f"{owner}: a root is a path or a file:// URI, got {item!r}")
    if "\0" in item:
        raise ValueError(f"{owner}: a root holds a NUL character: {item!r}")
    parsed = urlparse(item)
    if parsed.scheme == "file":
        # `file://` or `file:x` names no directory (or, read leniently, all of them).
        if not parsed.path.startswith("/") or (parsed.path == "/" and not item.endswith(":///")):
            raise ValueError(f"{owner}: a file:// URI needs an absolute path, got {item!r}")
        uri = item
    elif len(parsed.scheme) > 1:  # (a Windows drive letter is one letter)
        raise ValueError(f"{owner}: a root must be a path or a file:// URI, got {item!r}")
    else:
        uri = Path(item).expanduser().resolve().as_uri()
    return types.Root(uri=uri, name=name)


def given_roots(roots: RootsOption | None, where: str) -> RootsOption | None:
    """`connect(roots=...)` checked before any thread or process starts (and
    read once: a generator would be spent by a second look)."""
    return root_list(roots, where) if roots is not None else None


async def roots_changed(client: Client | None) -> None:
    """Tell a live 2025-11-25 session that the client's roots changed (a later
    session lists them anew; a 2026-07-28 server asks when it needs them)."""
    if client is None or client.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return
    # The notification itself: the SDK's `send_roots_list_changed` warns of
    # 2026-07-28's deprecation, which does not concern this session, and
    # silencing it would touch the process's warning filters.
    await client.session.send_notification(types.RootsListChangedNotification())


class Roots:
    """The roots a connection offers: replaced whole (`current`), read on the
    connection's loop when the server asks."""

    def __init__(self, roots: tuple[types.Root, ...]) -> None:
        self.current = roots

    async def listed(self, context: Any) -> types.ListRootsResult:
        """The SDK's `list_roots_callback`."""
        return types.ListRootsResult(roots=list(self.current))
