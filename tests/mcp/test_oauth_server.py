"""The HTTP server as an OAuth resource server: every token checked, tools by scope.

Keys and tokens are made here (tests/mcp_servers/oauth.py); the server is
toolbus's own app on uvicorn, in this process, so the tests count what ran.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

pytest.importorskip("mcp")

from tests.mcp.test_server_http import start, stop
from tests.mcp_servers.oauth import Keys, claims, serve
from toolbus import Executor, ToolRegistry
from toolbus.mcp import OAuthResource, http_app
from toolbus.tools import sequence

ISSUER = "https://auth.example.test"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
ROOT = Path(__file__).resolve().parents[2]


class Counted:
    """The registry served: what each tool ran, counted."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {"echo": 0, "read_files": 0, "write_files": 0}
        self.lock = threading.Lock()
        self.registry = ToolRegistry()
        reg = self.registry

        @reg.tool(read_only=True)
        def echo(text: str) -> str:
            """Echo the text."""
            self._ran("echo")
            return text

        @reg.tool(read_only=True, scopes=["files:read"])
        def read_files(path: str) -> str:
            """Read a file."""
            self._ran("read_files")
            return f"contents of {path}"

        @reg.tool(scopes=["files:read", "files:write"])
        def write_files(path: str) -> str:
            """Write a file."""
            self._ran("write_files")
            return f"wrote {path}"

        # A sequence takes on its steps' scopes; one whose step is named is
        # held to the caller's token when the step runs.
        reg.register(sequence("write_then_echo", [write_files, "echo"]))
        reg.register(sequence("echo_then_write", [echo, "write_files"]))

    def _ran(self, name: str) -> None:
        with self.lock:
            self.runs[name] += 1


class Protected:
    """A served registry behind OAuth, and what a test needs to talk to it."""

    def __init__(self, url: str, keys: Keys, tools: Counted, jwks: Path) -> None:
        self.url = url
        self.keys = keys
        self.tools = tools
        self.jwks = jwks

    def token(self, scope: str = "", **overrides: Any) -> str:
        kid = overrides.pop("kid", "rsa-1")
        return self.keys.mint({**claims(ISSUER, self.url, scope), **overrides}, kid=kid)

    def post(self, token: str | None, body: Any, session: str | None = None) -> httpx.Response:
        headers = dict(ACCEPT)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if session is not None:
            headers["Mcp-Session-Id"] = session
            headers["Mcp-Protocol-Version"] = "2025-11-25"
        return httpx.post(self.url, json=body, headers=headers, timeout=30)

    def session(self, token: str) -> str:
        """An initialized session for `token`: its id."""
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        }
        response = self.post(token, init)
        assert response.status_code == 200, response.text
        session = response.headers["mcp-session-id"]
        done = self.post(token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        assert done.status_code == 202, done.text
        return session

    def call(
        self, token: str, session: str, name: str, arguments: dict[str, Any]
    ) -> httpx.Response:
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        return self.post(token, body, session)

    def listed(self, token: str) -> list[str]:
        session = self.session(token)
        response = self.post(token, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, session)
        assert response.status_code == 200, response.text
        return [t["name"] for t in rpc_result(response)["tools"]]


def rpc_result(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result of a response, JSON or one SSE event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        message = json.loads(data[-1])
    else:
        message = response.json()
    assert "result" in message, message
    result: dict[str, Any] = message["result"]
    return result


def hs256(header: dict[str, Any], payload: dict[str, Any], secret: bytes) -> str:
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signed = f"{part(json.dumps(header).encode())}.{part(json.dumps(payload).encode())}"
    mac = hmac.new(secret, signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{part(mac)}"


def challenge(response: httpx.Response) -> str:
    return response.headers.get("www-authenticate", "")


@pytest.fixture
def protected(tmp_path: Path) -> Iterator[Protected]:
    keys = Keys()
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(keys.jwks()))
    tools = Counted()
    executor = Executor(tools.registry)

    def app(base: str) -> Any:
        resource = OAuthResource(
            jwks=jwks, issuer=ISSUER, resource_url=f"{base}/mcp", leeway=5, jwks_refresh=0
        )
        return http_app(tools.registry, executor, oauth=resource)

    try:
        with serve(app) as base:
            yield Protected(f"{base}/mcp", keys, tools, jwks)
    finally:
        executor.close()


def test_a_valid_token_lists_and_calls(protected: Protected) -> None:
    token = protected.token("files:read")
    session = protected.session(token)
    response = protected.call(token, session, "read_files", {"path": "/a"})
    assert response.status_code == 200
    assert rpc_result(response)["content"][0]["text"] == "contents of /a"
    assert protected.tools.runs["read_files"] == 1


@pytest.mark.parametrize(
    "case",
    ["none", "expired", "not yet valid", "wrong audience", "wrong issuer", "bad signature",
     "unknown key", "no expiry", "no subject", "HS256 with the public key", "alg none",
     "garbage"],
)  # fmt: skip
def test_a_refused_token_gets_401_and_runs_nothing(protected: Protected, case: str) -> None:
    now = int(time.time())
    token: str | None
    if case == "none":
        token = None
    elif case == "expired":
        token = protected.token(exp=now - 60)  # beyond the 5 s leeway
    elif case == "not yet valid":
        token = protected.token(nbf=now + 60)
    elif case == "wrong audience":
        token = protected.token(aud="http://127.0.0.1:1/other")
    elif case == "wrong issuer":
        token = protected.token(iss="https://evil.example.test")
    elif case == "bad signature":
        impostor = Keys()  # another key under the same key id
        token = impostor.mint(claims(ISSUER, protected.url), kid="rsa-1")
    elif case == "unknown key":
        protected.keys.add("rsa-9", "RS256")  # not in the JWKS file
        token = protected.token(kid="rsa-9")
    elif case == "no expiry":
        body = claims(ISSUER, protected.url)
        del body["exp"]
        token = protected.keys.mint(body)
    elif case == "no subject":
        body = claims(ISSUER, protected.url)
        del body["sub"]
        token = protected.keys.mint(body)
    elif case == "HS256 with the public key":
        # The classic confusion: the published key used as an HMAC secret
        # (made by hand: PyJWT refuses to make such a token).
        public = json.dumps(protected.keys.jwks()["keys"][0]).encode()
        token = hs256({"alg": "HS256", "kid": "rsa-1"}, claims(ISSUER, protected.url), public)
    elif case == "alg none":
        token = jwt.encode(claims(ISSUER, protected.url), None, algorithm="none",
                           headers={"kid": "rsa-1"})  # fmt: skip
    else:
        token = "not.a.jwt"
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}},
    }
    response = protected.post(token, call)
    assert response.status_code == 401
    header = challenge(response)
    assert header.startswith("Bearer ")
    metadata = protected.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    assert f'resource_metadata="{metadata}"' in header
    assert protected.tools.runs == {"echo": 0, "read_files": 0, "write_files": 0}


def test_a_missing_scope_gets_403_and_runs_nothing(protected: Protected) -> None:
    token = protected.token("files:read")
    session = protected.session(token)
    response = protected.call(token, session, "write_files", {"path": "/a"})
    assert response.status_code == 403
    header = challenge(response)
    assert 'error="insufficient_scope"' in header
    # What to ask for: what it has, and what it lacks.
    assert 'scope="files:read files:write"' in header
    assert "resource_metadata=" in header
    assert protected.tools.runs["write_files"] == 0
    # The same session with a token that has the scope: the call runs.
    better = protected.token("files:read files:write")
    assert protected.call(better, session, "write_files", {"path": "/a"}).status_code == 200
    assert protected.tools.runs["write_files"] == 1


def test_tools_list_offers_a_token_what_it_may_call(protected: Protected) -> None:
    assert protected.listed(protected.token()) == ["echo", "echo_then_write"]
    assert protected.listed(protected.token("files:read")) == [
        "echo", "read_files", "echo_then_write",
    ]  # fmt: skip
    assert protected.listed(protected.token("files:read files:write")) == [
        "echo", "read_files", "write_files", "write_then_echo", "echo_then_write",
    ]  # fmt: skip


def test_a_sequence_runs_no_step_the_token_may_not_call(protected: Protected) -> None:
    token = protected.token()
    session = protected.session(token)
    listed = protected.call(token, session, "write_then_echo", {"path": "/etc/x"})
    assert listed.status_code == 403  # its steps' scopes are its own
    named = protected.call(token, session, "echo_then_write", {"text": "/etc/x"})
    assert named.status_code == 200
    result = rpc_result(named)
    assert (
        result["isError"] and "needs scope files:read files:write" in result["content"][0]["text"]
    )
    assert protected.tools.runs["write_files"] == 0 and protected.tools.runs["echo"] == 1


def test_an_unknown_tool_names_only_tools_the_token_is_offered(protected: Protected) -> None:
    token = protected.token()
    session = protected.session(token)
    text = rpc_result(protected.call(token, session, "write_file", {"path": "/a"}))["content"][0]
    assert "Unknown tool 'write_file'" in text["text"]
    assert "write_files" not in text["text"] and "read_files" not in text["text"]


@pytest.mark.parametrize(
    "grant",
    [{"scope": "files:read"}, {"scp": "files:read"}, {"scp": ["files:read"]},
     {"scope": ["files:read"]}],
)  # fmt: skip
def test_scopes_in_either_claim_and_either_form(
    protected: Protected, grant: dict[str, Any]
) -> None:
    token = protected.token(**grant)
    assert "read_files" in protected.listed(token)


def test_a_body_only_a_lenient_parser_reads_is_checked_too(protected: Protected) -> None:
    token = protected.token()
    session = protected.session(token)
    body = (
        '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "write_files", '
        '"arguments": {"path": "/a"}, "_meta": {"x": NaN}}}'
    )
    headers = {**ACCEPT, "Authorization": f"Bearer {token}", "Mcp-Session-Id": session,
               "Mcp-Protocol-Version": "2025-11-25"}  # fmt: skip
    response = httpx.post(protected.url, content=body, headers=headers, timeout=30)
    assert response.status_code == 403
    deep = body.replace('{"x": NaN}', "[" * 5000 + "]" * 5000)  # beyond both parsers
    assert httpx.post(protected.url, content=deep, headers=headers, timeout=30).status_code == 400
    assert protected.tools.runs["write_files"] == 0


def test_protected_resource_metadata(protected: Protected) -> None:
    base = protected.url.removesuffix("/mcp")
    response = httpx.get(f"{base}/.well-known/oauth-protected-resource/mcp", timeout=10)
    assert response.status_code == 200
    metadata = response.json()
    assert metadata["resource"] == protected.url
    assert metadata["authorization_servers"] == [ISSUER]
    assert metadata["scopes_supported"] == ["files:read", "files:write"]


def test_a_rotated_key_is_found_after_the_jwks_is_read_again(protected: Protected) -> None:
    protected.keys.add("ec-2", "ES256")
    token = protected.token(kid="ec-2")
    assert protected.post(token, {"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 401
    protected.jwks.write_text(json.dumps(protected.keys.jwks()))  # the key is published
    assert protected.session(token)  # initialized with the new key


def test_required_scopes(tmp_path: Path) -> None:
    keys = Keys()
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(keys.jwks()))
    tools = Counted()
    with Executor(tools.registry) as executor:

        def app(base: str) -> Any:
            resource = OAuthResource(
                jwks=str(jwks), issuer=ISSUER, resource_url=f"{base}/mcp",
                required_scopes=("mcp",),
            )  # fmt: skip
            return http_app(tools.registry, executor, oauth=resource)

        with serve(app) as base:
            served = Protected(f"{base}/mcp", keys, tools, jwks)
            refused = served.post(
                served.token("files:read"), {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            )
            assert refused.status_code == 403
            assert 'scope="mcp files:read"' in challenge(refused)
            token = served.token("mcp")
            assert (
                served.call(token, served.session(token), "echo", {"text": "hi"}).status_code == 200
            )


def test_the_jwks_from_a_url_is_read_again_at_most_once_per_refresh(
    protected: Protected, caplog: pytest.LogCaptureFixture
) -> None:
    """Served over HTTP, with a refresh floor: made-up key ids cannot make the
    server fetch the set once per request."""
    keys = protected.keys
    fetched: list[float] = []

    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def jwks(request: Any) -> JSONResponse:
        fetched.append(time.monotonic())
        return JSONResponse(keys.jwks())

    tools = Counted()
    with (
        Executor(tools.registry) as executor,
        serve(lambda base: Starlette(routes=[Route("/jwks", jwks)])) as keys_at,
    ):

        def app(base: str) -> Any:
            resource = OAuthResource(
                jwks=f"{keys_at}/jwks", issuer=ISSUER, resource_url=f"{base}/mcp",
                jwks_refresh=3600,
            )  # fmt: skip
            return http_app(tools.registry, executor, oauth=resource)

        with serve(app) as base, caplog.at_level(logging.INFO, "toolbus.mcp"):
            served = Protected(f"{base}/mcp", keys, tools, protected.jwks)
            assert served.session(served.token())  # the first read
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            tokens = [
                keys.mint(claims(ISSUER, served.url), headers={"kid": f"made-up-{n}"})
                for n in range(5)
            ]
            for token in tokens:
                assert served.post(token, ping).status_code == 401
            assert len(fetched) == 1
            # Why: logged, never the token.
            assert "no key with id 'made-up-0'" in caplog.text
            assert not any(token in caplog.text for token in tokens)


def test_options_are_checked_when_made(tmp_path: Path) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(Keys().jwks()))
    good = {"jwks": jwks, "issuer": ISSUER, "resource_url": "http://127.0.0.1:1/mcp"}
    for bad, words in [
        ({"jwks": tmp_path / "missing.json"}, "no JWKS file"),
        ({"issuer": "auth.example"}, "issuer must be an http(s) URL"),
        ({"resource_url": "http://x/mcp#frag"}, "fragment"),
        ({"required_scopes": ("a b",)}, "not a scope name"),
        ({"leeway": -1}, "leeway"),
        ({"jwks_refresh": float("nan")}, "jwks_refresh"),
        ({"resource_url": "https://r:99999/mcp"}, "not a valid URL"),
        ({"resource_url": 'https://r/m"cp'}, "plain URL characters"),
        ({"issuer": "https://a\r\nb"}, "plain URL characters"),
        ({"resource_url": "http://[::1/mcp"}, "not a valid URL"),
    ]:
        with pytest.raises(
            (TypeError, ValueError), match=words.replace("(", r"\(").replace(")", r"\)")
        ):
            OAuthResource(**{**good, **bad})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="both given"):
        http_app(ToolRegistry(), None, token="t", oauth=OAuthResource(**good))  # type: ignore[arg-type]


def test_a_jwks_file_without_keys_is_refused_when_given(tmp_path: Path) -> None:
    for text, words in [("", "cannot be read"), ('{"keys": []}', "holds no key"),
                        ('{"keys": [{"kty": "nope"}]}', "holds no key")]:  # fmt: skip
        jwks = tmp_path / "jwks.json"
        jwks.write_text(text)
        with pytest.raises(ValueError, match=words):
            OAuthResource(jwks=jwks, issuer=ISSUER, resource_url="http://127.0.0.1:1/mcp")


def test_a_jwks_urls_credentials_are_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from toolbus.mcp._jwt import JwksSource

    source = JwksSource("http://reader:PW-SECRET@127.0.0.1:1/jwks?api_key=KEY-SECRET")
    with caplog.at_level(logging.WARNING, "toolbus.mcp"):
        asyncio.run(source.warm())
    assert "could not be read" in caplog.text
    assert "PW-SECRET" not in caplog.text and "KEY-SECRET" not in caplog.text
    assert "SECRET" not in repr(source)


def test_the_cli_serves_a_resource_server(tmp_path: Path) -> None:
    keys = Keys()
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(keys.jwks()))
    resource = "https://tools.example.test/mcp"  # as clients reach it (behind a proxy)
    registry = "tests.mcp_servers.registry_module:served"
    cli = ["-m", "toolbus", "mcp", "serve", registry, "--http", "--port", "0"]
    oauth = ["--jwks", str(jwks), "--issuer", ISSUER, "--resource-url", resource,
             "--required-scope", "mcp"]  # fmt: skip
    proc, url = start([*cli, *oauth])
    try:
        served = Protected(url, keys, Counted(), jwks)
        good = keys.mint(claims(ISSUER, resource, "mcp"))
        assert served.session(good)
        assert served.post(None, {"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 401
        wrong = keys.mint(claims(ISSUER, url, "mcp"))  # its own address is not the resource
        assert served.post(wrong, {"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 401
        metadata = httpx.get(url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"))
        assert metadata.json()["resource"] == resource
    finally:
        assert stop(proc) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--http", "--issuer", ISSUER], "--issuer needs --jwks"),
        (["--http", "--required-scope", "mcp"], "--required-scope needs --jwks"),
        (["--jwks", "keys.json"], "--jwks needs --http"),
        (["--http", "--jwks", "{jwks}"], "--jwks needs --issuer and --resource-url"),
        (["--http", "--jwks", "{jwks}", "--issuer", ISSUER], "needs --issuer and --resource-url"),
        (["--http", "--jwks", "{dir}/missing.json", "--issuer", ISSUER, "--resource-url",
          "http://127.0.0.1/mcp"], "no JWKS file at"),
        (["--http", "--jwks", "{jwks}", "--issuer", "auth.example", "--resource-url",
          "http://127.0.0.1/mcp"], "issuer must be an http(s) URL"),
        (["--http", "--jwks", "{jwks}", "--issuer", ISSUER, "--resource-url",
          "http://127.0.0.1/mcp", "--required-scope", 'a"b'], "not a scope name"),
        (["--http", "--jwks", "{jwks}", "--issuer", ISSUER, "--resource-url",
          "http://127.0.0.1/mcp", "--token-env", "T"], "--token-env and --jwks both given"),
    ],
)  # fmt: skip
def test_the_cli_refuses(tmp_path: Path, args: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from toolbus.cli import app

    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(Keys().jwks()))
    given = [a.format(jwks=jwks, dir=tmp_path) for a in args]
    registry = "tests.mcp_servers.registry_module:served"
    result = CliRunner().invoke(app, ["mcp", "serve", registry, *given], env={"T": "x" * 20})
    assert result.exit_code == 2, result.output
    assert message in result.output, result.output
    assert result.output.startswith("toolbus mcp serve: ")
