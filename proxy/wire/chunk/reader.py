"""A fast, bounds-checked reader of ``CompletionChunk`` frames (the edge reads with it).

Owns ``read_chunk``: the same ``wire.chunk.frames.Chunk`` that
``wire.chunk.stock.decode_chunk`` returns, read with ``struct`` straight from
the frame instead of through the generated accessors (which allocate a table
object per access): a content delta reads in about a sixth of the time, which
is what keeps chunk-to-SSE under its per-token budget. Every offset it follows
(root, vtable, field, string, vector, sub-table) is checked to lie inside the
frame (``wire.buffer.Window`` and ``window_string``, whose ``MalformedBuffer``
it turns into ``wire.chunk.frames.MalformedFrame``); a finish reason this
flatgate does not know (a newer writer's) reads as STOP.

``read_outcome`` reads only what a log line wants from a final chunk (its
completion tokens and error code), with the same checks.

Pure: no I/O, never writes to the frame.
"""

from __future__ import annotations

from flatgate.proxy.wire.buffer import (
    ENTRIES,
    I32,
    STRUCTS,
    U32,
    UNPACK,
    VT_HEAD,
    MalformedBuffer,
    Window,
    window_string,
)
from flatgate.proxy.wire.chunk.frames import (
    Chunk,
    ChunkError,
    MalformedFrame,
    ToolCallDelta,
    Usage,
)
from flatgate.proxy.wire.layout import (
    COMPLETION_CHUNK,
    ERROR,
    IDENTIFIER_AT,
    REASONING_PART,
    TOOL_CALL_DELTA,
    USAGE,
)
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import CHUNK_IDENTIFIER, FinishReason, finish_reason_of

__all__ = ["last_outcome", "read_chunk", "read_outcome"]

_FINISH = tuple(FinishReason)
_KNOWN = len(_FINISH)
_NO_FIELDS: tuple[int, ...] = ()
# The most vtable entries a chunk's table may have (a newer writer's appended
# fields included); a larger vtable is malformed.
_MOST = 32
_VT_MAX = 4 + 2 * _MOST
_ID_AT, _ID_END = IDENTIFIER_AT, IDENTIFIER_AT + len(CHUNK_IDENTIFIER)


def _get(fields: tuple[int, ...], i: int) -> int:
    return fields[i] if i < len(fields) else 0


# Slots, by name, from the layout.
_REQUEST_ID = COMPLETION_CHUNK.slot("request_id")
_CONTENT = COMPLETION_CHUNK.slot("content")
_TOOL_CALLS = COMPLETION_CHUNK.slot("tool_calls")
_FINISH_REASON = COMPLETION_CHUNK.slot("finish_reason")
_USAGE = COMPLETION_CHUNK.slot("usage")
_ERROR = COMPLETION_CHUNK.slot("error")
_INDEX = COMPLETION_CHUNK.slot("index")
_MODEL = COMPLETION_CHUNK.slot("model")
_REASONING = COMPLETION_CHUNK.slot("reasoning")
_STOP_SEQUENCE = COMPLETION_CHUNK.slot("stop_sequence")
_REASONING_PART = COMPLETION_CHUNK.slot("reasoning_part")
_EXTRAS = COMPLETION_CHUNK.slot("extras")
_EXTRAS_DIALECT = COMPLETION_CHUNK.slot("extras_dialect")
_P_TEXT = REASONING_PART.slot("text")
_P_OPAQUE = REASONING_PART.slot("opaque")
_P_DIALECT = REASONING_PART.slot("dialect")
_P_ID = REASONING_PART.slot("id")
_P_REDACTED = REASONING_PART.slot("redacted")
_BYTE = STRUCTS[REASONING_PART.spec("dialect").fmt]
_BOOL = STRUCTS[REASONING_PART.spec("redacted").fmt]
_EXTRAS_DIALECT_FMT = STRUCTS[COMPLETION_CHUNK.spec("extras_dialect").fmt]
_TC_INDEX = TOOL_CALL_DELTA.slot("index")
_TC_ID = TOOL_CALL_DELTA.slot("id")
_TC_NAME = TOOL_CALL_DELTA.slot("name")
_TC_ARGUMENTS = TOOL_CALL_DELTA.slot("arguments")
_U_PROMPT = USAGE.slot("prompt_tokens")
_U_COMPLETION = USAGE.slot("completion_tokens")
_U_CACHED = USAGE.slot("cached_tokens")
_U_REASONING = USAGE.slot("reasoning_tokens")
_U_CACHE_WRITE = USAGE.slot("cache_write_tokens")
_E_CODE = ERROR.slot("code")
_E_MESSAGE = ERROR.slot("message")
# Scalars: their readers, and the width the bounds checks use.
_finish = UNPACK[COMPLETION_CHUNK.spec("finish_reason").fmt]
_index = UNPACK[COMPLETION_CHUNK.spec("index").fmt]
_INDEX_SIZE = COMPLETION_CHUNK.spec("index").size
_TC_INDEX_FMT = STRUCTS[TOOL_CALL_DELTA.spec("index").fmt]
_USAGE_FMT = STRUCTS[USAGE.spec("prompt_tokens").fmt]
if any(f.fmt != _USAGE_FMT.format[1:] for f in USAGE.specs):
    raise ImportError("read_chunk reads every usage field as one type")
# Root vtables shorter than every field read are padded with absent fields.
_SLOTS = len(COMPLETION_CHUNK.fields)
_PAD = [(0,) * (_SLOTS - k) for k in range(_SLOTS)]


def read_chunk(frame: bytes, offset: int = 4, end: int | None = None) -> Chunk:
    """The chunk in ``frame[offset:end]`` (offset 4: a size-prefixed frame).

    With ``end``, a chunk is read in place inside a larger buffer (several
    frames as they arrived, ``FrameCutter.spans``): no offset may leave it.
    The root table is read inline (the per-token path: a content delta costs
    one bounds-checked read per string); rarer fields go through ``Window``.
    """
    data = frame
    stop = len(data) if end is None else min(end, len(data))
    # Every check raises MalformedBuffer, the lookups' error: turned into
    # this reader's once, below (a try costs nothing until it catches).
    try:
        root, t_size, fields = _root(data, offset, stop)
        # The hot shape first: request id, content, maybe finish reason and model.
        field = fields[_REQUEST_ID]
        request_id = window_string(data, offset, stop, root + field, "request_id") if field else ""
        field = fields[_CONTENT]
        content = window_string(data, offset, stop, root + field, "content") if field else ""
        field = fields[_FINISH_REASON]
        finish = _finish(data, root + field)[0] if field else 0
        field = fields[_INDEX]
        if field:
            if field + _INDEX_SIZE > t_size:
                raise MalformedBuffer("index out of bounds")
            index = _index(data, root + field)[0]
        else:
            index = 0
        field = fields[_MODEL]
        model = window_string(data, offset, stop, root + field, "model") if field else ""
        field = fields[_REASONING]
        reasoning = window_string(data, offset, stop, root + field, "reasoning") if field else ""
        # Only a final chunk names its stop sequence: a token delta never looks.
        stop_sequence = ""
        if finish:
            field = fields[_STOP_SEQUENCE]
            if field:
                stop_sequence = window_string(data, offset, stop, root + field, "stop_sequence")
        calls: tuple[ToolCallDelta, ...] = ()
        usage = None
        error = None
        part = None
        extras = ""
        dialect = 0
        if (
            fields[_TOOL_CALLS]
            or fields[_USAGE]
            or fields[_ERROR]
            or fields[_REASONING_PART]
            or fields[_EXTRAS]
        ):
            f = Window(data, offset, stop)
            if fields[_REASONING_PART]:
                part = _reasoning_part(f, root, fields[_REASONING_PART])
            if fields[_EXTRAS]:
                extras = f.string(root, fields[_EXTRAS], "extras")
                dialect = f.scalar(root, fields[_EXTRAS_DIALECT], _EXTRAS_DIALECT_FMT, "dialect")
            if fields[_TOOL_CALLS]:
                calls = _tool_calls(f, root, fields[_TOOL_CALLS])
            if fields[_USAGE]:
                t, tf = f.table(f.ref(root, fields[_USAGE], "usage"), "usage", _MOST)
                usage = Usage(
                    f.scalar(t, _get(tf, _U_PROMPT), _USAGE_FMT, "prompt_tokens"),
                    f.scalar(t, _get(tf, _U_COMPLETION), _USAGE_FMT, "completion_tokens"),
                    f.scalar(t, _get(tf, _U_CACHED), _USAGE_FMT, "cached_tokens"),
                    f.scalar(t, _get(tf, _U_REASONING), _USAGE_FMT, "reasoning_tokens"),
                    f.scalar(t, _get(tf, _U_CACHE_WRITE), _USAGE_FMT, "cache_write_tokens"),
                )
            if fields[_ERROR]:
                t, tf = f.table(f.ref(root, fields[_ERROR], "error"), "error", _MOST)
                error = ChunkError(
                    f.string(t, _get(tf, _E_CODE), "code"),
                    f.string(t, _get(tf, _E_MESSAGE), "message"),
                )
    except MalformedBuffer as exc:
        raise MalformedFrame(f"chunk frame: {exc}") from None
    return Chunk(
        request_id,
        content,
        calls,
        _FINISH[finish] if 0 <= finish < _KNOWN else finish_reason_of(finish),
        usage,
        error,
        index,
        model,
        reasoning,
        stop_sequence,
        part,
        extras,
        dialect,
    )


def _root(data: bytes, offset: int, stop: int) -> tuple[int, int, tuple[int, ...]]:
    """The root table of the chunk at ``offset``: where it is, its size and
    its vtable's field offsets, padded to every slot; ``MalformedBuffer``
    unless the identifier, the table and its vtable are within ``stop``."""
    if stop - offset < 8 or data[offset + _ID_AT : offset + _ID_END] != CHUNK_IDENTIFIER:
        raise MalformedBuffer("missing or wrong file identifier")
    root = offset + U32(data, offset)[0]
    if root + 4 > stop:
        raise MalformedBuffer("root table out of bounds")
    vt = root - I32(data, root)[0]
    if vt < offset or vt + 4 > stop:
        raise MalformedBuffer("root table vtable out of bounds")
    vt_size, t_size = VT_HEAD(data, vt)
    if vt_size < 4 or vt_size & 1 or vt_size > _VT_MAX or vt + vt_size > stop:
        raise MalformedBuffer(f"root table vtable size {vt_size}")
    if root + t_size > stop:
        raise MalformedBuffer("root table out of bounds")
    n = (vt_size - 4) >> 1
    fields = ENTRIES[n](data, vt + 4) if n else _NO_FIELDS
    if n and max(fields) + 1 > t_size:
        raise MalformedBuffer("root table field outside its table")
    if n < _SLOTS:
        fields += _PAD[n]
    return root, t_size, fields


def _reasoning_part(f: Window, root: int, field: int) -> ReasoningPart:
    t, tf = f.table(f.ref(root, field, "reasoning_part"), "reasoning_part", _MOST)
    return ReasoningPart(
        f.string(t, _get(tf, _P_TEXT), "reasoning_part text"),
        f.blob(t, _get(tf, _P_OPAQUE), "reasoning_part opaque"),
        f.scalar(t, _get(tf, _P_DIALECT), _BYTE, "reasoning_part dialect"),
        f.string(t, _get(tf, _P_ID), "reasoning_part id"),
        bool(f.scalar(t, _get(tf, _P_REDACTED), _BOOL, "reasoning_part redacted")),
    )


def _tool_calls(f: Window, root: int, field: int) -> tuple[ToolCallDelta, ...]:
    data = f.data
    vec = f.ref(root, field, "tool_calls")
    count = U32(data, vec)[0]
    f.check(vec + 4, 4 * count, "tool_calls")
    out = []
    for i in range(count):
        at = vec + 4 + 4 * i
        t, tf = f.table(at + U32(data, at)[0], "tool call", _MOST)
        out.append(
            ToolCallDelta(
                index=f.scalar(t, _get(tf, _TC_INDEX), _TC_INDEX_FMT, "tool call index"),
                id=f.string(t, _get(tf, _TC_ID), "tool call id"),
                name=f.string(t, _get(tf, _TC_NAME), "tool call name"),
                arguments=f.string(t, _get(tf, _TC_ARGUMENTS), "tool call arguments"),
            )
        )
    return tuple(out)


def read_outcome(frame: bytes, offset: int = 4, end: int | None = None) -> tuple[int | None, str]:
    """``(completion_tokens, error code)`` of the chunk in ``frame[offset:end]``:
    ``None`` when it carries no usage, ``""`` when no error. Every offset it
    follows is bounds-checked as in ``read_chunk``; ``MalformedFrame`` if not."""
    data = frame
    stop = len(data) if end is None else min(end, len(data))
    try:
        root, _, fields = _root(data, offset, stop)
        usage, error = fields[_USAGE], fields[_ERROR]
        if not usage and not error:
            return None, ""
        f = Window(data, offset, stop)
        tokens = None
        if usage:
            t = f.ref(root, usage, "usage")
            completion = f.slot(t, _U_COMPLETION, "usage", _MOST)
            tokens = f.scalar(t, completion, _USAGE_FMT, "completion_tokens")
        code = ""
        if error:
            t = f.ref(root, error, "error")
            code = f.string(t, f.slot(t, _E_CODE, "error", _MOST), "code") or "error"
    except MalformedBuffer as exc:
        raise MalformedFrame(f"chunk frame: {exc}") from None
    return tokens, code


def last_outcome(frames: bytes) -> tuple[int | None, str]:
    """``read_outcome`` of the last of ``frames`` (whole size-prefixed frames:
    the final chunk, when they end an answer); ``(None, "")`` when there is
    none or it is malformed."""
    pos, n = 0, len(frames)
    last = 0
    while pos + 4 <= n:  # the last frame's start (frames are whole)
        last = pos
        pos += 4 + U32(frames, pos)[0]
    try:
        return read_outcome(frames, last + 4, pos)
    except MalformedFrame:
        return None, ""
