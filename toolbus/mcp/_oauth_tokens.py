"""Where an OAuth client keeps its tokens: one entry per MCP server.

`TokenFile` (a JSON file) and `MemoryTokens` are stores; the builders of
`_oauth_client.py` hand a provider its server's entry (`for_server`), so one
store serves several servers and never gives one server another's token (a
token sent to the wrong server could be replayed by it). `_Preregistered`
stands a client registered beforehand in front of any storage.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, ClassVar

import anyio
from mcp.client.auth import TokenStorage
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import ValidationError

__all__ = ["MemoryTokens", "TokenFile", "preregistered"]

log = logging.getLogger("toolbus.mcp")


class _Store:
    """Tokens and registered clients, one entry per MCP server.

    The builders give a provider the entry of its server (`for_server`), so
    one store serves several servers and never hands one server's token to
    another (a token sent to the wrong server could be replayed by it). Used
    directly as a `TokenStorage`, a store is one entry of its own."""

    _FIELDS: ClassVar[dict[str, Any]] = {
        "tokens": OAuthToken,
        "client": OAuthClientInformationFull,
    }

    def for_server(self, server_url: str) -> TokenStorage:
        """The entry of the server at `server_url` (a trailing slash aside)."""
        return _Entry(self, server_url.rstrip("/"))

    async def _aget(self, server: str, field: str) -> Any:
        raise NotImplementedError

    async def _aset(self, server: str, field: str, value: Any) -> None:
        raise NotImplementedError

    async def get_tokens(self) -> OAuthToken | None:
        return await self.for_server("").get_tokens()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self.for_server("").set_tokens(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return await self.for_server("").get_client_info()

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self.for_server("").set_client_info(client_info)


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    """One lock per file, however many `TokenFile`s name it."""
    key = os.path.realpath(path)
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(key, threading.Lock())


class _Entry:
    """One server's entry of a store, as the SDK's `TokenStorage`."""

    def __init__(self, store: _Store, server: str) -> None:
        self._store = store
        self._server = server

    async def get_tokens(self) -> OAuthToken | None:
        found: OAuthToken | None = await self._store._aget(self._server, "tokens")
        return found

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._store._aset(self._server, "tokens", tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        found: OAuthClientInformationFull | None = await self._store._aget(self._server, "client")
        return found

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._store._aset(self._server, "client", client_info)


class MemoryTokens(_Store):
    """Tokens and registered clients in memory, per server: they last as long as it does."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Any] = {}

    async def _aget(self, server: str, field: str) -> Any:
        return self._entries.get((server, field))

    async def _aset(self, server: str, field: str, value: Any) -> None:
        self._entries[(server, field)] = value


class TokenFile(_Store):
    """Tokens and registered clients in one JSON file, per server (so a
    restarted agent neither registers again nor asks the user again while
    its refresh token lasts).

    The file is readable by its owner only (0600) and replaced whole on each
    write, so a crash never leaves half of it. Writes from this process take
    turns, however many `TokenFile`s name the file (two processes writing
    one file at once may lose one's update: give each its own file). A file
    that cannot be read as one is treated as empty (logged, without its
    content): the flow starts over rather than failing the connection.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, str | os.PathLike) or not str(path).strip():
            raise TypeError("TokenFile: path must be a non-empty path")
        self.path = Path(path).expanduser()
        self._lock = _lock_for(self.path)

    def __repr__(self) -> str:
        return f"TokenFile({str(self.path)!r})"

    async def _aget(self, server: str, field: str) -> Any:
        return await anyio.to_thread.run_sync(self._read, server, field)

    async def _aset(self, server: str, field: str, value: Any) -> None:
        await anyio.to_thread.run_sync(self._write, server, field, value)

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning(
                "token file %s is unreadable (%s): starting over", self.path, type(e).__name__
            )
            return {}
        servers = data.get("servers") if isinstance(data, dict) else None
        return servers if isinstance(servers, dict) else {}

    def _read(self, server: str, field: str) -> Any:
        with self._lock:
            entry = self._load().get(server)
        value = entry.get(field) if isinstance(entry, dict) else None
        if value is None:
            return None
        try:
            return self._FIELDS[field].model_validate(value)
        except ValidationError:
            log.warning("token file %s: a stored %s is not valid: starting over", self.path, field)
            return None

    def _write(self, server: str, field: str, value: Any) -> None:
        with self._lock:
            servers = self._load()
            entry = servers.get(server)
            entry = entry if isinstance(entry, dict) else {}
            entry[field] = value.model_dump(mode="json", exclude_none=True)
            servers[server] = entry
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:  # mkstemp: mode 0600
                    json.dump({"servers": servers}, out)
                os.replace(temp, self.path)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise


class _Preregistered:
    """A storage whose client is the one registered beforehand."""

    def __init__(self, storage: TokenStorage, client: OAuthClientInformationFull) -> None:
        self._storage = storage
        self._client = client

    async def get_tokens(self) -> OAuthToken | None:
        return await self._storage.get_tokens()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._storage.set_tokens(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info


def preregistered(
    storage: TokenStorage,
    client_id: str | None,
    client_secret: str | None,
    metadata: OAuthClientMetadata,
) -> TokenStorage:
    if client_id is None:
        return storage
    client = OAuthClientInformationFull(
        client_id=client_id,
        client_secret=client_secret,
        redirect_uris=metadata.redirect_uris,
        grant_types=metadata.grant_types,
        response_types=metadata.response_types,
        token_endpoint_auth_method="client_secret_basic" if client_secret else "none",
    )
    return _Preregistered(storage, client)
