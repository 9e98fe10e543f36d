"""OpenTelemetry: one span per call, following the GenAI conventions for tools.

`instrument_otel(executor)` subscribes to the executor's events and installs a
submission hook (`Executor.on_submit`). The hook runs on the caller's thread
and keeps the submission (its runs, its time and the copy of the caller's
context the calls run in), no more: the caller waits for it. The events
arrive later, on a delivery thread, which reads the OpenTelemetry context
current in that copy (as it was when the calls were submitted: toolbus never
enters that copy itself, its tools run in copies of it); when the call's
`tool:finished` arrives its span is made under that context, starting at the
submission's time. So a call's span is a child of whatever span was current
where `execute`, `execute_batch`, `aexecute` or `aexecute_batch` was called,
and spans its whole life: from submission to `tool:finished`. Times come from
the events' timestamps, never from when the events happen to be delivered.

OpenTelemetry is imported when `instrument_otel` is called, never before
(`pip install 'toolbus[otel]'`).
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..bus import _signals as sig
from ..bus._events import (
    CallEvent,
    CallFinished,
    Executed,
    Failed,
    RetryAttempt,
    TimedOut,
    WorkerKilled,
)
from ..models import ErrorCode
from ._content import json_text, text_of
from ._names import UNKNOWN_TOOL, is_extension
from ._subscription import Handle, Signals, check_providers

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import Tracer, TracerProvider

    from ..executor import Executor, Submission

__all__ = ["DURATION_BUCKETS", "OtelInstrumentation", "instrument_otel"]

# The GenAI conventions' buckets for operation durations (seconds).
DURATION_BUCKETS = tuple(0.01 * 2**i for i in range(14))  # 0.01, 0.02, ... 81.92

_SIGNALS = (
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

# Executors with an open instrumentation: a second would make every call's span
# and duration point twice. Weak: an executor dropped unclosed is forgotten.
_instrumented: weakref.WeakKeyDictionary[Executor, None] = weakref.WeakKeyDictionary()
_instrumented_lock = threading.Lock()


def _ns(timestamp: float) -> int:
    return int(timestamp * _NS)


# A span event waiting for its call's span: (name, attributes, time in ns).
_SpanEvent = tuple[str, dict[str, Any], int]
# (batch id, call id, run token): what tells calls apart in events. The token
# (`CallEvent._run`) because a model may give two calls at once the same id.
_Key = tuple[str | None, str, int]

# Calls whose span ended, remembered so that a late event (a process killed
# after its call ended) does not start a span that would never end.
_ENDED = 4096


class OtelInstrumentation(Handle):
    """An executor instrumented for OpenTelemetry (`instrument_otel`). `close()` detaches it.

    A call's span is made when its `tool:finished` arrives, with every
    attribute at once, its start time the submission's and its end time the
    event's; the span events its earlier events made wait for it until then.
    So a call still running when the handle is closed gets no span.
    """

    def __init__(
        self,
        executor: Executor,
        tracer: Tracer,
        histogram: Histogram,
        *,
        capture_content: bool,
    ) -> None:
        super().__init__(executor, "instrument_otel")
        with _instrumented_lock:
            if executor in _instrumented:
                raise ValueError(
                    f"instrument_otel: executor {executor.name!r} is instrumented already "
                    "(every call would get two spans); close that handle first"
                )
            _instrumented[executor] = None
        try:
            self._start(executor, tracer, histogram, capture_content)
        except BaseException:
            self._forget()
            raise

    def _forget(self) -> None:
        with _instrumented_lock:
            _instrumented.pop(self.executor, None)

    def _start(
        self, executor: Executor, tracer: Tracer, histogram: Histogram, capture_content: bool
    ) -> None:
        from opentelemetry import context as otel_context
        from opentelemetry import trace as otel_trace

        self._tracer = tracer
        self._histogram = histogram
        self._capture = capture_content is True  # "false" from the environment captures nothing
        self._get_current = otel_context.get_current
        self._root: Context = otel_context.Context()
        self._kind = otel_trace.SpanKind.INTERNAL
        self._status_error = otel_trace.StatusCode.ERROR
        self._status_type = otel_trace.Status
        self._lock = threading.Lock()
        self._done = False
        # Appended on the caller's thread (atomic), taken on the delivery thread.
        self._submitted_calls: deque[Submission] = deque()
        # Noted from those (delivery thread), taken at tool:finished. A single
        # call's note by its run token: call ids may repeat.
        self._singles: dict[int, tuple[Context, float]] = {}
        # A batch's note is shared by its calls: [context, time, calls not yet finished].
        self._batches: dict[str, list[Any]] = {}
        # The delivery thread's own (one event at a time): span events of calls
        # not finished yet, calls finished lately, histogram attributes by tool.
        self._pending: dict[_Key, list[_SpanEvent]] = {}
        self._ended: dict[_Key, None] = {}
        self._metric_attributes: dict[tuple[str, str | None], dict[str, Any]] = {}
        self._handlers: dict[str, Callable[[Any], None]] = {
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
        self._submitted_calls.append(submission)  # the rest off the caller's path: `_note`
        if len(self._submitted_calls) > _MAX_PENDING:  # nobody takes them (a stalled bus)
            try:
                self._submitted_calls.popleft()
            except IndexError:  # the delivery thread took them meanwhile
                pass

    def _note(self) -> None:
        """Note the submissions made since last time: each one's OpenTelemetry
        context, read in a copy of the caller's context as it was then (under the
        lock; a copy, because a submission hook may be running in that context)."""
        taken = self._submitted_calls
        get_current = self._get_current
        while True:
            try:
                submission = taken.popleft()
            except IndexError:  # (the caller's thread may drop the oldest meanwhile)
                return
            current = submission.context.copy().run(get_current)
            if submission.batch_id is not None:
                self._batches[submission.batch_id] = [
                    current,
                    submission.timestamp,
                    len(submission.call_ids),
                ]
                if len(self._batches) > _MAX_PENDING:
                    del self._batches[next(iter(self._batches))]
            else:
                for token in submission._runs:
                    self._singles[token] = (current, submission.timestamp)
                if len(self._singles) > _MAX_PENDING:
                    del self._singles[next(iter(self._singles))]

    def _parent(self, event: CallFinished) -> tuple[Context, float]:
        """The context and time noted when the call was submitted (no parent, and
        its first attempt's start, if none was noted: instrumented after it was
        submitted)."""
        noted: tuple[Context, float] | None = None
        with self._lock:
            self._note()
            if event.batch_id is not None:
                shared = self._batches.get(event.batch_id)
                if shared is not None:
                    noted = (shared[0], shared[1])
                    shared[2] -= 1
                    if shared[2] <= 0:
                        del self._batches[event.batch_id]
            else:
                noted = self._singles.pop(event._run, None)
        if noted is not None:
            return noted
        return self._root, event.timestamp - event.result.duration

    # -- the delivery thread's side ---------------------------------------------------

    def _receive(self, sender: Any, *, event: Any, signal: str) -> None:
        if not self._done:
            self._handlers[signal](event)

    def _add(self, event: CallEvent, name: str, attributes: dict[str, Any], at: float) -> None:
        """Keep a span event for the call's span (made when the call finishes)."""
        key = (event.batch_id, event.call_id, event._run)
        waiting = self._pending.get(key)
        if waiting is None:
            if key in self._ended:
                return  # its call's span has ended: too late
            waiting = self._pending[key] = []
            if len(self._pending) > _MAX_PENDING:
                del self._pending[next(iter(self._pending))]
        waiting.append((name, attributes, _ns(at)))

    def _attempt(
        self,
        event: CallEvent,
        status: str,
        code: ErrorCode | None,
        duration: float,
    ) -> None:
        """An attempt ended: a `toolbus.attempt` span event at the attempt's start."""
        attributes: dict[str, Any] = {
            "toolbus.attempt": event.attempt,
            "toolbus.status": status,
            "toolbus.duration": duration,
        }
        if code is not None:
            attributes["toolbus.error_code"] = code.value
        self._add(event, "toolbus.attempt", attributes, event.timestamp - duration)

    def _executed(self, event: Executed) -> None:
        self._attempt(event, "ok", None, event.duration)

    def _failed(self, event: Failed) -> None:
        self._attempt(event, "error", event.error_code, event.duration)

    def _timed_out(self, event: TimedOut) -> None:
        self._attempt(event, "timeout", ErrorCode.EXECUTION_TIMEOUT, event.timeout)

    def _retry(self, event: RetryAttempt) -> None:
        attributes: dict[str, Any] = {
            "toolbus.attempt": event.attempt,
            "toolbus.retry.delay": event.delay,
        }
        if self._capture and event.previous_error:
            attributes["toolbus.retry.previous_error"] = text_of(event.previous_error)
        self._add(event, "toolbus.retry", attributes, event.timestamp)

    def _killed(self, event: WorkerKilled) -> None:
        attributes = {"toolbus.attempt": event.attempt, "toolbus.killed.reason": event.reason}
        self._add(event, "toolbus.killed", attributes, event.timestamp)

    def _finished(self, event: CallFinished) -> None:
        key = (event.batch_id, event.call_id, event._run)
        waiting = self._pending.pop(key, ())
        self._ended[key] = None
        if len(self._ended) > _ENDED:
            del self._ended[next(iter(self._ended))]
        parent, start = self._parent(event)
        result = event.result
        code = result.error_code
        tool = self.executor._tool_named(event.tool)
        name = event.tool if tool is not None else UNKNOWN_TOOL
        # `text_of`: an exporter encodes attributes as UTF-8, which a lone
        # surrogate in a model's call id (or an executor's name) would fail.
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": text_of(event.call_id),
            "gen_ai.tool.type": "extension" if is_extension(tool) else "function",
            "toolbus.executor": text_of(self.executor.name),
            "toolbus.status": result.status,
            "toolbus.attempts": result.attempts,
        }
        if tool is not None and tool.description:
            attributes["gen_ai.tool.description"] = tool.description
        if event.batch_id is not None:
            attributes["toolbus.batch_id"] = event.batch_id
        if event.parent_call_id is not None:
            attributes["toolbus.parent_call_id"] = text_of(event.parent_call_id)
        if code is not None:
            attributes["toolbus.error_code"] = code.value
        # A deferred call waits for a person's approval (APPROVAL_REQUIRED): not
        # an error, so it feeds no error rate; `toolbus.status` says it waits.
        failed = result.status not in ("ok", "deferred")
        error_type = (code.value if code is not None else result.status) if failed else None
        if error_type is not None:
            attributes["error.type"] = error_type
        if self._capture:
            if event.arguments is not None:
                attributes["gen_ai.tool.call.arguments"] = json_text(event.arguments)
            if result.status == "ok":
                attributes["gen_ai.tool.call.result"] = json_text(result.output)
        end = max(event.timestamp, start)
        # The duration is recorded first: a span processor that raises (in
        # `end`, on this thread) must not take the metric down with the span.
        self._record(name, error_type, end - start)
        span = self._tracer.start_span(
            f"execute_tool {name}",
            context=parent,
            kind=self._kind,
            attributes=attributes,
            start_time=_ns(start),
        )
        for what, details, at in waiting:
            span.add_event(what, details, at)
        if error_type is not None:
            description = text_of(result.error) if self._capture and result.error else error_type
            span.set_status(self._status_type(self._status_error, description))
        span.end(_ns(end))

    def _record(self, name: str, error_type: str | None, seconds: float) -> None:
        metric = self._metric_attributes.get((name, error_type))
        if metric is None:
            metric = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "toolbus.executor": text_of(self.executor.name),
            }
            if error_type is not None:
                metric["error.type"] = error_type
            self._metric_attributes[(name, error_type)] = metric
        self._histogram.record(seconds, metric)

    # -- closing ------------------------------------------------------------------------

    def _detach(self, timeout: float | None) -> None:
        self._remove_hook()
        self._subscription.close()
        # What was announced to it before is handled first; not its neighbours.
        self.executor.drain_events(timeout, subscription=self._subscription)
        self._done = True
        with self._lock:
            self._submitted_calls.clear()
            self._singles.clear()
            self._batches.clear()
        self._pending.clear()  # calls not finished: no span
        self._forget()


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
    `gen_ai.tool.call.result`, and error texts; off unless True. Attributes:
    docs/observe.md. Returns a handle; `close()` detaches it. An executor is
    instrumented once at a time: ValueError while its last handle is open.
    """
    try:
        from opentelemetry import metrics, trace
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError(
            "toolbus.observe.instrument_otel needs OpenTelemetry: pip install 'toolbus[otel]'"
        ) from e
    from .._version import __version__

    check_providers(tracer_provider, meter_provider)
    tracer = trace.get_tracer("toolbus", __version__, tracer_provider)
    meter = metrics.get_meter("toolbus", __version__, meter_provider)
    histogram = meter.create_histogram(
        "gen_ai.execute_tool.duration",
        unit="s",
        description="Duration of tool executions: from submission to the call's result.",
        explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
    )
    return OtelInstrumentation(executor, tracer, histogram, capture_content=capture_content)
