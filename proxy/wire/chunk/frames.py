"""``CompletionChunk`` frames: what a chunk holds, and the two stream framings.

Owns the response side of the wire contract, shared by the stub, the proxy,
the backends and the edge:

- ``Chunk`` (and its parts) is one decoded chunk; ``MalformedFrame`` is the one
  error a chunk or frame stream raises when it does not decode.
- The binary framing: a 4-byte little-endian length, then the chunk buffer.
  ``FrameCutter`` cuts such a byte stream at frame boundaries as bytes arrive,
  passing whole-frame pieces through uncopied; ``FrameSplitter`` hands out
  each frame as its own ``bytes``; ``chunk_is_final`` says whether a chunk
  ends its stream.
- The SSE framing: ``sse_event`` (``sse_frames``, for whole frames) and ``SSESplitter``
  (``data: <base64 of the chunk buffer>``).

Writing chunks: ``wire.chunk.writer``; reading them: ``wire.chunk.reader``
(fast) and ``wire.chunk.stock`` (the generated accessors, the reference). No
I/O.
"""

from __future__ import annotations

import binascii
import struct

import msgspec

from flatgate.proxy.wire.buffer import I32, U16, U32
from flatgate.proxy.wire.layout import COMPLETION_CHUNK
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import FinishReason

__all__ = [
    "MAX_FRAME_BYTES",
    "Chunk",
    "ChunkError",
    "FrameCutter",
    "FrameSplitter",
    "MalformedFrame",
    "SSESplitter",
    "ToolCallDelta",
    "Usage",
    "chunk_is_final",
    "sse_event",
    "sse_frames",
    "unprefix",
]

# One frame larger than this is a broken or hostile peer, not a token delta.
MAX_FRAME_BYTES = 64 << 20


class MalformedFrame(ValueError):
    """A chunk frame or frame stream that does not decode."""


class ToolCallDelta(msgspec.Struct, frozen=True):
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


class Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int
    completion_tokens: int
    # Of prompt_tokens, served from the backend's prompt cache.
    cached_tokens: int = 0
    # Of completion_tokens, spent reasoning.
    reasoning_tokens: int = 0
    # Of prompt_tokens, written to the backend's prompt cache.
    cache_write_tokens: int = 0


class ChunkError(msgspec.Struct, frozen=True):
    code: str
    message: str


class Chunk(msgspec.Struct, frozen=True):
    request_id: str = ""
    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: FinishReason = FinishReason.NONE
    usage: Usage | None = None
    error: ChunkError | None = None
    index: int = 0
    model: str = ""
    reasoning: str = ""
    # Final chunk only: the stop sequence that ended the completion, if known.
    stop_sequence: str = ""
    # A reasoning block ended: its payload, id and dialect (with nothing but
    # an id, before its text: one began, the id its backend gave it).
    reasoning_part: ReasoningPart | None = None
    # What the backend answered that has no slot, one JSON object text, in
    # the dialect ``extras_dialect`` (``schema.ApiDialect``) names.
    extras: str = ""
    extras_dialect: int = 0


# CompletionChunk vtable entries (byte offsets in the vtable): finish_reason, error.
_VT_FINISH = COMPLETION_CHUNK.voffset("finish_reason")
_VT_ERROR = COMPLETION_CHUNK.voffset("error")


def chunk_is_final(buf: bytes | memoryview, at: int = 0) -> bool:
    """Whether the chunk buffer starting at ``at`` in ``buf`` ends its stream
    (a finish reason or an error).

    Read straight from the vtable, in place (the relay asks once per frame):
    a buffer whose offsets point outside it is not final.
    """
    try:
        n = len(buf)
        root = at + U32(buf, at)[0]
        if root + 4 > n:
            return False
        vt = root - I32(buf, root)[0]
        if vt < at or vt + 4 > n:
            return False
        (vsize,) = U16(buf, vt)
        if vt + vsize > n:
            return False
        if vsize > _VT_ERROR and U16(buf, vt + _VT_ERROR)[0]:
            return True
        if vsize > _VT_FINISH:
            (field,) = U16(buf, vt + _VT_FINISH)
            return bool(field) and root + field < n and buf[root + field] != 0
        return False
    except struct.error:
        return False


def unprefix(frame: bytes) -> memoryview:
    """The chunk buffer inside one size-prefixed frame (a view, no copy)."""
    return memoryview(frame)[4:]


class FrameCutter:
    """Cuts a stream of size-prefixed frames at frame boundaries, copying little.

    ``feed`` takes whatever the socket gave and returns the bytes that end on a
    frame boundary: the piece itself when it holds only whole frames (the
    common case: no copy), else its whole-frame prefix, keeping the rest. A
    frame that spans pieces is gathered in one growing buffer (linear in its
    size, however many pieces it comes in). ``spans`` locates the chunk buffers
    inside what ``feed`` returned, so readers work in place. ``finished`` says
    whether the stream so far ends with a final chunk (read once, at the end);
    ``last_at``, where the last whole frame starts in what ``feed`` last
    returned with a frame in it (so its final chunk is read with no walk).
    """

    __slots__ = ("_carry", "_last", "_last_at", "_need")

    def __init__(self) -> None:
        self._carry = bytearray()
        self._need = 0
        self._last: bytes | None = None
        self._last_at = 0

    def feed(self, piece: bytes) -> bytes:
        if self._carry:
            self._carry += piece
            if len(self._carry) < self._need:
                return b""
            data = bytes(self._carry)
            self._carry.clear()
        else:
            data = piece
        n = len(data)
        last = n - 4  # the last offset a size prefix may start at
        pos = 0
        size = 0
        # Per frame, as few new ints as can be (each one an allocation): a
        # token's size + 4 is a cached small int, so ``end`` is the one new.
        while pos <= last:
            size = U32(data, pos)[0]
            if size > MAX_FRAME_BYTES:
                raise MalformedFrame(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
            end = pos + (size + 4)
            if end > n:
                break
            self._last, self._last_at = data, pos
            pos = end
        if pos == n:
            return data
        self._carry += memoryview(data)[pos:]
        self._need = 4 + size if n - pos >= 4 else 4
        return data[:pos]

    @staticmethod
    def spans(data: bytes) -> list[tuple[int, int]]:
        """``(start, end)`` of each chunk buffer (prefix excluded) in ``data``,
        which ``feed`` returned (so it holds whole frames only)."""
        out = []
        pos, n = 0, len(data)
        while pos < n:
            (size,) = U32(data, pos)
            out.append((pos + 4, pos + 4 + size))
            pos += 4 + size
        return out

    @property
    def last_at(self) -> int:
        return self._last_at

    def finished(self) -> bool:
        """Whether the stream so far ends with a final chunk and nothing after it."""
        if self._carry or self._last is None:
            return False
        return chunk_is_final(self._last, self._last_at + 4)

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame held back."""
        return len(self._carry)


class FrameSplitter:
    """Whole size-prefixed frames (prefix kept), one ``bytes`` each: a client
    convenience over ``FrameCutter``."""

    __slots__ = ("_cutter",)

    def __init__(self) -> None:
        self._cutter = FrameCutter()

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        ready = self._cutter.feed(data if isinstance(data, bytes) else bytes(data))
        return [ready[start - 4 : end] for start, end in FrameCutter.spans(ready)]

    @property
    def pending(self) -> int:
        return self._cutter.pending


_SSE_DATA, _SSE_END = b"data: ", b"\n\n"  # an SSE event, around its base64 chunk


def sse_event(chunk_buffer: bytes | memoryview) -> bytes:
    """One SSE event carrying a chunk buffer (not size-prefixed)."""
    return _SSE_DATA + binascii.b2a_base64(chunk_buffer, newline=False) + _SSE_END


def sse_frames(frames: bytes) -> bytes:
    """Whole size-prefixed frames (what ``FrameCutter.feed`` returned) as SSE
    events, one a frame: ``sse_event`` of each chunk, in one pass."""
    view = memoryview(frames)
    parts: list[bytes] = []
    add = parts.append
    b2a = binascii.b2a_base64
    pos, n = 0, len(frames)
    while pos < n:
        end = pos + (U32(frames, pos)[0] + 4)
        add(_SSE_DATA)
        add(b2a(view[pos + 4 : end], newline=False))
        add(_SSE_END)
        pos = end
    return b"".join(parts)


class SSESplitter:
    """Cuts an SSE byte stream of flatgate chunk events into chunk buffers."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while True:
            cut = self._buf.find(b"\n\n")
            if cut < 0:
                if len(self._buf) > MAX_FRAME_BYTES * 2:
                    raise MalformedFrame("SSE event exceeds the frame limit")
                return out
            event = bytes(self._buf[:cut])
            del self._buf[: cut + 2]
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    try:
                        out.append(binascii.a2b_base64(line[5:].strip(), strict_mode=True))
                    except binascii.Error as exc:
                        raise MalformedFrame(f"SSE data is not base64: {exc}") from exc
