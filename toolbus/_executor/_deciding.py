"""Decisions an executor mints on the approval requests it made.

`request.approve()` and `request.deny(...)` need nobody's secret: they can
only run, or refuse, the call that was asked about. An edit, an answer in the
tool's place, and a decision that expires or is used once are minted here,
under the executor's secret (its journal's, when it has one, so another
process on the same journal mints decisions this one takes): see
`toolbus.decisions`.
"""

from __future__ import annotations

import contextlib
import hmac
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..approvals import ApprovalRequest, ExternalRequest, request_mac
from ..decisions import Minting
from ..models import ErrorCode, ToolCall, ToolResult
from ..pipeline import Run, Services, ThreadWaiter
from ..tools import ToolRegistry, normalize_output
from ..tools._schemas import output_problem

__all__ = ["Completions", "Deciding"]


class Deciding(Minting):
    """The part of `Executor` that mints decisions (`approve`, `deny`,
    `answer`), lists what waits for one, and completes external calls."""

    _services: Services
    registry: ToolRegistry
    _minter = "Executor"

    def _decision_secret(self) -> bytes:
        return self._services.key_secret

    if TYPE_CHECKING:  # (Submitting's; the executor's)
        _submit_one: Callable[..., Run]
        _completions: Completions

    def complete(
        self, request: ExternalRequest, output: Any, *, decided_by: str | None = None
    ) -> ToolResult:
        """Supply the result of an external tool's call (`@tool(external=True)`):
        a new submission of it, ending `ok` with `output` (`attempts` 0,
        `metadata["external"]`), announced with its own `tool:finished`. The
        request must be this executor's (or its journal's) and still waiting;
        once: of several completions, from any threads or processes on the
        journal, one ends `ok` and the others `DECISION_EXPIRED`. A request
        this executor did not make, an output that does not fit the tool's
        output schema (or is not JSON), a journal that cannot be reached, or a
        closed executor end it `rejected` (or `cancelled`, closed meanwhile),
        saying why, and leave the request waiting. Never raises."""
        call_id = _text(_field(request, "call_id")) or "external"
        name = _text(_field(request, "tool")) or "external"
        try:
            call = ToolCall(id=call_id, name=name, arguments=_masked(request))
        except Exception:  # (arguments no call carries: not a request of ours, refused below)
            call = ToolCall(id=call_id, name=name, arguments={})
        asked_in = None
        # Counted before the executor is seen open: `close` waits for the
        # completions under way before it closes the journal, so one it drops
        # can still hold its request there again.
        with self._completions.running():
            try:
                if isinstance(request, ExternalRequest):
                    asked_in = self._services.pending.run_of(request.digest, request.call_id)
                ended = self._completion(request, output, decided_by, call_id, name)
            except Exception as e:  # (a bug of ours: the submission still ends, once)
                ended = _refused(
                    call_id, name, ErrorCode.TOOL_UNAVAILABLE,
                    f"Tool '{name}' was not completed: internal error ({type(e).__name__})",
                )  # fmt: skip
            waiter = ThreadWaiter()
            run = self._submit_one(call, waiter, decided=ended)
            if not waiter.flag:
                waiter.wait()
            result = run.result
            assert result is not None
            if ended.status == "ok" and result.status != "ok":
                # Claimed, but the submission did not carry it (the executor
                # closed meanwhile): the request waits again, to be completed later.
                self._services.pending.hold(request, asked_in)
        return result

    def _completion(
        self, request: Any, output: Any, decided_by: Any, call_id: str, name: str
    ) -> ToolResult:
        """The result `complete` submits: the output, or why it is refused
        (the request claimed only for an output it can send)."""
        svc = self._services
        if not isinstance(request, ExternalRequest) or not _genuine(request, svc.key_secret):
            return _refused(
                call_id, name, ErrorCode.TOOL_NOT_ALLOWED,
                f"Tool '{name}' was not completed: the request is not an external request "
                "this executor made",
            )  # fmt: skip
        if getattr(self, "_closed", False):
            return _refused(
                call_id, name, ErrorCode.CANCELLED,
                f"Tool '{name}' was not completed: the executor is closed",
            )  # fmt: skip
        if decided_by is not None and not isinstance(decided_by, str):
            return _refused(
                call_id, name, ErrorCode.INVALID_ARGUMENTS,
                f"Tool '{name}' was not completed: decided_by must be a string",
            )  # fmt: skip
        tool = self.registry.get(name)
        if tool is None or not tool.external:
            why = f"Tool '{name}' is not an external tool here"
            return _refused(call_id, name, ErrorCode.TOOL_NOT_FOUND, why)
        problem = output_problem(tool.output_schema, output)
        try:
            value, attachments, _ = normalize_output(output)
        except Exception as e:  # (OutputError: not JSON, a cycle, ...)
            problem = problem or f"it cannot be sent: {type(e).__name__}"
        if problem is not None:
            return _refused(
                call_id, name, ErrorCode.INVALID_ARGUMENTS,
                f"Tool '{name}' was not completed: the result does not fit its output "
                f"schema ({problem})",
            )  # fmt: skip
        claimed = svc.pending.claim(request.digest, request.call_id)
        if claimed is None:
            return _refused(
                call_id, name, ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{name}' was not completed: the journal could not be reached; "
                "the request still waits, try again",
            )  # fmt: skip
        if not claimed:
            return _refused(
                call_id, name, ErrorCode.DECISION_EXPIRED,
                f"Tool '{name}' was not completed: its request is not waiting (completed or "
                "answered already)",
            )  # fmt: skip
        meta: dict[str, Any] = {"external": True}
        if decided_by is not None:
            meta["decided_by"] = decided_by
        return ToolResult(
            call_id=call_id, name=name, status="ok", output=value, attachments=attachments,
            metadata=meta,
        )  # fmt: skip

    def pending(self) -> list[ApprovalRequest]:
        """The requests calls ended `deferred` with that wait for a decision,
        oldest first (masked, as published). With a journal, every process's
        on it, kept across restarts; without, this executor's: at most 10 000,
        none let go undecided (a call that would wait beyond them ends
        `rejected`, `OVERLOADED`, instead of `deferred`)."""
        return list(self._services.pending.list())


class Completions:
    """The `complete` calls under way on one executor (thread-safe)."""

    __slots__ = ("_count", "_idle", "_lock")

    def __init__(self) -> None:
        # Entered through the bare lock (see `_sync.py`).
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._count = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with self._lock:
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1
                if not self._count:
                    self._idle.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait until none is under way, for at most `timeout` seconds."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._count, timeout)


def _field(request: Any, name: str) -> Any:
    """`request.name`, or None whatever reading it raises (not a request of ours)."""
    try:
        return getattr(request, name, None)
    except Exception:
        return None


def _masked(request: Any) -> dict[str, Any]:
    """The arguments a completion is published with: the request's, masked."""
    shown = _field(request, "arguments_masked")
    try:
        return dict(shown) if type(shown) is dict else {}
    except Exception:
        return {}


def _text(value: Any) -> str:
    return value if type(value) is str else ""


def _genuine(request: ExternalRequest, secret: bytes) -> bool:
    """Whether `request` carries the MAC this executor's secret gives it."""
    mac = request.mac
    if not isinstance(mac, str):
        return False
    try:
        expected = request_mac(request, secret)
    except Exception:  # fields a model_construct left odd: not ours
        return False
    return hmac.compare_digest(mac.encode("utf-8", "surrogatepass"), expected.encode())


def _refused(call_id: str, name: str, code: ErrorCode, why: str) -> ToolResult:
    return ToolResult(call_id=call_id, name=name, status="rejected", error=why, error_code=code)
