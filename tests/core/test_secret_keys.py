"""Secrets by name (`SecretKeys`, `Executor(secret_keys=)`) and by type (`Tool.secret_paths`,
`mask_paths`): what is masked, and that a typed secret never escapes, whatever the masker."""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any

import pytest
from pydantic import BaseModel, SecretBytes, SecretStr

from tests.conftest import MakeExecutor
from toolbus import (
    Executor,
    RetryPolicy,
    Tool,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResult,
    bus,
    tool,
)
from toolbus.masking import MASK, SecretKeys, is_secret_key, mask_arguments, mask_paths

# -- names -------------------------------------------------------------------------------

MASKED_NAMES = [
    # the names that used to slip through
    "pwd", "auth", "jwt", "session_id", "access_key", "passphrase", "dsn", "database_url",
    "openai_key",
    # short words as whole keys or last words, in any spelling
    "api_key", "apiKey", "x-api-key", "X-API-KEY", "APIKey", "AUTH", "user_pwd", "userPwd",
    "sessionId", "SESSION_ID", "key", "public_key", "basic_auth", "proxy-auth", "id_jwt",
    "sentry_dsn", "api_key_2", "token1",
    # words matched anywhere
    "token", "refresh-token", "client_secret", "Authorization", "bearer_token", "Set-Cookie",
    "credentials", "private_key", "passwd", "db_password", "PassWord", "awsAccessKeyId",
    "DATABASE_URL", "connection_string", "x-auth-token", "authToken",
]  # fmt: skip

PLAIN_NAMES = [
    "author", "authors", "oauth_scope", "oauth", "keyboard", "monkey", "keys_count",
    "key_name", "keyword", "turkey_breed", "city", "name", "query", "user", "username",
    "session", "id", "", "pass", "api", "authority", "pwdx", "jwt_issuer", "dsn_host",
    "authentic", "donkey_kong",
]  # fmt: skip


@pytest.mark.parametrize("name", MASKED_NAMES)
def test_secret_names_are_masked(name: str) -> None:
    assert is_secret_key(name) is True
    masked, hidden = mask_arguments({name: "Zq-value-1234", "city": "Oslo"})
    assert masked == {name: MASK, "city": "Oslo"}
    assert hidden == ["Zq-value-1234"]


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_names_are_not_masked(name: str) -> None:
    assert is_secret_key(name) is False
    args = {name: "visible"}
    assert mask_arguments(args) == (args, [])


def test_extra_secret_keys_follow_the_same_rules() -> None:
    keys = SecretKeys(["customer_ssn", "pin", "X-Id"])
    for name in ["customer_ssn", "customerSsn", "CUSTOMER-SSN-2", "old_customer_ssn_value"]:
        assert keys.is_secret(name), name  # long word: anywhere
    for name in ["pin", "card_pin", "cardPin", "PIN", "x-id", "xId", "home_x_id"]:
        assert keys.is_secret(name), name  # short word: whole key or last words
    for name in ["spinner", "pin_code_hint", "id", "xid", "x_id_hint", 7, None]:
        assert not keys.is_secret(name), name
    # The defaults still apply, and other executors' keys are not affected.
    assert keys.is_secret("api_key")
    assert not is_secret_key("customer_ssn")
    masked, hidden = mask_arguments({"card_pin": 1234, "n": 1}, keys)
    assert (masked, hidden) == ({"card_pin": MASK, "n": 1}, ["1234"])


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ("pin", TypeError),  # one string, not a list of names
        (5, TypeError),
        ([1], TypeError),
        (["ok", b"bytes"], TypeError),
        (["--"], ValueError),
    ],
)
def test_secret_keys_are_validated(extra: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="secret_keys"):
        SecretKeys(extra)
    with pytest.raises(error, match="secret_keys"):
        Executor(ToolRegistry(), secret_keys=extra)


def test_secret_keys_cannot_be_combined_with_a_masker() -> None:
    with pytest.raises(ValueError, match="secret_keys"):
        Executor(ToolRegistry(), secret_keys=["pin"], masker=lambda call: {})


def test_executor_secret_keys_mask_events_and_scrub_results(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool
    def charge(card_pin: str, amount: int) -> str:
        return f"charged {amount} with pin {card_pin}"

    ex = make_executor(reg, secret_keys=["pin"])
    plain = make_executor(reg)
    with bus.Recorder(bus.EXECUTING) as rec:
        r = ex.execute(ToolCall(name="charge", arguments={"card_pin": "Zq9876", "amount": 5}))
        other = plain.execute(
            ToolCall(name="charge", arguments={"card_pin": "Zq9876", "amount": 5})
        )
        ex.drain_events()
        plain.drain_events()
    assert r.output == "charged 5 with pin ***"
    assert other.output == "charged 5 with pin Zq9876"  # only that executor's keys
    shown = {e.call_id: e.arguments for e in rec.of(bus.EXECUTING)}
    assert shown[r.call_id] == {"card_pin": MASK, "amount": 5}
    assert shown[other.call_id] == {"card_pin": "Zq9876", "amount": 5}


# -- types: which paths a tool's schema marks secret ----------------------------------------


class Login(BaseModel):
    user: str
    password: SecretStr


class Node(BaseModel):
    label: str
    token_value: SecretStr | None = None
    children: list[Node] = []


def test_function_tool_secret_paths_from_type_hints() -> None:
    @tool
    def connect(
        blob: SecretStr,
        maybe: SecretBytes | None,
        login: Login,
        many: list[SecretStr],
        by_name: dict[str, SecretStr],
        host: str = "h",
    ) -> None:
        return None

    assert set(connect.secret_paths) == {
        ("blob",),
        ("maybe",),
        ("login", "password"),
        ("many", None),
        ("by_name", None),
    }


def test_recursive_models_terminate() -> None:
    @tool
    def walk(tree: Node) -> None:
        return None

    assert ("tree", "token_value") in walk.secret_paths
    assert ("tree", "children", None, "token_value") in walk.secret_paths


def test_schema_tool_secret_paths() -> None:
    class Deploy(Tool):
        name = "deploy"
        parameters: dict[str, Any] = {  # noqa: RUF012 - a tool's schema, read only
            "type": "object",
            "properties": {
                "target": {"type": "string"},
                "conn": {"type": "string", "format": "password"},
                "opts": {
                    "type": "object",
                    "properties": {"sig": {"type": "string", "writeOnly": True}},
                },
                "hosts": {"type": "array", "items": {"$ref": "#/$defs/host"}},
            },
            "$defs": {
                "host": {"type": "object", "properties": {"pass": {"writeOnly": True}}},
            },
        }

        def run(self, params: dict[str, Any]) -> None:
            return None

    assert Deploy().secret_paths == (("conn",), ("opts", "sig"), ("hosts", None, "pass"))


# -- mask_paths ---------------------------------------------------------------------------


def test_mask_paths_masks_a_copy_and_returns_the_hidden_values() -> None:
    raw = {"blob": "Zq-one", "login": {"user": "ann", "password": "Zq-two"}, "many": ["a", None]}
    before = copy.deepcopy(raw)
    paths = [("blob",), ("login", "password"), ("many", None), ("absent",)]
    masked, hidden = mask_paths(raw, raw, paths)  # a masker that showed everything
    assert masked == {
        "blob": MASK,
        "login": {"user": "ann", "password": MASK},
        "many": [MASK, None],
    }
    assert hidden == ["Zq-one", "Zq-two", "a"]
    assert raw == before  # neither input is changed


def test_mask_paths_without_paths_is_the_identity() -> None:
    args = {"blob": "x"}
    masked, hidden = mask_paths(args, args, ())
    assert masked is args and hidden == []


def test_mask_paths_hides_values_the_masker_does_not_show() -> None:
    raw = {"blob": "Zq-one", "n": 1}
    assert mask_paths({"n": 1}, raw, [("blob",)]) == ({"n": 1}, ["Zq-one"])
    assert mask_paths(None, raw, [("blob",)]) == (None, ["Zq-one"])
    assert mask_paths("[redacted]", raw, [("blob",)]) == ("[redacted]", ["Zq-one"])
    # A container under a secret path is hidden whole.
    assert mask_paths(raw, {"blob": {"a": ["Zq-x"]}}, [("blob",)]) == (
        {"blob": MASK, "n": 1},
        ["Zq-x"],
    )


# -- the contract: a typed secret escapes nowhere ---------------------------------------------

SECRET = "Zq7secretvalue42"


def test_typed_secret_under_a_harmless_name_escapes_nowhere(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    reg = ToolRegistry()
    seen: list[str] = []

    @reg.tool(read_only=True, retry=RetryPolicy(max_retries=1, backoff_base=0.001))
    def unlock(ctx: ToolContext, blob: SecretStr, note: str = "") -> str:
        value = blob.get_secret_value()
        seen.append(value)
        ctx.progress(f"trying {value}", 0.5, used=value)
        if ctx.attempt == 1:
            raise ConnectionError(f"transient failure with {value}")
        raise ValueError(f"wrong secret {value}")

    def show_everything(call: ToolCall) -> Any:
        return call.arguments  # a custom masker that hides nothing

    def refuse(call: ToolCall) -> ToolCall:
        if isinstance(call.arguments, dict) and call.arguments.get("note") == "refuse":
            raise PermissionError(f"refused {call.arguments}")
        return call

    def fail_after(call: ToolCall, result: ToolResult) -> ToolResult:
        raise RuntimeError(f"post hook saw {call.arguments}")

    ex = make_executor(reg, masker=show_everything, pre_call=[refuse], post_call=[fail_after])
    caplog.set_level(logging.DEBUG)
    events: list[str] = []
    lock = threading.Lock()

    def record(sender: Any, *, event: Any, signal: str) -> None:
        with lock:
            events.append(f"{signal} {event!r}")

    with bus.subscribe(record, sender=ex):
        results = [
            ex.execute(ToolCall(name="unlock", arguments={"blob": SECRET})),
            ex.execute(ToolCall(name="unlock", arguments=f'{{"blob": "{SECRET}"}}')),
            ex.execute(ToolCall(name="unlock", arguments={"blob": SECRET, "note": "refuse"})),
        ]
        ex.drain_events()

    assert seen == [SECRET] * 4  # the tool got the raw value, twice per admitted call
    assert [r.status for r in results] == ["error", "error", "rejected"]
    assert results[2].error is not None and "***" in results[2].error
    executing = [e for e in events if e.startswith(bus.EXECUTING)]
    assert executing and all("'blob': '***'" in e for e in executing)
    assert any(e.startswith(bus.PROGRESS) for e in events)
    assert caplog.records  # the post-call hook failures and the refusal were logged
    published = [
        *events,
        *(r.model_dump_json() for r in results),
        *(f"{rec.getMessage()} {rec.exc_text or ''}" for rec in caplog.records),
    ]
    leaks = [text for text in published if SECRET in text]
    assert leaks == []
