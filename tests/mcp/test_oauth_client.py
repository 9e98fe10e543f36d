"""toolbus's MCP client against a server behind OAuth: `connect_http(url, auth=...)`.

The authorization server is built here from the MCP SDK's server-side auth
pieces (tests/mcp_servers/oauth.py); the protected server is toolbus's own
(`OAuthResource`, checking the JWTs that authorization server signs). The
"user" of the authorization code flow signs in at once: `authorize` follows
the authorization URL to its redirect.
"""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

pytest.importorskip("mcp")

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.conftest import wait_until
from tests.mcp_servers.oauth import AuthServer, Keys, serve
from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.mcp import (
    MCPConnectError,
    OAuthResource,
    TokenFile,
    aconnect_http,
    connect_http,
    http_app,
    oauth_authorization_code,
    oauth_client_credentials,
)

REDIRECT = "http://localhost:3000/callback"


def sign_in(url: str) -> str:
    """The user: signs in and consents at once; the redirect is where the browser lands."""
    response = httpx.get(url, follow_redirects=False, timeout=10)
    assert response.status_code in (302, 303, 307), response.text
    return response.headers["location"]


@dataclass
class World:
    auth: AuthServer
    url: str  # the protected MCP server
    runs: list[str]


@pytest.fixture
def world() -> Iterator[World]:
    keys = Keys()
    auth = AuthServer(keys)
    auth.register("agent", "s3cret", scope="notes:read notes:write")
    runs: list[str] = []
    registry = ToolRegistry()

    @registry.tool(read_only=True, scopes=["notes:read"])
    def read_note(name: str) -> str:
        """Read a note."""
        runs.append(name)
        return f"note {name}"

    @registry.tool(scopes=["notes:write"])
    def write_note(name: str) -> str:
        """Write a note."""
        runs.append(f"write {name}")
        return f"wrote {name}"

    with serve(auth.app, "auth-server") as issuer, Executor(registry) as executor:

        def app(base: str) -> Any:
            resource = OAuthResource(
                jwks=f"{issuer}/jwks", issuer=issuer, resource_url=f"{base}/mcp", jwks_refresh=0
            )
            return http_app(registry, executor, oauth=resource)

        with serve(app, "protected") as base:
            yield World(auth, f"{base}/mcp", runs)


def call_through(url: str, auth: Any, name: str = "read_note") -> Any:
    registry = ToolRegistry()
    with connect_http(url, auth=auth, connect_timeout=30) as server:
        server.register(registry, timeout=30)
        with Executor(registry) as executor:
            return executor.execute(ToolCall(name=name, arguments={"name": "a"}))


def test_the_authorization_code_flow_with_pkce(world: World) -> None:
    seen: list[str] = []

    def authorize(url: str) -> str:
        seen.append(url)
        return sign_in(url)

    auth = oauth_authorization_code(
        world.url, redirect_uri=REDIRECT, authorize=authorize, scopes=["notes:read"]
    )
    result = call_through(world.url, auth)
    assert result.ok, result
    assert result.output == "note a"
    assert world.runs == ["a"]
    assert world.auth.registrations == 1 and world.auth.authorizations == 1
    # PKCE (S256) and the resource indicator went to the authorization endpoint.
    assert len(seen) == 1
    assert "code_challenge_method=S256" in seen[0]
    assert "resource=" in seen[0]


async def test_an_async_authorize_callback(world: World) -> None:
    async def authorize(url: str) -> str:
        async with httpx.AsyncClient() as client:
            response = await client.get(url, follow_redirects=False)
        return response.headers["location"]

    auth = oauth_authorization_code(world.url, redirect_uri=REDIRECT, authorize=authorize)
    registry = ToolRegistry()
    async with await aconnect_http(world.url, auth=auth, connect_timeout=30) as server:
        server.register(registry)
        with Executor(registry) as executor:
            result = await executor.aexecute(ToolCall(name="read_note", arguments={"name": "a"}))
    assert result.ok, result
    assert world.auth.authorizations == 1


def test_client_credentials(world: World) -> None:
    auth = oauth_client_credentials(
        world.url, client_id="agent", client_secret="s3cret", issuer=world.auth.url,
        scopes=["notes:read"],
    )  # fmt: skip
    result = call_through(world.url, auth)
    assert result.ok, result
    assert world.auth.grants == 1 and world.auth.authorizations == 0


def test_a_wrong_client_secret_is_a_clear_connect_error(world: World) -> None:
    auth = oauth_client_credentials(
        world.url, client_id="agent", client_secret="wrong", issuer=world.auth.url
    )
    with pytest.raises(MCPConnectError) as raised:
        call_through(world.url, auth)
    text = str(raised.value)
    assert "401" in text or "OAuth" in text or "token" in text.lower(), text
    assert "wrong" not in text  # (the secret is not quoted)
    assert world.runs == []


def until_the_client_thinks_it_expired(auth: Any) -> None:
    """Tokens are refreshed when they expire, which takes time passing: wait
    for the moment the provider's own clock says so (a second here)."""
    expiry = auth.context.token_expiry_time
    assert expiry is not None
    wait_until(lambda: time.time() > expiry, timeout=10)


def test_tokens_are_refreshed(world: World) -> None:
    world.auth.expires_in = 1  # (the JWT itself is valid for minutes)
    auth = oauth_authorization_code(world.url, redirect_uri=REDIRECT, authorize=sign_in)
    registry = ToolRegistry()
    with connect_http(world.url, auth=auth, connect_timeout=30) as server:
        server.register(registry, timeout=30)
        with Executor(registry) as executor:
            assert executor.execute(ToolCall(name="read_note", arguments={"name": "a"})).ok
            until_the_client_thinks_it_expired(auth)
            assert executor.execute(ToolCall(name="read_note", arguments={"name": "b"})).ok
    assert world.auth.refreshes == 1
    assert world.auth.authorizations == 1  # the user signed in once


def test_a_revoked_refresh_token_ends_in_a_clear_error(world: World) -> None:
    world.auth.expires_in = 1
    sign_ins: list[str] = []

    def authorize(url: str) -> str:
        sign_ins.append(url)
        if len(sign_ins) > 1:  # the user is away: nobody signs in again
            return f"{REDIRECT}?error=access_denied&error_description=nobody+there"
        return sign_in(url)

    auth = oauth_authorization_code(world.url, redirect_uri=REDIRECT, authorize=authorize)
    registry = ToolRegistry()
    with connect_http(world.url, auth=auth, connect_timeout=30) as server:
        server.register(registry, timeout=30)
        with Executor(registry) as executor:
            assert executor.execute(ToolCall(name="read_note", arguments={"name": "a"})).ok
            world.auth.revoke_refresh_tokens()
            until_the_client_thinks_it_expired(auth)
            result = executor.execute(ToolCall(name="read_note", arguments={"name": "b"}))
    assert not result.ok
    assert "access_denied" in (result.error or ""), result.error
    assert world.runs == ["a"]


def test_a_token_file_keeps_the_sign_in(world: World, tmp_path: Path) -> None:
    tokens = TokenFile(tmp_path / "agent" / "tokens.json")
    for _ in range(2):  # the agent, then the agent restarted
        auth = oauth_authorization_code(
            world.url, redirect_uri=REDIRECT, authorize=sign_in, tokens=tokens
        )
        assert call_through(world.url, auth).ok
    assert world.auth.authorizations == 1 and world.auth.registrations == 1
    saved = json.loads(tokens.path.read_text())
    assert set(saved["servers"][world.url]) == {"tokens", "client"}
    assert stat.S_IMODE(tokens.path.stat().st_mode) == 0o600


def test_token_files_of_one_path_take_turns(tmp_path: Path) -> None:
    """Two `TokenFile`s of one path (one per provider, as the docs write them),
    written from many threads at once: no server's entry is lost."""
    import asyncio
    import threading

    from mcp.shared.auth import OAuthToken

    path = tmp_path / "tokens.json"
    files = [TokenFile(path), TokenFile(str(path))]
    start = threading.Barrier(40)

    def write(n: int) -> None:
        entry = files[n % 2].for_server(f"http://server-{n}/mcp")
        start.wait()
        asyncio.run(entry.set_tokens(OAuthToken(access_token=f"t{n}", token_type="Bearer")))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(json.loads(path.read_text())["servers"]) == 40


def test_a_token_file_that_cannot_be_read_starts_over(world: World, tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text("{not json")
    auth = oauth_authorization_code(
        world.url, redirect_uri=REDIRECT, authorize=sign_in, tokens=TokenFile(path)
    )
    assert call_through(world.url, auth).ok
    assert json.loads(path.read_text())["servers"][world.url]["tokens"]["access_token"]


def test_one_token_file_for_two_servers_keeps_their_tokens_apart(
    world: World, tmp_path: Path
) -> None:
    """Server A's token never goes to server B (B could replay it to A)."""
    seen: list[str] = []

    async def record(request: Request) -> Response:
        seen.append(request.headers.get("authorization", ""))
        return JSONResponse(
            {"error": "invalid_token"},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )

    catch_all = Starlette(routes=[Route("/{path:path}", record, methods=["GET", "POST"])])
    tokens = TokenFile(tmp_path / "tokens.json")
    first = oauth_authorization_code(
        world.url, redirect_uri=REDIRECT, authorize=sign_in, tokens=tokens
    )
    assert call_through(world.url, first).ok
    granted = json.loads(tokens.path.read_text())["servers"][world.url]["tokens"]["access_token"]
    with serve(lambda base: catch_all, "other") as other:
        second = oauth_authorization_code(
            f"{other}/mcp", redirect_uri=REDIRECT, authorize=sign_in, tokens=tokens
        )
        with pytest.raises(MCPConnectError):
            call_through(f"{other}/mcp", second)
    assert seen and all(granted not in h for h in seen)


def test_an_unreachable_authorization_server_is_named(tmp_path: Path) -> None:
    """The MCP server is up; the authorization server it names is not: the
    error says the OAuth flow failed, not that the server did."""
    keys = Keys()
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(keys.jwks()))
    gone = "http://127.0.0.1:9"  # (the discard port: nothing listens)
    with Executor(ToolRegistry()) as executor:

        def app(base: str) -> Any:
            resource = OAuthResource(jwks=jwks, issuer=gone, resource_url=f"{base}/mcp")
            return http_app(ToolRegistry(), executor, oauth=resource)

        with serve(app, "protected") as base:
            auth = oauth_client_credentials(
                f"{base}/mcp", client_id="agent", client_secret="s3cret", issuer=gone
            )
            with pytest.raises(MCPConnectError) as raised:
                connect_http(f"{base}/mcp", auth=auth, connect_timeout=10)
    text = str(raised.value)
    assert "the OAuth flow failed" in text and "127.0.0.1:9" in text, text
    assert "s3cret" not in text


async def test_a_token_without_the_tools_scope_is_stepped_up(world: World) -> None:
    """The user consented to reading only, so `tools/list` offers only
    reading; a client that calls the writing tool anyway gets 403
    insufficient_scope naming the scope, and the SDK's provider asks the user
    again (the MCP client here is the SDK's own: toolbus's calls only what
    it was offered)."""
    sign_ins: list[str] = []

    def authorize(url: str) -> str:
        sign_ins.append(url)
        world.auth.consent = None if len(sign_ins) > 1 else {"notes:read"}
        return sign_in(url)

    auth = oauth_authorization_code(world.url, redirect_uri=REDIRECT, authorize=authorize)
    async with (
        httpx2.AsyncClient(auth=auth, timeout=30) as http,
        Client(streamable_http_client(world.url, http_client=http)) as mcp,
    ):
        listed = await mcp.list_tools()
        assert [t.name for t in listed.tools] == ["read_note"]
        wrote = await mcp.call_tool("write_note", {"name": "b"})
    assert not wrote.is_error, wrote
    assert len(sign_ins) == 2
    assert "notes%3Awrite" in sign_ins[1]
    assert world.runs == ["write b"]


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: oauth_authorization_code("ftp://x/mcp", redirect_uri=REDIRECT, authorize=sign_in),
         "server_url must be an http"),
        (lambda: oauth_authorization_code("http://x/mcp", redirect_uri="x", authorize=sign_in),
         "redirect_uri must be an http"),
        (lambda: oauth_authorization_code("http://x/mcp", redirect_uri=REDIRECT, authorize="no"),
         "authorize must be a function"),
        (lambda: oauth_client_credentials("http://x/mcp", client_id="", client_secret="s",
                                          issuer="http://as"),
         "client_id must be a non-empty string"),
        (lambda: oauth_client_credentials("http://x/mcp", client_id="a", client_secret="s",
                                          issuer="as.example"),
         "issuer must be an http"),
        (lambda: oauth_client_credentials("http://x/mcp", client_id="a", client_secret="s",
                                          issuer="http://as", scopes="a b"),
         "scopes must be a sequence"),
        (lambda: oauth_client_credentials("http://x/mcp", client_id="a", client_secret="s",
                                          issuer="http://as", tokens=object()),
         "tokens must be a TokenStorage"),
        (lambda: connect_http("http://x/mcp", auth="token"), "auth must be an httpx Auth"),
        (lambda: connect_http("http://x/mcp", headers={"Authorization": "Bearer t"},
                              auth=oauth_client_credentials("http://x/mcp", client_id="a",
                                                            client_secret="s",
                                                            issuer="http://as")),
         "both given"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_when_given(make: Callable[[], object], words: str) -> None:
    with pytest.raises((TypeError, ValueError), match=words):
        make()
