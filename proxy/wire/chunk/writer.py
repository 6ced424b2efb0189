"""Writing ``CompletionChunk`` frames by hand, without ``flatbuffers.Builder``.

- ``write_chunk`` writes any chunk (every field of the schema; tests decode it
  with the generated accessors and compare) as one size-prefixed frame.
- ``ChunkWriter`` writes the frames of one stream: its request id and model
  are laid out once, and a token delta (content, reasoning, or a tool call's
  argument fragment) is a cached head plus the delta's string. That is the
  per-token path of the stub and the backend adapters.

Layout (front to back, every ``uoffset`` pointing forward): the root offset,
the identifier, a vtable with an entry per field, the root table (soffset; the
uoffsets and scalars where ``Table.inline`` puts them: ``finish_reason``, the
one byte, last), then the children: strings (request id, model, content,
reasoning, stop sequence), the tool-call vector and its tables, the usage
table, the error table. Slots and inline layouts come from ``wire.layout``.
No I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from flatgate.proxy.wire.buffer import PACK_U32, PAD, string_bytes
from flatgate.proxy.wire.chunk.frames import ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.layout import (
    COMPLETION_CHUNK,
    ERROR,
    HEADER,
    REASONING_PART,
    TOOL_CALL_DELTA,
    USAGE,
    VTABLE_HEAD,
    Table,
)
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import CHUNK_IDENTIFIER, FinishReason

__all__ = ["ChunkWriter", "write_chunk"]

# The root table: field -> its offset (``_HEAD.pack`` takes the values in
# this order, after the soffset).
_AT = COMPLETION_CHUNK.inline
_TABLE = COMPLETION_CHUNK.packer(
    "request_id content tool_calls usage error index model reasoning stop_sequence "
    "reasoning_part extras finish_reason extras_dialect"
)
_FIELDS = len(COMPLETION_CHUNK.fields)
_VT_SIZE = VTABLE_HEAD + 2 * _FIELDS
_ROOT = HEADER + _VT_SIZE + (-_VT_SIZE % 4)
_TABLE_SIZE = _TABLE.size
# root offset, identifier, vtable (size, table size, entries), padding, the table
_HEAD = struct.Struct(
    f"<I4s{2 + _FIELDS}H{_ROOT - HEADER - _VT_SIZE}x" + COMPLETION_CHUNK.inline_format[1:]
)
_HEAD_SIZE = _HEAD.size
# Vtable entry list index of each field (2 + slot), for building entries.
_SLOT = {name: COMPLETION_CHUNK.slot(name) for name in COMPLETION_CHUNK.fields}


def _sub_vtable(table: Table) -> bytes:
    """The vtable of a sub-table with every field present, padded to 4 bytes
    (the table after it stays aligned)."""
    raw = struct.pack(
        f"<{2 + len(table.fields)}H",
        VTABLE_HEAD + 2 * len(table.fields),
        table.inline_size,
        *(table.inline[f] for f in table.fields),
    )
    return raw + bytes(-len(raw) % 4)


# Sub-tables: a vtable right before its table (soffset = the vtable's size).
_USAGE_VT = _sub_vtable(USAGE)
_USAGE_TABLE = struct.Struct(USAGE.inline_format)
_USAGE_ORDER = USAGE.inline_order
_ERROR_VT_SIZE = VTABLE_HEAD + 2 * len(ERROR.fields)
_ERROR_TABLE_SIZE = ERROR.inline_size
_ERROR_AT = ERROR.inline
# The error's vtable and table in one pack: its entries and string uoffsets
# are passed in slot order, which is its inline order.
_ERROR = struct.Struct(f"<{2 + len(ERROR.fields)}H" + ERROR.packer("code message").format[1:])
_CALL_AT = TOOL_CALL_DELTA.inline
_CALL_VT_SIZE = VTABLE_HEAD + 2 * len(TOOL_CALL_DELTA.fields)
_CALL_TABLE = TOOL_CALL_DELTA.packer("index id name arguments")
_CALL_SIZE = _CALL_VT_SIZE + _CALL_TABLE.size
_PART_AT = REASONING_PART.inline
_PART_VT_SIZE = VTABLE_HEAD + 2 * len(REASONING_PART.fields)
_PART_TABLE = REASONING_PART.packer("text opaque id dialect redacted")
if ERROR.fields != ("code", "message"):
    raise ImportError("write_chunk's error table no longer fits the schema")


def _utf8(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def _call_vtable(call: ToolCallDelta, id_: bytes, name: bytes, args: bytes) -> bytes:
    present = {"index": True, "id": bool(id_), "name": bool(name), "arguments": bool(args)}
    entries = [0] * len(TOOL_CALL_DELTA.fields)
    for f in TOOL_CALL_DELTA.fields:
        if present[f]:
            entries[TOOL_CALL_DELTA.slot(f)] = _CALL_AT[f]
    return struct.pack(f"<{2 + len(entries)}H", _CALL_VT_SIZE, _CALL_TABLE.size, *entries)


def _tool_calls(at: int, calls: Sequence[ToolCallDelta]) -> bytes:
    """The tool-call vector placed at ``at``, its tables and strings after it."""
    n = len(calls)
    tables = []
    pos = at + 4 + 4 * n  # where the first call's vtable goes
    offsets = []
    for i, call in enumerate(calls):
        id_, name, args = _utf8(call.id), _utf8(call.name), _utf8(call.arguments)
        table = pos + _CALL_VT_SIZE
        offsets.append(table - (at + 4 + 4 * i))
        strings = [s for s in (id_, name, args) if s]
        spos = table + _CALL_TABLE.size
        field_offs = {}
        for key, s in (("id", id_), ("name", name), ("arguments", args)):
            if s:
                field_offs[key] = spos - (table + _CALL_AT[key])
                spos += 4 + len(s) + (4 - (len(s) & 3))
        tables.append(_call_vtable(call, id_, name, args))
        tables.append(
            _CALL_TABLE.pack(
                _CALL_VT_SIZE,
                call.index,
                field_offs.get("id", 0),
                field_offs.get("name", 0),
                field_offs.get("arguments", 0),
            )
        )
        tables.extend(string_bytes(s) for s in strings)
        pos = spos
    return struct.pack(f"<{n + 1}I", n, *offsets) + b"".join(tables)


def _reasoning_part(at: int, part: ReasoningPart) -> bytes:
    """A reasoning part's vtable placed at ``at``, then its table and strings."""
    table = at + _PART_VT_SIZE
    spos = table + _PART_TABLE.size
    text, opaque, id_ = _utf8(part.text), part.opaque, _utf8(part.id)
    present = {
        "text": bool(text),
        "opaque": bool(opaque),
        "dialect": bool(part.dialect),
        "id": bool(id_),
        "redacted": part.redacted,
    }
    offs = {}
    strings = []
    for key, s in (("text", text), ("opaque", opaque), ("id", id_)):
        offs[key] = 0
        if s:
            offs[key] = spos - (table + _PART_AT[key])
            strings.append(string_bytes(s))
            spos += len(strings[-1])
    entries = [_PART_AT[f] if present[f] else 0 for f in REASONING_PART.fields]
    vtable = struct.pack(f"<{2 + len(entries)}H", _PART_VT_SIZE, _PART_TABLE.size, *entries)
    row = _PART_TABLE.pack(
        _PART_VT_SIZE, offs["text"], offs["opaque"], offs["id"], part.dialect, part.redacted
    )
    return vtable + row + b"".join(strings)


def write_chunk(
    *,
    request_id: str | bytes = "",
    content: str | bytes = "",
    tool_calls: Sequence[ToolCallDelta] = (),
    finish_reason: int = FinishReason.NONE,
    usage: Usage | None = None,
    error: ChunkError | None = None,
    index: int = 0,
    model: str | bytes = "",
    reasoning: str | bytes = "",
    stop_sequence: str | bytes = "",
    reasoning_part: ReasoningPart | None = None,
    extras: str | bytes = "",
    extras_dialect: int = 0,
    size_prefixed: bool = True,
) -> bytes:
    """One ``CompletionChunk``, laid out by hand (size-prefixed unless told not)."""
    root = _ROOT
    pos = _HEAD_SIZE
    parts: list[bytes] = []
    offs = dict.fromkeys(_AT, 0)
    for name, value in (
        ("request_id", request_id),
        ("model", model),
        ("content", content),
        ("reasoning", reasoning),
        ("stop_sequence", stop_sequence),
        ("extras", extras),
    ):
        if value:
            data = string_bytes(_utf8(value))
            offs[name] = pos - (root + _AT[name])
            parts.append(data)
            pos += len(data)
    if tool_calls:
        data = _tool_calls(pos, tool_calls)
        offs["tool_calls"] = pos - (root + _AT["tool_calls"])
        parts.append(data)
        pos += len(data)
    if usage is not None:
        table = pos + len(_USAGE_VT)
        offs["usage"] = table - (root + _AT["usage"])
        values = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_tokens": usage.cached_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        }
        parts.append(_USAGE_VT)
        parts.append(_USAGE_TABLE.pack(len(_USAGE_VT), *(values[f] for f in _USAGE_ORDER)))
        pos = table + _USAGE_TABLE.size
    if error is not None:
        code, message = _utf8(error.code), _utf8(error.message)
        table = pos + _ERROR_VT_SIZE
        offs["error"] = table - (root + _AT["error"])
        entries = [0] * len(ERROR.fields)
        field = [0] * len(ERROR.fields)
        spos = table + _ERROR_TABLE_SIZE
        strings = []
        for key, s in (("code", code), ("message", message)):
            if s:
                slot = ERROR.slot(key)
                entries[slot] = _ERROR_AT[key]
                field[slot] = spos - (table + _ERROR_AT[key])
                strings.append(string_bytes(s))
                spos += len(strings[-1])
        parts.append(
            _ERROR.pack(_ERROR_VT_SIZE, _ERROR_TABLE_SIZE, *entries, _ERROR_VT_SIZE, *field)
        )
        parts.extend(strings)
        pos = spos
    if reasoning_part is not None:
        data = _reasoning_part(pos, reasoning_part)
        offs["reasoning_part"] = pos + _PART_VT_SIZE - (root + _AT["reasoning_part"])
        parts.append(data)
        pos += len(data)
    if index:
        offs["index"] = index
    entries = [0] * _FIELDS
    for name, at in _AT.items():
        present = offs[name] if name not in ("index", "finish_reason", "extras_dialect") else 0
        if (
            present
            or (name == "index" and index)
            or (name == "finish_reason" and finish_reason)
            or (name == "extras_dialect" and extras_dialect)
        ):
            entries[_SLOT[name]] = at
    head = _HEAD.pack(
        root,
        CHUNK_IDENTIFIER,
        _VT_SIZE,
        _TABLE_SIZE,
        *entries,
        root - HEADER,
        offs["request_id"],
        offs["content"],
        offs["tool_calls"],
        offs["usage"],
        offs["error"],
        index,
        offs["model"],
        offs["reasoning"],
        offs["stop_sequence"],
        offs["reasoning_part"],
        offs["extras"],
        int(finish_reason),
        extras_dialect,
    )
    body = head + b"".join(parts)
    if size_prefixed:
        return PACK_U32(len(body)) + body
    return body


class ChunkWriter:
    """The frames of one stream, with its request id and model laid out once.

    ``content``, ``reasoning`` and ``arguments`` (a tool call's argument
    fragment) are the per-token paths: a cached head (everything up to the
    delta's string, whose offset is then fixed) plus the string. ``chunk``
    writes any other chunk of the stream (tool-call starts, the final chunk,
    errors) with ``write_chunk``.
    """

    __slots__ = ("_heads", "_model", "_request_id")

    def __init__(self, request_id: str | bytes = "", model: str | bytes = "") -> None:
        self._request_id = _utf8(request_id)
        self._model = _utf8(model)
        self._heads: dict[tuple[str, int, int], bytes] = {}

    def _head(self, field: str, index: int, tool: int) -> bytes:
        key = (field, index, tool)
        head = self._heads.get(key)
        if head is None:
            marker = b"\x01" * 4  # a non-empty stand-in, cut off below
            if field == "arguments":
                full = write_chunk(
                    request_id=self._request_id,
                    model=self._model,
                    index=index,
                    tool_calls=(ToolCallDelta(tool, arguments=marker.decode()),),
                    size_prefixed=False,
                )
            else:
                full = write_chunk(
                    request_id=self._request_id,
                    model=self._model,
                    index=index,
                    size_prefixed=False,
                    content=marker if field == "content" else b"",
                    reasoning=marker if field == "reasoning" else b"",
                )
            # The stand-in is the last thing written: its length word, 4
            # bytes, then the NUL and padding.
            head = full[: len(full) - 4 - 4 - 4]
            self._heads[key] = head
        return head

    def _frame(self, head: bytes, text: str) -> bytes:
        data = text.encode("utf-8")
        n = len(data)
        pad = PAD[n & 3]
        return b"".join((PACK_U32(len(head) + 4 + n + len(pad)), head, PACK_U32(n), data, pad))

    def content(self, text: str, index: int = 0) -> bytes:
        return self._frame(self._head("content", index, 0), text)

    def reasoning(self, text: str, index: int = 0) -> bytes:
        return self._frame(self._head("reasoning", index, 0), text)

    def arguments(self, tool: int, text: str, index: int = 0) -> bytes:
        return self._frame(self._head("arguments", index, tool), text)

    def chunk(
        self,
        *,
        content: str = "",
        tool_calls: Sequence[ToolCallDelta] = (),
        finish_reason: int = FinishReason.NONE,
        usage: Usage | None = None,
        error: ChunkError | None = None,
        index: int = 0,
        reasoning: str = "",
        stop_sequence: str = "",
        reasoning_part: ReasoningPart | None = None,
        extras: str = "",
        extras_dialect: int = 0,
    ) -> bytes:
        return write_chunk(
            request_id=self._request_id,
            model=self._model,
            content=content,
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            usage=usage,
            error=error,
            index=index,
            reasoning=reasoning,
            stop_sequence=stop_sequence,
            reasoning_part=reasoning_part,
            extras=extras,
            extras_dialect=extras_dialect,
        )
