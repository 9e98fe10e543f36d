"""A server's resources and prompts, read by the client (`MCPConnection`'s methods).

    with connect_stdio(sys.executable, ["docs_server.py"]) as docs:
        for resource in docs.resources():
            print(resource.uri, resource.name)
        text = docs.read_resource("docs://guide")[0].text
        prompt = docs.get_prompt("summarize", {"topic": "retries"})

`subscribe_resource(uri)` follows a resource: its changes become bus events
(`_resource_updates.py`).

Each asks the live session (connecting first, as a call would), waits at most
`timeout` seconds, and raises `MCPConnectError` when the server refuses, does
not answer in time or the connection is closed: these are the caller's own
requests, not a model's tool calls. Listings follow the server's pages to the
end. The answers are the SDK's own types (`mcp_types`), as `specs` are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import mcp_types as types
from mcp import Client

from ._resource_updates import ResourceWatch

__all__ = ["ResourcesAndPrompts"]

log = logging.getLogger("toolbus.mcp")

T = TypeVar("T")

# A server that pages without end is read this far, no further.
_PAGES = 100

Contents = types.TextResourceContents | types.BlobResourceContents


async def _every_page(list_page: Callable[..., Awaitable[Any]], items: str) -> list[Any]:
    """Every item of a paged listing (`list_page(cursor=...)`), page by page."""
    found: list[Any] = []
    cursor: str | None = None
    for _ in range(_PAGES):
        page = await list_page(cursor=cursor)
        found.extend(getattr(page, items))
        if (cursor := page.next_cursor) is None:
            break
    else:
        log.warning("an MCP server's %s went on past %d pages: read that far", items, _PAGES)
    return found


def _shown(uri: str) -> str:
    return repr(uri if len(uri) <= 200 else uri[:197] + "...")


class ResourcesAndPrompts:
    """The part of `MCPConnection` that reads resources and prompts."""

    _watch: ResourceWatch  # (MCPConnection's)

    def _on_session(
        self, use: Callable[[Client], Awaitable[T]], timeout: float, what: str
    ) -> T:  # (MCPConnection's)
        raise NotImplementedError

    def subscribe_resource(self, uri: str, timeout: float = 10.0) -> None:
        """Follow the resource at `uri`: each change the server reports is an
        event on `mcp:resource-updated` (`ResourceUpdated`), sent by this
        connection, until `unsubscribe_resource` (after a reconnection too).
        Raises `MCPConnectError` when the server refuses."""
        if not isinstance(uri, str) or not uri:
            raise TypeError(f"subscribe_resource: uri must be a non-empty string, got {uri!r}")
        self._on_session(
            lambda client: self._watch.follow(client, uri), timeout, f"follow {_shown(uri)}"
        )

    def unsubscribe_resource(self, uri: str, timeout: float = 10.0) -> None:
        """Stop following `uri` (no event for it from now on)."""
        if not isinstance(uri, str) or not uri:
            raise TypeError(f"unsubscribe_resource: uri must be a non-empty string, got {uri!r}")
        what = f"stop following {_shown(uri)}"
        self._on_session(lambda client: self._watch.unfollow(client, uri), timeout, what)

    @property
    def resource_subscriptions(self) -> frozenset[str]:
        """The URIs this connection follows."""
        return frozenset(self._watch.uris)

    def resources(self, timeout: float = 10.0) -> list[types.Resource]:
        """The server's resources, every page."""
        return self._on_session(
            lambda client: _every_page(client.list_resources, "resources"),
            timeout,
            "list its resources",
        )

    def resource_templates(self, timeout: float = 10.0) -> list[types.ResourceTemplate]:
        """The server's resource templates (URIs with `{placeholders}`), every page."""
        return self._on_session(
            lambda client: _every_page(client.list_resource_templates, "resource_templates"),
            timeout,
            "list its resource templates",
        )

    def read_resource(self, uri: str, timeout: float = 10.0) -> list[Contents]:
        """What the resource at `uri` holds: text or blob contents, one or more."""
        if not isinstance(uri, str) or not uri:
            raise TypeError(f"read_resource: uri must be a non-empty string, got {uri!r}")

        async def read(client: Client) -> list[Contents]:
            return list((await client.read_resource(uri)).contents)

        return self._on_session(read, timeout, f"read the resource {_shown(uri)}")

    def prompts(self, timeout: float = 10.0) -> list[types.Prompt]:
        """The server's prompts (name, description, arguments), every page."""
        return self._on_session(
            lambda client: _every_page(client.list_prompts, "prompts"), timeout, "list its prompts"
        )

    def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None, timeout: float = 10.0
    ) -> types.GetPromptResult:
        """The prompt `name`, filled with `arguments` (strings, as MCP has them)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"get_prompt: name must be a non-empty string, got {name!r}")
        try:
            given: dict[str, str] = dict(arguments or {})
            strings = all(isinstance(k, str) and isinstance(v, str) for k, v in given.items())
        except (TypeError, ValueError):  # not a mapping, nor pairs
            strings = False
        if not strings:
            raise TypeError(
                "get_prompt: arguments must map strings to strings (as MCP has them), "
                f"got {type(arguments).__name__}"
            )

        async def got(client: Client) -> types.GetPromptResult:
            return await client.get_prompt(name, given)

        return self._on_session(got, timeout, f"give the prompt {name!r}")

    async def aresources(self, timeout: float = 10.0) -> list[types.Resource]:
        """Async twin of `resources`."""
        return await asyncio.to_thread(self.resources, timeout)

    async def aresource_templates(self, timeout: float = 10.0) -> list[types.ResourceTemplate]:
        """Async twin of `resource_templates`."""
        return await asyncio.to_thread(self.resource_templates, timeout)

    async def aread_resource(self, uri: str, timeout: float = 10.0) -> list[Contents]:
        """Async twin of `read_resource`."""
        return await asyncio.to_thread(self.read_resource, uri, timeout)

    async def asubscribe_resource(self, uri: str, timeout: float = 10.0) -> None:
        """Async twin of `subscribe_resource`."""
        await asyncio.to_thread(self.subscribe_resource, uri, timeout)

    async def aunsubscribe_resource(self, uri: str, timeout: float = 10.0) -> None:
        """Async twin of `unsubscribe_resource`."""
        await asyncio.to_thread(self.unsubscribe_resource, uri, timeout)

    async def aprompts(self, timeout: float = 10.0) -> list[types.Prompt]:
        """Async twin of `prompts`."""
        return await asyncio.to_thread(self.prompts, timeout)

    async def aget_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None, timeout: float = 10.0
    ) -> types.GetPromptResult:
        """Async twin of `get_prompt`."""
        return await asyncio.to_thread(self.get_prompt, name, arguments, timeout)
