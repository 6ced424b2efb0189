"""``CompletionChunk`` frames: building, decoding, and the two stream framings.

Owns the response side of the wire contract, shared by the stub, the proxy and
the edge:

- ``build_chunk`` writes one chunk with a pooled builder and returns an
  independent ``bytes`` (size-prefixed by default: the binary framing is a
  4-byte little-endian length, then the chunk buffer).
- ``decode_chunk`` reads one chunk into an immutable ``Chunk`` through the
  generated accessors: the reference reader (tests check ``proxy.chunks``'
  fast reader against it); any malformed buffer raises ``MalformedFrame``,
  never anything else.
- ``FrameCutter`` cuts a size-prefixed byte stream at frame boundaries as
  bytes arrive, passing whole-frame pieces through uncopied; ``FrameSplitter``
  hands out each frame as its own ``bytes``; ``sse_event`` and ``SSESplitter`` do the same for SSE
  (``data: <base64 of the chunk buffer>``).

No I/O. Generated code is used here and nowhere past this module.
"""

from __future__ import annotations

import binascii
import struct
from collections.abc import Sequence

import flatbuffers
import msgspec

from flatgate.generated.LLMGateway import CompletionChunk as _fb_chunk
from flatgate.generated.LLMGateway import Error as _fb_error
from flatgate.generated.LLMGateway import ToolCallDelta as _fb_tcd
from flatgate.generated.LLMGateway import Usage as _fb_usage
from flatgate.proxy.wire.layout import COMPLETION_CHUNK
from flatgate.proxy.wire.pool import BuilderPool, finish_bytes
from flatgate.proxy.wire.schema import CHUNK_IDENTIFIER, FinishReason

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
    "build_chunk",
    "chunk_is_final",
    "decode_chunk",
    "sse_event",
    "unprefix",
    "write_chunk",
]

# One frame larger than this is a broken or hostile peer, not a token delta.
MAX_FRAME_BYTES = 64 << 20
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")


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


def _string(builder: flatbuffers.Builder, value: str | bytes | None) -> int:
    return builder.CreateString(value) if value else 0


def build_chunk(
    pool: BuilderPool,
    *,
    request_id: str | bytes = "",
    content: str | bytes = "",
    tool_calls: Sequence[ToolCallDelta] = (),
    finish_reason: int = FinishReason.NONE,
    usage: Usage | None = None,
    error: ChunkError | None = None,
    index: int = 0,
    model: str | bytes = "",
    size_prefixed: bool = True,
) -> bytes:
    """One ``CompletionChunk`` as bytes, built with a builder leased from ``pool``."""
    with pool.lease() as b:
        calls_off = 0
        if tool_calls:
            offs = []
            for call in tool_calls:
                cid, name, args = (
                    _string(b, call.id),
                    _string(b, call.name),
                    _string(b, call.arguments),
                )
                _fb_tcd.Start(b)
                _fb_tcd.AddIndex(b, call.index)
                if cid:
                    _fb_tcd.AddId(b, cid)
                if name:
                    _fb_tcd.AddName(b, name)
                if args:
                    _fb_tcd.AddArguments(b, args)
                offs.append(_fb_tcd.End(b))
            _fb_chunk.StartToolCallsVector(b, len(offs))
            for off in reversed(offs):
                b.PrependUOffsetTRelative(off)
            calls_off = b.EndVector()
        usage_off = 0
        if usage is not None:
            _fb_usage.Start(b)
            _fb_usage.AddPromptTokens(b, usage.prompt_tokens)
            _fb_usage.AddCompletionTokens(b, usage.completion_tokens)
            usage_off = _fb_usage.End(b)
        error_off = 0
        if error is not None:
            code, message = _string(b, error.code), _string(b, error.message)
            _fb_error.Start(b)
            if code:
                _fb_error.AddCode(b, code)
            if message:
                _fb_error.AddMessage(b, message)
            error_off = _fb_error.End(b)
        rid, text, model_off = _string(b, request_id), _string(b, content), _string(b, model)
        _fb_chunk.Start(b)
        if rid:
            _fb_chunk.AddRequestId(b, rid)
        if text:
            _fb_chunk.AddContent(b, text)
        if calls_off:
            _fb_chunk.AddToolCalls(b, calls_off)
        if finish_reason:
            _fb_chunk.AddFinishReason(b, int(finish_reason))
        if usage_off:
            _fb_chunk.AddUsage(b, usage_off)
        if error_off:
            _fb_chunk.AddError(b, error_off)
        if index:
            _fb_chunk.AddIndex(b, index)
        if model_off:
            _fb_chunk.AddModel(b, model_off)
        root = _fb_chunk.End(b)
        if size_prefixed:
            b.FinishSizePrefixed(root, CHUNK_IDENTIFIER)
        else:
            b.Finish(root, CHUNK_IDENTIFIER)
        return finish_bytes(b)


# write_chunk's layout: root offset, identifier, a vtable with an entry per
# field, then the table (soffset; request_id, content, usage, error uoffsets;
# index; model uoffset; finish_reason byte; padding), then strings and
# sub-tables. Field -> its offset in the table (absent: never written).
_AT = {
    "request_id": 4,
    "content": 8,
    "usage": 12,
    "error": 16,
    "index": 20,
    "model": 24,
    "finish_reason": 28,
}
_TABLE_SIZE = 32
_VT_OFFSETS = tuple(_AT.get(name, 0) for name in COMPLETION_CHUNK.fields)  # by slot
_VT_SIZE = 4 + 2 * len(_VT_OFFSETS)
_ROOT = 8 + _VT_SIZE
# root, identifier, vtable (size, table size, an entry per field), table soffset
_HEAD = struct.Struct(f"<I4s{2 + len(_VT_OFFSETS)}Hi")
_HEAD_SIZE = _ROOT + _TABLE_SIZE
_SUB = struct.Struct("<4Hiii")  # a two-field sub-table: its vtable, then soffset, a, b
_EMPTY = b""


def _utf8(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def write_chunk(
    *,
    request_id: str | bytes = "",
    content: str | bytes = "",
    finish_reason: int = FinishReason.NONE,
    usage: Usage | None = None,
    error: ChunkError | None = None,
    index: int = 0,
    model: str | bytes = "",
    size_prefixed: bool = True,
) -> bytes:
    """A ``CompletionChunk`` without tool calls, laid out by hand.

    The schema-specific writer for the frames a stream is made of (token
    deltas, the final chunk, error chunks): the same chunk ``build_chunk``
    makes (tests decode both and compare), at a fraction of the cost, since
    the stock builder spends its time on pure-Python bookkeeping. Tool-call
    chunks go through ``build_chunk``.
    """
    buf = bytearray(_HEAD_SIZE)
    present = {
        "request_id": bool(request_id),
        "content": bool(content),
        "finish_reason": bool(finish_reason),
        "usage": usage is not None,
        "error": error is not None,
        "index": bool(index),
        "model": bool(model),
    }
    vt = [
        off if present.get(name) else 0
        for name, off in zip(COMPLETION_CHUNK.fields, _VT_OFFSETS, strict=True)
    ]
    _HEAD.pack_into(buf, 0, _ROOT, CHUNK_IDENTIFIER, _VT_SIZE, _TABLE_SIZE, *vt, _ROOT - 8)
    if index:
        _I32.pack_into(buf, _ROOT + _AT["index"], index)
    if finish_reason:
        buf[_ROOT + _AT["finish_reason"]] = int(finish_reason)

    def put_string(field_at: int, value: bytes) -> None:
        at = len(buf)
        _U32.pack_into(buf, field_at, at - field_at)
        n = len(value)
        buf.extend(_U32.pack(n))
        buf.extend(value)
        buf.extend(b"\x00" * (4 - (n & 3)))  # NUL terminator and padding to 4

    if request_id:
        put_string(_ROOT + _AT["request_id"], _utf8(request_id))
    if content:
        put_string(_ROOT + _AT["content"], _utf8(content))
    if model:
        put_string(_ROOT + _AT["model"], _utf8(model))
    if usage is not None:
        at = len(buf)
        buf.extend(_SUB.pack(8, 12, 4, 8, 8, usage.prompt_tokens, usage.completion_tokens))
        _U32.pack_into(buf, _ROOT + _AT["usage"], at + 8 - (_ROOT + _AT["usage"]))
    if error is not None:
        code, message = _utf8(error.code), _utf8(error.message)
        at = len(buf)
        buf.extend(_SUB.pack(8, 12, 4 if code else 0, 8 if message else 0, 8, 0, 0))
        table = at + 8
        _U32.pack_into(buf, _ROOT + _AT["error"], table - (_ROOT + _AT["error"]))
        if code:
            put_string(table + 4, code)
        if message:
            put_string(table + 8, message)
    if size_prefixed:
        return _U32.pack(len(buf)) + buf
    return bytes(buf)


def _text(value: bytes | None) -> str:
    return value.decode("utf-8") if value else ""


def decode_chunk(buf: bytes | memoryview) -> Chunk:
    """Decode one chunk buffer (not size-prefixed) into a ``Chunk``, through the
    generated accessors: the reference; hot paths read with ``proxy.chunks.read_chunk``."""
    data = bytes(buf)
    if len(data) < 8 or data[4:8] != CHUNK_IDENTIFIER:
        raise MalformedFrame("chunk frame: missing or wrong file identifier")
    try:
        fb = _fb_chunk.CompletionChunk.GetRootAs(data, 0)
        calls = []
        for i in range(fb.ToolCallsLength()):
            tc = fb.ToolCalls(i)
            calls.append(
                ToolCallDelta(
                    index=tc.Index(),
                    id=_text(tc.Id()),
                    name=_text(tc.Name()),
                    arguments=_text(tc.Arguments()),
                )
            )
        u = fb.Usage()
        e = fb.Error()
        return Chunk(
            request_id=_text(fb.RequestId()),
            content=_text(fb.Content()),
            tool_calls=tuple(calls),
            finish_reason=FinishReason(fb.FinishReason()),
            usage=None if u is None else Usage(u.PromptTokens(), u.CompletionTokens()),
            error=None if e is None else ChunkError(_text(e.Code()), _text(e.Message())),
            index=fb.Index(),
            model=_text(fb.Model()),
        )
    except MalformedFrame:
        raise
    except Exception as exc:  # the generated accessors raise anything on bad bytes
        raise MalformedFrame(f"chunk frame does not decode: {exc!r}") from exc


# CompletionChunk vtable entries (byte offsets in the vtable): finish_reason, error.
_VT_FINISH = COMPLETION_CHUNK.voffset("finish_reason")
_VT_ERROR = COMPLETION_CHUNK.voffset("error")


def chunk_is_final(buf: bytes | memoryview) -> bool:
    """Whether a chunk buffer ends its stream (a finish reason or an error).

    Read once per stream, at its end, straight from the vtable: a buffer whose
    offsets point outside it is not final.
    """
    try:
        n = len(buf)
        (root,) = _U32.unpack_from(buf, 0)
        if root + 4 > n:
            return False
        (soff,) = _I32.unpack_from(buf, root)
        vt = root - soff
        if vt < 0 or vt + 4 > n:
            return False
        (vsize,) = _U16.unpack_from(buf, vt)
        if vt + vsize > n:
            return False
        if vsize > _VT_ERROR and _U16.unpack_from(buf, vt + _VT_ERROR)[0]:
            return True
        if vsize > _VT_FINISH:
            (field,) = _U16.unpack_from(buf, vt + _VT_FINISH)
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
    whether the stream so far ends with a final chunk (read once, at the end).
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
        pos = 0
        size = 0
        while n - pos >= 4:
            (size,) = _U32.unpack_from(data, pos)
            if size > MAX_FRAME_BYTES:
                raise MalformedFrame(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
            end = pos + 4 + size
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
            (size,) = _U32.unpack_from(data, pos)
            out.append((pos + 4, pos + 4 + size))
            pos += 4 + size
        return out

    def finished(self) -> bool:
        """Whether the stream so far ends with a final chunk and nothing after it."""
        if self._carry or self._last is None:
            return False
        return chunk_is_final(memoryview(self._last)[self._last_at + 4 :])

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


def sse_event(chunk_buffer: bytes | memoryview) -> bytes:
    """One SSE event carrying a chunk buffer (not size-prefixed)."""
    return b"data: " + binascii.b2a_base64(chunk_buffer, newline=False) + b"\n\n"


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
