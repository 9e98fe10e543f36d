"""No secret escapes: raw arguments reach the tool and nothing else."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.secret_strategies import nest as _nest
from tests.secret_strategies import secrets
from toolbus import (
    Executor,
    Injected,
    RetryPolicy,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResult,
    bus,
)

session_token: contextvars.ContextVar[str] = contextvars.ContextVar("session_token", default="")

SECRET_KEYS = [
    "token", "api_key", "password", "Authorization", "client_secret", "X-Api-Key",
    "session_cookie", "private_key", "credentials", "bearer_token", "passwd",
]  # fmt: skip

received: list[Any] = []


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True, retry=RetryPolicy(max_retries=1, backoff_base=0.001))
    def leaky(
        ctx: ToolContext, mode: str, payload: Any = None, auth: dict[str, str] | None = None
    ) -> Any:
        raw = {"payload": payload, "auth": auth}
        received.append(raw)
        ctx.progress(f"working on {raw}", 0.5, seen=raw)
        if mode == "raise":
            raise ValueError(f"could not use {raw}")
        if mode == "flaky" and ctx.attempt == 1:
            raise ConnectionError(f"transient while sending {raw}")
        return {"echo": raw, "text": f"done with {raw}"}

    return reg


def _inject_auth(call: ToolCall) -> ToolCall:
    token = session_token.get()
    if not token or not isinstance(call.arguments, dict):
        return call
    return call.with_arguments({**call.arguments, "auth": {"bearer_token": token}})


def _post(call: ToolCall, result: ToolResult) -> ToolResult:
    if call.arguments and "post-fail" in str(call.arguments):
        raise RuntimeError(f"post hook choked on {call.arguments}")
    return result


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(self.format(record))


@pytest.fixture(scope="module")
def executor() -> Iterator[Executor]:
    with Executor(_registry(), timeout=5, pre_call=[_inject_auth], post_call=[_post]) as ex:
        yield ex


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=secrets,
    injected=secrets,
    key=st.sampled_from(SECRET_KEYS),
    shape=st.lists(st.sampled_from(["dict", "list"]), max_size=3),
    mode=st.sampled_from(["ok", "raise", "flaky", "post-fail"]),
    raw_json=st.booleans(),
)
def test_no_secret_in_events_logs_errors_or_stats(
    executor: Executor,
    secret: str,
    injected: str,
    key: str,
    shape: list[str],
    mode: str,
    raw_json: bool,
) -> None:
    import orjson

    received.clear()
    payload = _nest({key: secret, "note": "post-fail" if mode == "post-fail" else "x"}, shape)
    arguments: dict[str, Any] | str = {"mode": mode, "payload": payload}
    if raw_json:
        arguments = orjson.dumps(arguments).decode()
    capture = _Capture()
    toolbus_log = logging.getLogger("toolbus")
    toolbus_log.addHandler(capture)
    old_level = toolbus_log.level
    toolbus_log.setLevel(logging.DEBUG)
    token = session_token.set(injected)
    try:
        with bus.Recorder(sender=executor) as rec:
            result = executor.execute(ToolCall(name="leaky", arguments=arguments))
            executor.drain_events()
    finally:
        session_token.reset(token)
        toolbus_log.removeHandler(capture)
        toolbus_log.setLevel(old_level)

    # The tool itself got the raw values...
    assert secret in repr(received) and injected in repr(received)
    # ...and nothing that toolbus published or returned carries them.
    published = [
        *(repr(event) for _, event in rec.events),
        *capture.texts,
        result.model_dump_json(),
        executor.stats().model_dump_json(),
    ]
    for text in published:
        assert secret not in text
        assert injected not in text
    assert any(name == bus.EXECUTING for name, _ in rec.events)
    if mode == "raise":
        assert result.status == "error" and result.error is not None and "***" in result.error
    if mode == "post-fail":
        assert result.status == "error" and capture.texts  # the hook failure was logged


def _published(rec: bus.Recorder, capture: _Capture, *results: ToolResult) -> list[str]:
    return [
        *(repr(event) for _, event in rec.events),
        *capture.texts,
        *(r.model_dump_json() for r in results),
    ]


@pytest.fixture
def capture() -> Iterator[_Capture]:
    handler = _Capture()
    toolbus_log = logging.getLogger("toolbus")
    old_level = toolbus_log.level
    toolbus_log.addHandler(handler)
    toolbus_log.setLevel(logging.DEBUG)
    yield handler
    toolbus_log.removeHandler(handler)
    toolbus_log.setLevel(old_level)


@given(secret=secrets, key=st.sampled_from(SECRET_KEYS))
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_tool_passing_its_secret_on_to_a_call_of_its_own_publishes_none_of_it(
    capture: _Capture, secret: str, key: str
) -> None:
    # The nested call gets it under a plain name; its events, errors and
    # result are scrubbed of every secret its caller knew.
    reg = ToolRegistry()
    got: list[str] = []

    @reg.tool(read_only=True)
    def echo(text: str) -> str:
        got.append(text)
        raise RuntimeError(f"echo failed: {text}")

    @reg.tool(read_only=True)
    def outer(creds: dict[str, str]) -> str:
        nested = ex.execute(ToolCall(id="n", name="echo", arguments={"text": creds[key]}))
        return f"{nested.status}: {nested.error}"

    with Executor(reg, timeout=5) as ex, bus.Recorder(sender=ex) as rec:
        result = ex.execute(ToolCall(id="o", name="outer", arguments={"creds": {key: secret}}))
        ex.drain_events()
    assert got == [secret] and result.status == "ok"
    assert [e.call_id for e in rec.of(bus.EXECUTING)] == ["o", "n"]
    for text in _published(rec, capture, result):
        assert secret not in text


@given(secret=secrets, key=st.sampled_from(SECRET_KEYS))
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_pre_call_hook_moving_a_secret_to_a_plain_name_publishes_none_of_it(
    capture: _Capture, secret: str, key: str
) -> None:
    # What the model sent under a secret name stays hidden wherever a hook
    # puts it, also when the hook changes the arguments in place.
    reg = ToolRegistry()

    @reg.tool
    def connect(header: str = "") -> str:
        raise ConnectionError(f"refused {header}")

    def move(call: ToolCall) -> ToolCall:
        assert isinstance(call.arguments, dict)
        return call.with_arguments({"header": call.arguments.pop(key)})

    with Executor(reg, pre_call=[move]) as ex, bus.Recorder(sender=ex) as rec:
        result = ex.execute(ToolCall(name="connect", arguments={key: secret}))
        ex.drain_events()
    assert result.status == "error" and "refused ***" in (result.error or "")
    for text in _published(rec, capture, result):
        assert secret not in text


@pytest.mark.parametrize(
    "key",
    [
        "sk-live-1234567890",
        # Read from os.environ with surrogateescape: its bytes are b"\xe9" there
        # (review 60: they were decoded with "replace", and published as they were).
        "sk-live-\udce91234567890",
    ],
)
def test_a_secret_in_a_set_or_bytes_of_progress_data_is_scrubbed(key: str) -> None:
    """On threads a set's or bytes' secret reached `tool:progress` as it was
    (hunt 6); the process backend sends them as their text, scrubbed."""
    reg = ToolRegistry()

    @reg.tool
    def report(ctx: ToolContext, api_key: Annotated[str, Injected]) -> str:
        raw = api_key.encode("utf-8", "surrogateescape")
        ctx.progress("working", 0.5, keys={api_key}, raw=raw, deep=[{"k": frozenset([api_key])}])
        return "ok"

    with Executor(reg, inject={"api_key": lambda c: key}) as ex, bus.Recorder() as rec:
        assert ex.execute(ToolCall(name="report")).status == "ok"
        ex.drain_events()
    (progress,) = rec.of(bus.PROGRESS)
    assert key not in repr(progress.data)
    assert progress.data["raw"] == "***"
