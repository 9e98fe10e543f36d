"""OpenTelemetry: one span per call, following the GenAI conventions for tools.

`instrument_otel(executor)` subscribes to the executor's events and installs a
submission hook (`Executor.on_submit`). The hook runs on the caller's thread,
in the caller's context, and notes the caller's current OpenTelemetry context
and the time; the events arrive later, on a delivery thread, and the call's
span is started under that noted context, at that time. So a call's span is a
child of whatever span was current where `execute`, `execute_batch`,
`aexecute` or `aexecute_batch` was called, and spans its whole life: from
submission to `tool:finished`. Times come from the events' timestamps, never
from when the events happen to be delivered.

OpenTelemetry is imported when `instrument_otel` is called, never before
(`pip install 'toolbus[otel]'`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from .. import _json
from ..bus import _signals as sig
from ..bus._events import (
    CallEvent,
    CallFinished,
    Executed,
    Executing,
    Failed,
    RetryAttempt,
    TimedOut,
    WorkerKilled,
)
from ..models import ErrorCode
from ._names import UNKNOWN_TOOL, is_extension
from ._subscription import Handle, Signals

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from ..executor import Executor, Submission

__all__ = ["DURATION_BUCKETS", "OtelInstrumentation", "instrument_otel"]

# The GenAI conventions' buckets for operation durations (seconds).
DURATION_BUCKETS = tuple(0.01 * 2**i for i in range(14))  # 0.01, 0.02, ... 81.92

_SIGNALS = (
    sig.EXECUTING,
    sig.EXECUTED,
    sig.ERROR,
    sig.TIMEOUT,
    sig.RETRY_ATTEMPT,
    sig.KILLED,
    sig.FINISHED,
)

# Submissions noted and not yet seen in events (a subscription that lost its
# events, say): beyond this many the oldest are forgotten.
_MAX_PENDING = 100_000

_NS = 1_000_000_000


def _ns(timestamp: float) -> int:
    return int(timestamp * _NS)


def _json_text(value: Any) -> str:
    """Masked content as JSON text, for the opt-in content attributes."""
    try:
        return _json.dumps(value, default=_opaque, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return '"<not JSON>"'


def _opaque(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return f"<{type(value).__name__}>"  # never str(): it might show what masking hid


class _Open:
    """A call whose span is open: its span and the attempt running now."""

    __slots__ = ("attempt", "attempt_start", "has_arguments", "span", "start", "tool")

    def __init__(self, span: Span, start: float, tool: str) -> None:
        self.span = span
        self.start = start
        self.tool = tool
        self.attempt = 0
        self.attempt_start = 0.0
        self.has_arguments = False


class OtelInstrumentation(Handle):
    """An executor instrumented for OpenTelemetry (`instrument_otel`). `close()` detaches it."""

    def __init__(
        self,
        executor: Executor,
        tracer: Tracer,
        histogram: Histogram,
        *,
        capture_content: bool,
    ) -> None:
        super().__init__(executor)
        from opentelemetry import context as otel_context
        from opentelemetry import trace as otel_trace

        self._tracer = tracer
        self._histogram = histogram
        self._capture = capture_content
        self._get_current = otel_context.get_current
        self._root: Context = otel_context.Context()
        self._kind = otel_trace.SpanKind.INTERNAL
        self._status_error = otel_trace.StatusCode.ERROR
        self._status_type = otel_trace.Status
        self._lock = threading.Lock()
        self._done = False
        # Noted at submission (caller's thread), taken by the first event (delivery thread).
        self._singles: dict[str, list[tuple[Context, float]]] = {}
        # A batch's note is shared by its calls: [context, time, calls not yet seen].
        self._batches: dict[str, list[Any]] = {}
        # Spans open, by (batch id, call id): touched on the delivery thread only.
        self._open: dict[tuple[str | None, str], _Open] = {}
        self._handlers: dict[str, Callable[[Any], None]] = {
            sig.EXECUTING: self._executing,
            sig.EXECUTED: self._executed,
            sig.ERROR: self._failed,
            sig.TIMEOUT: self._timed_out,
            sig.RETRY_ATTEMPT: self._retry,
            sig.KILLED: self._killed,
            sig.FINISHED: self._finished,
        }
        self._remove_hook = executor.on_submit(self._submitted)
        self._subscription = Signals(executor, self._receive, _SIGNALS)

    # -- the caller's side --------------------------------------------------------

    def _submitted(self, submission: Submission) -> None:
        current = self._get_current()
        with self._lock:
            if submission.batch_id is not None:
                self._batches[submission.batch_id] = [
                    current,
                    submission.timestamp,
                    len(submission.call_ids),
                ]
                if len(self._batches) > _MAX_PENDING:
                    del self._batches[next(iter(self._batches))]
            else:
                for call_id in submission.call_ids:
                    self._singles.setdefault(call_id, []).append((current, submission.timestamp))
                if len(self._singles) > _MAX_PENDING:
                    del self._singles[next(iter(self._singles))]

    def _parent(self, event: CallEvent) -> tuple[Context, float]:
        """The context and time noted when the call was submitted (the first event's
        time and no parent if none was noted: instrumented after it was submitted)."""
        noted: tuple[Context, float] | None = None
        with self._lock:
            if event.batch_id is not None:
                shared = self._batches.get(event.batch_id)
                if shared is not None:
                    noted = (shared[0], shared[1])
                    shared[2] -= 1
                    if shared[2] <= 0:
                        del self._batches[event.batch_id]
            else:
                waiting = self._singles.get(event.call_id)
                noted = waiting.pop(0) if waiting else None
                if waiting is not None and not waiting:
                    del self._singles[event.call_id]
        return noted if noted is not None else (self._root, event.timestamp)

    # -- the delivery thread's side ---------------------------------------------------

    def _receive(self, sender: Any, *, event: Any, signal: str) -> None:
        with self._lock:
            if self._done:
                return
        self._handlers[signal](event)

    def _span(self, event: CallEvent) -> _Open:
        """The call's open span, started now if it has none."""
        key = (event.batch_id, event.call_id)
        state = self._open.get(key)
        if state is not None:
            return state
        parent, start = self._parent(event)
        tool = self.executor.registry.get(event.tool)
        name = event.tool if tool is not None else UNKNOWN_TOOL
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "extension" if is_extension(tool) else "function",
            "toolbus.executor": self.executor.name,
        }
        if tool is not None and tool.description:
            attributes["gen_ai.tool.description"] = tool.description
        if event.batch_id is not None:
            attributes["toolbus.batch_id"] = event.batch_id
        span = self._tracer.start_span(
            f"execute_tool {name}",
            context=parent,
            kind=self._kind,
            attributes=attributes,
            start_time=_ns(start),
        )
        state = self._open[key] = _Open(span, start, name)
        return state

    def _executing(self, event: Executing) -> None:
        state = self._span(event)
        self._end_attempt(state, "unknown", None, event.timestamp)  # one that never reported
        state.attempt = event.attempt
        state.attempt_start = event.timestamp
        if self._capture and not state.has_arguments and event.arguments is not None:
            state.span.set_attribute("gen_ai.tool.call.arguments", _json_text(event.arguments))
            state.has_arguments = True

    def _end_attempt(
        self,
        state: _Open,
        status: str,
        code: ErrorCode | None,
        now: float,
        duration: float | None = None,
    ) -> None:
        """Record the attempt running now as a `toolbus.attempt` span event, at its start."""
        if not state.attempt:
            return
        attributes: dict[str, Any] = {"toolbus.attempt": state.attempt, "toolbus.status": status}
        if code is not None:
            attributes["toolbus.error_code"] = code.value
        attributes["toolbus.duration"] = (
            duration if duration is not None else max(0.0, now - state.attempt_start)
        )
        state.span.add_event("toolbus.attempt", attributes, _ns(state.attempt_start))
        state.attempt = 0

    # An attempt's end, or a kill, never starts a span: one that comes after its
    # call's `tool:finished` (a process killed late) has no span left to go to.

    def _executed(self, event: Executed) -> None:
        state = self._open.get((event.batch_id, event.call_id))
        if state is not None:
            self._end_attempt(state, "ok", None, event.timestamp, event.duration)

    def _failed(self, event: Failed) -> None:
        state = self._open.get((event.batch_id, event.call_id))
        if state is not None:
            self._end_attempt(state, "error", event.error_code, event.timestamp, event.duration)

    def _timed_out(self, event: TimedOut) -> None:
        state = self._open.get((event.batch_id, event.call_id))
        if state is not None:
            self._end_attempt(state, "timeout", ErrorCode.EXECUTION_TIMEOUT, event.timestamp)

    def _retry(self, event: RetryAttempt) -> None:
        state = self._span(event)
        attributes: dict[str, Any] = {
            "toolbus.attempt": event.attempt,
            "toolbus.retry.delay": event.delay,
        }
        if self._capture and event.previous_error:
            attributes["toolbus.retry.previous_error"] = event.previous_error
        state.span.add_event("toolbus.retry", attributes, _ns(event.timestamp))

    def _killed(self, event: WorkerKilled) -> None:
        state = self._open.get((event.batch_id, event.call_id))
        if state is None:
            return
        state.span.add_event(
            "toolbus.killed",
            {"toolbus.attempt": event.attempt, "toolbus.killed.reason": event.reason},
            _ns(event.timestamp),
        )

    def _finished(self, event: CallFinished) -> None:
        state = self._span(event)
        del self._open[(event.batch_id, event.call_id)]
        result = event.result
        code = result.error_code
        self._end_attempt(state, result.status, code, event.timestamp)
        span = state.span
        span.set_attribute("toolbus.status", result.status)
        span.set_attribute("toolbus.attempts", result.attempts)
        if code is not None:
            span.set_attribute("toolbus.error_code", code.value)
        failed = result.status != "ok"
        error_type = (code.value if code is not None else result.status) if failed else None
        if error_type is not None:
            span.set_attribute("error.type", error_type)
            description = result.error if self._capture and result.error else error_type
            span.set_status(self._status_type(self._status_error, description))
        if self._capture:
            if not state.has_arguments and event.arguments is not None:
                span.set_attribute("gen_ai.tool.call.arguments", _json_text(event.arguments))
            if not failed:
                span.set_attribute("gen_ai.tool.call.result", _json_text(result.output))
        span.end(_ns(max(event.timestamp, state.start)))
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": state.tool,
            "toolbus.executor": self.executor.name,
        }
        if error_type is not None:
            attributes["error.type"] = error_type
        self._histogram.record(max(0.0, event.timestamp - state.start), attributes)

    # -- closing ------------------------------------------------------------------------

    def _detach(self, timeout: float) -> None:
        self._remove_hook()
        self._subscription.close()
        self.executor.drain_events(timeout)  # what was announced before is handled first
        with self._lock:
            self._done = True
            self._singles.clear()
            self._batches.clear()
        # Spans still open belong to calls that had not finished: ended now, unset.
        for state in list(self._open.values()):
            state.span.end()
        self._open.clear()


def instrument_otel(
    executor: Executor,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool = False,
) -> OtelInstrumentation:
    """Trace `executor`'s calls and record their durations with OpenTelemetry.

    One span per call, `execute_tool {tool}` (kind INTERNAL), a child of the
    span current where the call was submitted; the histogram
    `gen_ai.execute_tool.duration` (seconds). The global providers unless
    given. `capture_content=True` adds the call's arguments (masked) and its
    result's output (scrubbed) as `gen_ai.tool.call.arguments` and
    `gen_ai.tool.call.result`, and error texts; off by default. Attributes:
    docs/observe.md. Returns a handle; `close()` detaches it.
    """
    try:
        from opentelemetry import metrics, trace
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError(
            "toolbus.observe.instrument_otel needs OpenTelemetry: pip install 'toolbus[otel]'"
        ) from e
    from .. import __version__

    tracer = trace.get_tracer("toolbus", __version__, tracer_provider)
    meter = metrics.get_meter("toolbus", __version__, meter_provider)
    histogram = meter.create_histogram(
        "gen_ai.execute_tool.duration",
        unit="s",
        description="Duration of tool executions: from submission to the call's result.",
        explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
    )
    return OtelInstrumentation(executor, tracer, histogram, capture_content=bool(capture_content))
