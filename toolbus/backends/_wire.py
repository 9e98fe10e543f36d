"""The wire between toolbus and its worker processes: length-prefixed frames.

A frame is an 8-byte big-endian length and that many bytes. Toward a worker a
frame holds a pickle (the agent trusts its own requests); from a worker it
holds JSON only (`reply`, read with `parse`): a worker runs code the agent
may not trust, and unpickling its bytes would run whatever it chose in the agent. The worker reads
with blocking calls (`recv`); the agent feeds whatever bytes arrived to a
`Frames` buffer, which hands back whole frames, so its event loop never blocks
on a slow or dead worker.
"""

from __future__ import annotations

import pickle
import socket
import struct
from collections.abc import Callable
from typing import Any

import orjson

from .. import _json

__all__ = ["FrameTooLarge", "Frames", "body", "encode", "parse", "recv", "reply", "send"]

_HEADER = struct.Struct(">Q")
_PROTOCOL = pickle.HIGHEST_PROTOCOL


def encode(message: Any) -> bytes:
    """`message` as one frame; raises what pickling raises."""
    body = pickle.dumps(message, protocol=_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def body(message: dict[str, Any], default: Any = None) -> bytes:
    """A worker's message as JSON, unframed (a Ray actor's reply is one object
    already); raises TypeError for what JSON cannot hold (unless `default`
    turns it into something it can). Read it with `parse`."""
    # A lone surrogate (a file name decoded with `surrogateescape`, a secret
    # from `os.environ` the tool echoes) goes as it is, not as U+FFFD: the
    # agent masks a call's secrets by equality, and tells keys apart.
    return _json.dumps_surrogatepass(message, default=default, option=_OPTIONS)


def parse(data: bytes) -> Any:
    """A worker's message (`body`) back; ValueError for bytes that are not one."""
    return _json.loads_surrogatepass(data)


_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def reply(message: dict[str, Any], default: Any = None) -> bytes:
    """A worker's message as one JSON frame (see `body`)."""
    data = body(message, default)
    return _HEADER.pack(len(data)) + data


def send(sock: socket.socket, message: Any) -> None:
    """Write one frame (blocking)."""
    sock.sendall(encode(message))


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket, read: Callable[[], None] | None = None) -> Any:
    """Read one frame (blocking); raises EOFError when the peer has gone.
    `read` is called once the frame is read whole, before it is unpickled."""
    header = _read_exactly(sock, _HEADER.size)
    if header is None:
        raise EOFError("the peer closed the connection")
    (size,) = _HEADER.unpack(header)
    body = _read_exactly(sock, size) if size else b""
    if body is None:
        raise EOFError("the peer closed the connection mid-frame")
    if read is not None:
        read()
    return pickle.loads(body)


class FrameTooLarge(ValueError):
    """A peer announced a frame longer than the reader accepts."""


class Frames:
    """Reassembles frames from bytes as they arrive (the parent's side).

    A frame longer than `limit` is refused (`FrameTooLarge`) before any of it
    is buffered: a worker must not be able to make the agent's memory grow."""

    __slots__ = ("_buffer", "_need", "limit")

    def __init__(self, limit: int) -> None:
        self._buffer = bytearray()
        self._need = 0  # the body length of the frame being read, 0 while reading a header
        self.limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        """Add `data`; return the bodies of the frames it completed (unpickle them)."""
        buf = self._buffer
        buf += data
        bodies: list[bytes] = []
        while True:
            if not self._need:
                if len(buf) < _HEADER.size:
                    return bodies
                (self._need,) = _HEADER.unpack_from(buf)
                del buf[: _HEADER.size]
                if self._need > self.limit:
                    raise FrameTooLarge(f"{self._need} bytes, over the limit of {self.limit}")
                if not self._need:
                    bodies.append(b"")
                    continue
            if len(buf) < self._need:
                return bodies
            bodies.append(bytes(buf[: self._need]))
            del buf[: self._need]
            self._need = 0
