"""`spill`: a result too long for the model's context is kept whole on disk.

The text measured is the output as the model reads it (`output_text`, the body
`format_result_for_context` renders before it cuts anything). Longer than
`max_chars`, the whole of it goes to a file under `store` (mode 0600), and the
result the model gets holds its head and its tail around a note: how many
characters were left out, and how to read them with the tool the policy brings,
`read_artifact(handle, offset, length)`. The handle is also the result's
`metadata["artifact"]`. Attachments stay on the result as they were.

The artifact holds only what was published already: `on_result` is handed the
result with its secrets scrubbed, and scanned by the executor's content scanner
even where the model's copy is not (`stores_results`), so the model's preview
of a spilled output is the scanned text then. It expires `ttl` seconds after it was
written: expired ones are deleted when the next artifact is written, and an
expired handle is refused when it is read. Handles are known to the policy that
wrote them (in this process); files an earlier process left are deleted once
older than `ttl`.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _seams
from ..formatting import DEFAULT_MAX_LENGTH, output_text
from ..models import ToolCall, ToolResult
from ._protocol import BasePolicy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..tools import Tool

__all__ = ["Spill", "spill"]

# A handle names a file under the store and nothing else: 32 hex digits.
_HANDLE = re.compile(r"[0-9a-f]{32}")
_SUFFIX = ".txt"
# The head's share of what the model sees of a spilled text (the tail gets the rest).
_HEAD_SHARE = 0.7
# A chunk of an artifact: where each starts in the file is kept, so a page is
# read from its chunk on, never the whole file.
_CHUNK = 1 << 16
# What a tool name may be (as the model APIs allow it).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def spill(
    *,
    store: str | os.PathLike[str],
    max_chars: int = DEFAULT_MAX_LENGTH,
    ttl: float = 3600.0,
    tool_name: str = "read_artifact",
) -> Spill:
    """Results longer than `max_chars` characters are stored whole in `store`
    (a directory of your own, made 0700 if missing) for `ttl` seconds; the model
    reads their head and tail and pages the rest with the tool `tool_name` the
    policy brings.

    `max_chars` is at least 1000 (room for the note); the default is what the
    provider writers let a model read uncut (`DEFAULT_MAX_LENGTH`): larger, the
    spilled text itself is cut again by them. A page of `read_artifact` is at
    most `max_chars` characters, so it is never spilled itself."""
    return Spill(max_chars=max_chars, store=store, ttl=ttl, tool_name=tool_name)


@dataclass(frozen=True, slots=True)
class _Artifact:
    path: Path
    chars: int
    marks: tuple[int, ...]  # the byte offset of each chunk, and the file's size last
    expires: float


class Spill(BasePolicy):
    """See `spill()`."""

    name = "spill"
    stores_results = True  # on disk: what is published, never the model's unscanned copy

    def __init__(
        self, *, max_chars: int, store: str | os.PathLike[str], ttl: float, tool_name: str
    ) -> None:
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1000:
            raise ValueError(f"spill: max_chars must be an integer >= 1000, got {max_chars!r}")
        if isinstance(ttl, bool) or not isinstance(ttl, int | float):
            raise TypeError(f"spill: ttl must be a number of seconds, got {ttl!r}")
        if not (math.isfinite(ttl) and ttl > 0):
            raise ValueError(f"spill: ttl must be a finite number of seconds > 0, got {ttl!r}")
        if not isinstance(tool_name, str) or not _TOOL_NAME.fullmatch(tool_name):
            raise ValueError(
                f"spill: tool_name must be 1 to 64 letters, digits, '_' or '-', got {tool_name!r}"
            )
        self.max_chars = max_chars
        self.page = max_chars
        self.ttl = float(ttl)
        self.tool_name = tool_name
        self.store = Path(store)
        # Made now: a store that cannot be made is an error where it is configured.
        self.store.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._artifacts: dict[str, _Artifact] = {}
        self._swept = -math.inf  # when the store was last swept of old files (wall clock)
        self._tool: Tool | None = None

    # -- the protocol ----------------------------------------------------------------

    def tools(self) -> Sequence[Tool]:
        return (self.reader(),)

    def applies_to(self, tool: Tool) -> bool:
        return tool is not self._tool  # a page is never spilled again

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult | None:
        if result.status != "ok" or result.output in (None, ""):
            return None
        text = output_text(result.output)
        if len(text) <= self.max_chars:
            return None
        handle = self.write(text, now)
        return result.model_copy(
            update={
                "output": self.preview(text, handle),
                "metadata": {**result.metadata, "artifact": handle},
            }
        )

    # -- artifacts ---------------------------------------------------------------------

    def write(self, text: str, now: float) -> str:
        """Store `text` as a new artifact, alive until `now + ttl`; its handle."""
        self._prune(now)
        handle = secrets.token_hex(16)
        path = self.store / (handle + _SUFFIX)
        marks = [0]
        # O_EXCL: never through a file (or link) someone put there; 0600: the
        # text is a tool's output, for this user only.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        fd = os.open(path, flags, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                for at in range(0, len(text), _CHUNK):
                    data = text[at : at + _CHUNK].encode("utf-8", "surrogatepass")
                    f.write(data)
                    marks.append(marks[-1] + len(data))
        except BaseException:
            _remove(path)
            raise
        with self._lock:
            self._artifacts[handle] = _Artifact(path, len(text), tuple(marks), now + self.ttl)
        return handle

    def read(self, handle: str, offset: int, length: int, now: float) -> tuple[str, int]:
        """`length` characters (at most a page) of artifact `handle` from
        `offset`, and its length in all; LookupError (unknown or expired) or
        ValueError (an offset past its end) saying why, for the model."""
        if not isinstance(handle, str) or not _HANDLE.fullmatch(handle):
            raise LookupError(f"{handle!r} is not an artifact handle (32 hex digits)")
        with self._lock:
            found = self._artifacts.get(handle)
            expired = found is not None and now >= found.expires
            if expired:
                del self._artifacts[handle]
        if expired and found is not None:
            _remove(found.path)
            found = None
        if found is None:
            raise LookupError(f"no artifact {handle!r}: it expired, or never existed")
        if offset < 0 or offset >= max(found.chars, 1):
            raise ValueError(
                f"offset {offset} is outside artifact {handle!r}: it has {found.chars} "
                f"characters (offsets 0 to {found.chars - 1})"
            )
        length = min(max(length, 1), self.page)
        end = min(offset + length, found.chars)
        first, last = offset // _CHUNK, (end - 1) // _CHUNK
        try:
            with found.path.open("rb") as f:
                f.seek(found.marks[first])
                data = f.read(found.marks[last + 1] - found.marks[first])
        except FileNotFoundError:
            raise LookupError(f"no artifact {handle!r}: it was deleted") from None
        base = first * _CHUNK
        text = data.decode("utf-8", "surrogatepass")[offset - base : end - base]
        return text, found.chars

    def preview(self, text: str, handle: str) -> str:
        """What the model reads of a spilled `text` (at most `max_chars`): its
        head, a note saying what is left out and how to read it, its tail."""
        # The note's length with the largest numbers it can hold bounds it.
        room = self.max_chars - len(self._note(handle, len(text), len(text), len(text)))
        head = int(room * _HEAD_SHARE)
        tail = room - head
        note = self._note(handle, len(text) - head - tail, len(text), head)
        return text[:head] + note + text[len(text) - tail :]

    def _note(self, handle: str, omitted: int, chars: int, start: int) -> str:
        return (
            f"\n\n[... {omitted} characters omitted. The whole output is {chars} characters, "
            f"stored as artifact {handle}. To read the omitted part, call "
            f'{self.tool_name}(handle="{handle}", offset={start}, length={self.page}) '
            f"and go on from offset + length; at most {self.page} characters a call. ...]\n\n"
        )

    def _prune(self, now: float) -> None:
        """Delete the artifacts expired at `now`, and (once a ttl) files in the
        store older than it that no policy here knows (an earlier process's)."""
        with self._lock:
            gone = [h for h, a in self._artifacts.items() if now >= a.expires]
            paths = [self._artifacts.pop(h).path for h in gone]
            known = {a.path.name for a in self._artifacts.values()}
            wall = time.time()
            sweep = wall - self._swept >= self.ttl
            if sweep:
                self._swept = wall
        for path in paths:
            _remove(path)
        if sweep:
            self._sweep(wall, known)

    def _sweep(self, wall: float, known: set[str]) -> None:
        try:
            entries = list(os.scandir(self.store))
        except OSError:
            return
        for entry in entries:
            name = entry.name
            if (
                name in known
                or not name.endswith(_SUFFIX)
                or not _HANDLE.fullmatch(name[: -len(_SUFFIX)])
            ):
                continue
            try:
                if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime + self.ttl < wall:
                    os.unlink(entry.path)
            except OSError:
                continue

    # -- its tool ------------------------------------------------------------------------

    def reader(self) -> Tool:
        """The `read_artifact` tool (one object: registered once wherever it is brought)."""
        with self._lock:
            if self._tool is None:
                self._tool = _seams.spill_reader.call(self)
            return self._tool


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # gone or not ours: an artifact that cannot be deleted is not a failure
