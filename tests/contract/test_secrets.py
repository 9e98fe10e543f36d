"""No secret escapes: raw arguments reach the tool and nothing else."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.secret_strategies import nest as _nest
from tests.secret_strategies import secrets
from toolbus import Executor, RetryPolicy, ToolCall, ToolContext, ToolRegistry, ToolResult, bus

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
