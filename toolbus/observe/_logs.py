"""Structured logs: one JSON line per event, to a stream, a logger or a rotating file.

Every line is a JSON object (orjson) with the event's `seq`, `timestamp`,
`executor` and `signal`, then the event's own fields, each bounded in size.
Events hold masked arguments and scrubbed texts only, so a line never holds a
secret the executor knew of. A tool name the registry does not know is logged
as `<unknown>`.

The audit log is the same function on `tool:finished` only:

    log_json(executor, "audit.jsonl", signals=("tool:finished",), max_bytes=50_000_000)
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import threading
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any, Final

import orjson

from ..bus import Subscription
from ..bus import _signals as sig
from ..journal import JournalRecord
from ..models import ToolResult
from ._content import dumps, json_bytes, opaque
from ._names import tool_label
from ._subscription import LINGER, Handle

if TYPE_CHECKING:
    from ..executor import Executor

__all__ = ["ALL", "JsonLog", "log_json"]


class _All:
    """Every signal, toolbus's own and those defined with `define_signal`, now or later."""

    _instance: _All | None = None

    def __new__(cls) -> _All:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ALL"


ALL: Final = _All()

# What a line says a signal means for its call, where the event has no status.
_STATUS = {
    sig.QUEUED: "queued",
    sig.EXECUTING: "running",
    sig.EXECUTED: "ok",
    sig.ERROR: "error",
    sig.TIMEOUT: "timeout",
    sig.RETRY_ATTEMPT: "retrying",
    sig.REJECTED: "rejected",
    sig.CANCELLED: "cancelled",
}

_SKIPPED = frozenset({"seq", "timestamp", "tool"})  # written first
# Fields of these declared types are written as they are: they cannot be large.
_SMALL = frozenset({"int", "float", "bool", "int | None", "float | None", "ErrorCode"})


class _Bound:
    """Keeps every field of a line within `limit` characters."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def cut(self, text: str) -> str:
        extra = len(text) - self.limit
        return text if extra <= 0 else f"{text[: self.limit]}…[+{extra} chars]"

    def __call__(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self.cut(value)
        try:
            data = json_bytes(value)
        except TypeError:
            return "<not JSON>"
        if len(data) <= self.limit:  # bytes >= characters
            return orjson.Fragment(data)  # written as is, not encoded twice
        return self.cut(data.decode())


class _File:
    """Appends lines to a file, rotating it by size like logging's RotatingFileHandler:
    `path` -> `path.1` -> ... -> `path.{backups}` (dropped).

    One per file in the process (`_open_file`), shared by every handle logging
    to it: each handle counting the size on its own would rotate too late (or
    rotate a file another still appends to), so they share the count and a lock.
    """

    def __init__(self, path: str, max_bytes: int | None, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.key = os.path.realpath(path)  # its entry in _files
        self.users = 0  # the handles sharing it (under _files_lock)
        self.lock = threading.Lock()
        # Unbuffered: each burst's lines are one write(2), on disk for readers at once.
        self.file: IO[bytes] = open(path, "ab", buffering=0)  # noqa: SIM115 - see close()
        self.size = self.file.tell()

    def write(self, lines: list[bytes]) -> None:
        """Append `lines` (each ending in a newline), rotating before a line that
        would take the file past `max_bytes`."""
        with self.lock:
            if not self.max_bytes:
                data = b"".join(lines)
                self.file.write(data)
                self.size += len(data)
                return
            start, size = 0, self.size
            for i, line in enumerate(lines):
                if size and size + len(line) > self.max_bytes:
                    self.file.write(b"".join(lines[start:i]))
                    self._rotate()
                    start, size = i, self.size
                size += len(line)
            self.file.write(b"".join(lines[start:]))
            self.size = size

    def _rotate(self) -> None:
        """Shift the backups and start a new file; a file removed or moved away
        meanwhile is none to shift (as in RotatingFileHandler), and a new one
        is opened whatever failed (else every later line is lost)."""
        self.file.close()
        try:
            if self.backups > 0:
                for i in range(self.backups - 1, 0, -1):
                    older = f"{self.path}.{i}"
                    if os.path.exists(older):
                        os.replace(older, f"{self.path}.{i + 1}")
                if os.path.exists(self.path):
                    os.replace(self.path, f"{self.path}.1")
        finally:
            mode = "ab" if self.backups > 0 else "wb"
            self.file = open(self.path, mode, buffering=0)  # noqa: SIM115
            self.size = self.file.tell()

    def close(self) -> None:
        with self.lock:
            self.file.close()


# The files log_json handles write to in this process, by real path.
_files: dict[str, _File] = {}
_files_lock = threading.Lock()


def _open_file(path: str, max_bytes: int | None, backups: int) -> _File:
    """The writer of `path`, shared with the other handles on the same file
    (whatever name they gave it); ValueError if they rotate it otherwise."""
    key = os.path.realpath(path)
    with _files_lock:
        shared = _files.get(key)
        if shared is None:
            shared = _files[key] = _File(path, max_bytes, backups)
        elif (shared.max_bytes, shared.backups) != (max_bytes, backups):
            raise ValueError(
                f"log_json: {path!r} is logged to already with max_bytes={shared.max_bytes!r}, "
                f"backups={shared.backups!r}; handles sharing a file must rotate it alike"
            )
        shared.users += 1
        return shared


def _release_file(shared: _File) -> None:
    """One handle less on `shared`; the last one closes the file."""
    with _files_lock:
        shared.users -= 1
        if shared.users > 0:
            return
        if _files.get(shared.key) is shared:
            del _files[shared.key]
    shared.close()


def _is_binary(stream: Any) -> bool:
    """Whether `stream` takes bytes. A file object need not derive from io's
    classes (tempfile.NamedTemporaryFile() is a wrapper around one, a
    SpooledTemporaryFile neither), so its `mode` ("rb+", "w+b") decides then."""
    if isinstance(stream, io.TextIOBase):
        return False
    if isinstance(stream, io.RawIOBase | io.BufferedIOBase):
        return True
    mode = getattr(stream, "mode", None)
    return isinstance(mode, str) and "b" in mode


class JsonLog(Handle):
    """An executor's events logged as JSON lines (`log_json`). `close()` detaches it
    and closes the file it opened (never a stream or logger it was given)."""

    def __init__(
        self,
        executor: Executor,
        target: Any,
        *,
        signals: tuple[str, ...] | None,
        max_bytes: int | None,
        backups: int,
        max_field_chars: int,
    ) -> None:
        super().__init__(executor, "log_json")
        self._bound = _Bound(max_field_chars)
        self._lock = threading.Lock()
        self._done = False
        self._file: _File | None = None
        self._logger: logging.Logger | None = None
        self._stream: Any = None
        self._binary = False
        if isinstance(target, logging.Logger):
            self._logger = target
        elif isinstance(target, str | os.PathLike):
            self._file = _open_file(os.fspath(target), max_bytes, backups)
        else:
            self._stream = target
            self._binary = _is_binary(target)
        # Per event type: its fields to write, and whether each is written as is.
        self._plans: dict[type, tuple[tuple[str, bool], ...]] = {}
        # The delivery thread's own: the lines of the events handed over so far,
        # written together when the burst ends (`_flush`): one write, one flush.
        self._lines: list[bytes] = []
        self.path = self._file.path if self._file is not None else None
        try:
            self._subscription = Subscription(
                signals, self._receive, executor, linger=LINGER, flush=self._flush
            )
        except BaseException:
            if self._file is not None:
                _release_file(self._file)
            raise

    def line(self, signal: str, event: Any) -> bytes:
        """The JSON line (without its newline) written for `event` of `signal`."""
        bound = self._bound
        record: dict[str, Any] = {
            "seq": event.seq,
            "timestamp": event.timestamp,
            "executor": self.executor.name,
            "signal": signal,
        }
        tool = getattr(event, "tool", None)
        if tool is not None:
            record["tool"] = tool_label(self.executor, tool) if type(tool) is str else bound(tool)
        status = _STATUS.get(signal)
        if status is not None:
            record["status"] = status
        plan = self._plans.get(type(event))
        if plan is None:
            plan = self._plans[type(event)] = tuple(
                (f.name, isinstance(f.type, str) and f.type in _SMALL)
                for f in dataclasses.fields(event)
                if f.name not in _SKIPPED and not f.name.startswith("_")  # `_run`: toolbus's own
            )
        limit = bound.limit
        for name, small in plan:
            value = getattr(event, name)
            if small or value is None or (type(value) is str and len(value) <= limit):
                record[name] = value
            elif isinstance(value, ToolResult):  # tool:finished: the result, never its output
                record["status"] = value.status
                record["error_code"] = value.error_code
                record["error"] = bound(value.error)
                record["attempts"] = value.attempts
                record["duration"] = value.duration
            elif isinstance(value, JournalRecord):  # tool:in-doubt: what the call was
                record["arguments"] = bound(value.arguments)
                record["started"] = value.started
            else:
                record[name] = bound(value)
        run = getattr(event, "_run", 0)
        if run and type(run) is int:  # two calls a model gave one id stay apart
            record["run"] = run
        # `dumps`: a lone surrogate a model sent is written as U+FFFD, the line kept.
        return dumps(record, default=opaque, option=orjson.OPT_NON_STR_KEYS)

    def _receive(self, sender: Any, *, event: Any, signal: str) -> None:
        self._lines.append(self.line(signal, event) + b"\n")

    def _flush(self) -> None:
        """Write the burst's lines (on the delivery thread, before they count as delivered)."""
        lines, self._lines = self._lines, []
        if not lines:
            return
        with self._lock:
            if self._done:
                return
            if self._file is not None:
                self._file.write(lines)
            elif self._logger is not None:
                for data in lines:
                    self._logger.info(data[:-1].decode())
            elif self._binary:
                self._stream.write(b"".join(lines))
                self._stream.flush()
            else:
                self._stream.write(b"".join(lines).decode())
                self._stream.flush()

    def _detach(self, timeout: float | None) -> None:
        self._subscription.close()
        # Lines of events announced before are written first; a slow neighbour
        # is not waited for.
        self.executor.drain_events(timeout, subscription=self._subscription)
        with self._lock:
            self._done = True
        if self._file is not None:
            _release_file(self._file)


def log_json(
    executor: Executor,
    target: Any,
    *,
    signals: Iterable[str] | _All = ALL,
    max_bytes: int | None = None,
    backups: int = 3,
    max_field_chars: int = 2000,
) -> JsonLog:
    """Log `executor`'s events as JSON lines, one per event, and return the handle.

    `target`: a text or binary stream (the lines of each burst of events
    written and flushed together), a `logging.Logger` (each line a message at
    INFO), or a file path (appended to, a burst's lines in one write; with
    `max_bytes`, rotated when a line would take it past that size, keeping
    `backups` older files: `path.1`, `path.2`, ...). `signals`: the
    signals to log; `ALL` (the default) is every signal, also those defined
    later with `bus.define_signal`. Each field is cut to `max_field_chars`
    characters (structured values beyond that are written as cut JSON text).
    The audit log: `log_json(executor, path, signals=("tool:finished",))`.
    Fields: docs/observe.md.
    """
    if isinstance(max_bytes, bool) or (
        max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 1)
    ):
        raise ValueError(f"log_json: max_bytes must be an integer >= 1 or None, got {max_bytes!r}")
    if isinstance(backups, bool) or not isinstance(backups, int) or backups < 0:
        raise ValueError(f"log_json: backups must be an integer >= 0, got {backups!r}")
    if (
        isinstance(max_field_chars, bool)
        or not isinstance(max_field_chars, int)
        or (max_field_chars < 16)
    ):
        raise ValueError(
            f"log_json: max_field_chars must be an integer >= 16, got {max_field_chars!r}"
        )
    is_path = isinstance(target, str | os.PathLike)
    if max_bytes is not None and not is_path:
        raise ValueError("log_json: max_bytes (rotation) needs a file path as target")
    writable = callable(getattr(target, "write", None))
    if not (is_path or writable or isinstance(target, logging.Logger)):
        raise TypeError(
            "log_json: target must be a stream, a logging.Logger or a file path, "
            f"got {type(target).__name__}"
        )
    names: tuple[str, ...] | None
    if isinstance(signals, _All):
        names = None
    else:
        if isinstance(signals, str | bytes) or not isinstance(signals, Iterable):
            raise TypeError(
                'log_json: signals is a tuple of names, e.g. ("tool:finished",), or ALL; '
                f"got {type(signals).__name__}"
            )
        names = tuple(signals)
        if not names:
            raise ValueError("log_json: signals is empty (ALL logs every signal)")
    return JsonLog(
        executor,
        target,
        signals=names,
        max_bytes=max_bytes,
        backups=backups,
        max_field_chars=max_field_chars,
    )
