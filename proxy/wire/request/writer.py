"""A ``CompletionRequest`` FlatBuffer written by hand: the fast request writer.

Owns ``RequestWriter``, the schema-specific writer the edge's client APIs
write through (``edge_translator.openai.translate`` for OpenAI Chat
Completions, ``edge_translator.anthropic.translate`` for Anthropic
Messages): each maps its own request onto these calls, in this
order: ``strings`` (the root's strings), ``messages`` (every message, as
plain tuples: the writer loops over them with locals, which is what keeps the
per-message cost down), then any of ``tools``, ``stops``, ``metadata``, and
``finish`` (the scalars; returns the bytes). What a field means is the
caller's business; how it is laid out is this module's.

It lays the buffer out front to back in one ``bytearray`` (root table first,
children after it, since every ``uoffset`` points forward), with fixed table
layouts packed by precompiled ``struct.Struct`` objects (each table's inline
layout is ``wire.layout``'s ``Table.inline``), vtables shared per shape, and
strings written from their UTF-8 bytes. About a third of the calls
of a stock builder; the stock-builder reference it is tested and benchmarked
against lives in ``benchmarks/codecs/stock_writer.py``.

Conventions: empty strings and empty vectors are omitted (absent reads as ""),
optional scalars are written only when given (``None`` is not given; ``top_k``,
``max_tokens`` and ``n`` are not given at 0), booleans only when true.
Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from flatgate.proxy.wire.buffer import PACK_U32, PACK_U32_INTO, PAD, put_string
from flatgate.proxy.wire.layout import (
    COMPLETION_REQUEST,
    HEADER,
    KEY_VALUE,
    MESSAGE,
    REASONING_PART,
    TOOL,
    TOOL_CALL,
)
from flatgate.proxy.wire.parts import ContentPart, ReasoningPart
from flatgate.proxy.wire.request.content import write_parts
from flatgate.proxy.wire.request.tables import (
    offset_vector as _offset_vector,
)
from flatgate.proxy.wire.request.tables import (
    shared_vtable as _vtable,
)
from flatgate.proxy.wire.request.tables import (
    string_offsets as _string_offsets,
)
from flatgate.proxy.wire.request.tables import (
    strings_after as _strings_after,
)
from flatgate.proxy.wire.request.tables import (
    vtables as _vtables,
)
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER

__all__ = ["Call", "ContentPart", "RequestWriter", "ToolSpec", "WireMessage"]

# A tool call in the history: (id, name, arguments JSON), UTF-8.
Call = tuple[bytes, bytes, bytes]
# A message: (role, text) when it has non-empty text and nothing else, or
# (role, content, name, tool call id, tool calls, is_error[, reasoning parts[,
# content parts]]); strings UTF-8. A message with content parts has no
# content (its text parts stand among them).
WireMessage = (
    tuple[int, bytes]
    | tuple[int, bytes, bytes, bytes, Sequence[Call], bool]
    | tuple[int, bytes, bytes, bytes, Sequence[Call], bool, Sequence[ReasoningPart]]
    | tuple[
        int,
        bytes,
        bytes,
        bytes,
        Sequence[Call],
        bool,
        Sequence[ReasoningPart],
        Sequence[ContentPart],
    ]
)
# A tool definition: (name, description, parameters JSON Schema, strict), UTF-8.
ToolSpec = tuple[bytes, bytes, bytes, bool]

# --------------------------------------------------------------------------
# Layout: [root uoffset][b"FGRQ"][root vtable][pad][root table][root strings]
# [messages vector][per message: (vtable)(table)(strings)(tool calls)]
# [tools][stop][metadata]. Everything stays 4-aligned; the root table starts at
# 4 mod 8 so that ``seed`` (the one 8-byte field, first after the soffset) is
# 8-aligned. Vtables may sit before or after the tables that use them (a
# signed soffset), as with the stock builder when it shares a vtable. Every
# table's inline layout (where each field sits, the packer's field order) is
# ``Table.inline``; the packs below pass their values in that order, which
# ``Table.packer`` holds them to.
# --------------------------------------------------------------------------


# The root table: soffset, seed (8 bytes, 8-aligned as the table starts at
# 4 mod 8), the 4-byte fields, then the 1-byte ones. Field -> its offset in
# the root table (``_AT``), and -> its index in the vtable list (``_V``: size,
# table size, then one entry per slot).
_AT = COMPLETION_REQUEST.inline
_ROOT_TABLE = COMPLETION_REQUEST.packer(
    "seed request_id model_name max_tokens temperature tools messages tool_choice_name "
    "top_p stop presence_penalty frequency_penalty n user tenant metadata response_format "
    "top_k extras provider tool_choice stream include_usage parallel_tool_calls extras_dialect"
)
_R_SIZE = _ROOT_TABLE.size
_V = {name: 2 + COMPLETION_REQUEST.slot(name) for name in COMPLETION_REQUEST.fields}
_ROOT_VT = struct.Struct(f"<{2 + len(COMPLETION_REQUEST.fields)}H")
_ROOT_VT_POS = HEADER
_ROOT_POS = _ROOT_VT_POS + _ROOT_VT.size
_ROOT_POS += (4 - _ROOT_POS) % 8  # 4 mod 8
# Header (root offset, identifier), a zeroed root vtable and table to fill in.
_HEAD = PACK_U32(_ROOT_POS) + REQUEST_IDENTIFIER + bytes(_ROOT_POS - HEADER + _R_SIZE)
# Root vtable: size, table size, then one voffset per slot (0: absent).
_ROOT_VT_EMPTY = [_ROOT_VT.size, _R_SIZE] + [0] * len(COMPLETION_REQUEST.fields)
# (vtable index, table offset) of each root field, named for the hot path.
_V_REQUEST_ID, _AT_REQUEST_ID = _V["request_id"], _AT["request_id"]
_V_MODEL_NAME, _AT_MODEL_NAME = _V["model_name"], _AT["model_name"]
_V_TOOL_CHOICE, _AT_TOOL_CHOICE = _V["tool_choice"], _AT["tool_choice"]
_V_TOOL_CHOICE_NAME, _AT_TOOL_CHOICE_NAME = _V["tool_choice_name"], _AT["tool_choice_name"]
_V_USER, _AT_USER = _V["user"], _AT["user"]
_V_TENANT, _AT_TENANT = _V["tenant"], _AT["tenant"]
_V_RESPONSE_FORMAT, _AT_RESPONSE_FORMAT = _V["response_format"], _AT["response_format"]
_V_EXTRAS, _AT_EXTRAS = _V["extras"], _AT["extras"]
_V_EXTRAS_DIALECT, _AT_EXTRAS_DIALECT = _V["extras_dialect"], _AT["extras_dialect"]
_V_MESSAGES, _AT_MESSAGES = _V["messages"], _AT["messages"]
_V_TOOLS, _AT_TOOLS = _V["tools"], _AT["tools"]
_V_STOP, _AT_STOP = _V["stop"], _AT["stop"]
_V_METADATA, _AT_METADATA = _V["metadata"], _AT["metadata"]
_V_MAX_TOKENS, _AT_MAX_TOKENS = _V["max_tokens"], _AT["max_tokens"]
_V_TEMPERATURE, _AT_TEMPERATURE = _V["temperature"], _AT["temperature"]
_V_TOP_P, _AT_TOP_P = _V["top_p"], _AT["top_p"]
_V_TOP_K, _AT_TOP_K = _V["top_k"], _AT["top_k"]
_V_SEED, _AT_SEED = _V["seed"], _AT["seed"]
_V_PRESENCE, _AT_PRESENCE = _V["presence_penalty"], _AT["presence_penalty"]
_V_FREQUENCY, _AT_FREQUENCY = _V["frequency_penalty"], _AT["frequency_penalty"]
_V_N, _AT_N = _V["n"], _AT["n"]
_V_PROVIDER, _AT_PROVIDER = _V["provider"], _AT["provider"]
_V_STREAM, _AT_STREAM = _V["stream"], _AT["stream"]
_V_INCLUDE_USAGE, _AT_INCLUDE_USAGE = _V["include_usage"], _AT["include_usage"]
_V_PTC, _AT_PTC = _V["parallel_tool_calls"], _AT["parallel_tool_calls"]
if _ROOT_POS % 8 != 4 or _AT["seed"] != 4:
    raise ImportError("RequestWriter's root layout no longer fits the schema")


# Message (role, slot 0, always written). Bits of a message's vtable mask, in
# slot order: content, name, tool_calls, tool_call_id, is_error, reasoning, parts.
_MSG = MESSAGE.packer("content name tool_calls tool_call_id reasoning parts role is_error")
_MSG_AT = MESSAGE.inline
_MSG_SIZE = _MSG.size
_MSG_VTS = _vtables(
    _MSG_SIZE,
    tuple(_MSG_AT[f] for f in MESSAGE.fields),
    always=frozenset({MESSAGE.slot("role")}),
)
# A message of a role and text alone (the common case) has a table of its
# own, narrower than ``Table.inline``'s (which has room for every field):
# the soffset, content's uoffset, role, padding, then its string's length
# prefix. Its vtable covers slots 0 and 1 only (a reader takes the slots
# past a vtable's end as absent), so text messages cost what they did before
# fields were appended to Message: 12 bytes and an 8-byte vtable, shared.
_TEXT_MSG = struct.Struct("<iIbxxxI")
_TEXT_SIZE = _TEXT_MSG.size - 4
_TEXT_AT_CONTENT, _TEXT_AT_ROLE = 4, 8
# Slot 0 is role, slot 1 content (checked below with the other layouts).
_TEXT_VT = struct.pack("<4H", 8, _TEXT_SIZE, _TEXT_AT_ROLE, _TEXT_AT_CONTENT)
# Its content's uoffset: from the field to the string right after the table.
_TEXT_UOFFSET = _TEXT_SIZE - _TEXT_AT_CONTENT
# The text table's shared vtable, keyed above every other (``tables``' keys).
_TEXT_KEY = 1 << 30
_MSG_CONTENT_AT, _MSG_NAME_AT = _MSG_AT["content"], _MSG_AT["name"]
_MSG_CALLS_AT, _MSG_CALL_ID_AT = _MSG_AT["tool_calls"], _MSG_AT["tool_call_id"]
_MSG_REASONING_AT, _MSG_PARTS_AT = _MSG_AT["reasoning"], _MSG_AT["parts"]
# A reasoning part (rare: written field by field, its vtable shared by shape).
_PART = REASONING_PART.packer("text opaque id dialect redacted")
_PART_AT = REASONING_PART.inline
_PART_VTS = _vtables(_PART.size, tuple(_PART_AT[f] for f in REASONING_PART.fields))
_PART_TEXT_AT, _PART_OPAQUE_AT, _PART_ID_AT = _PART_AT["text"], _PART_AT["opaque"], _PART_AT["id"]
# Tables of leading strings (``_strings_table``), then a scalar tail.
_TOOL = TOOL.packer("name description parameters strict")
_TOOL_AT = TOOL.inline
_TOOL_VTS = _vtables(_TOOL.size, tuple(_TOOL_AT[f] for f in TOOL.fields))
_CALL = TOOL_CALL.packer("id name arguments")
_CALL_AT = TOOL_CALL.inline
_CALL_VTS = _vtables(_CALL.size, tuple(_CALL_AT[f] for f in TOOL_CALL.fields))
_KV = KEY_VALUE.packer("key value")
_KV_AT = KEY_VALUE.inline
_KV_VTS = _vtables(_KV.size, tuple(_KV_AT[f] for f in KEY_VALUE.fields))
# A key's string follows the table, and the value's the key's.
_KV_KEY, _KV_VALUE = _KV.size - _KV_AT["key"], _KV.size - _KV_AT["value"]
if (
    MESSAGE.spec("role").fmt != "b"
    or MESSAGE.fields
    != ("role", "content", "name", "tool_calls", "tool_call_id", "is_error", "reasoning", "parts")
    or REASONING_PART.fields != ("text", "opaque", "dialect", "id", "redacted")
    or TOOL.fields != ("name", "description", "parameters", "strict")
    or TOOL_CALL.fields != ("id", "name", "arguments")
    or KEY_VALUE.fields != ("key", "value")
):
    raise ImportError("RequestWriter's table layouts no longer fit the schema")

# Offset-vector heads (count, then the offsets) for the short vectors (stop).
_VEC_HEADS = tuple(struct.Struct(f"<{n + 1}I") for n in range(5))

# Tables written by ``_strings_table``; the kind keys their shared vtables
# (message vtables are keyed by their mask alone, below 256).
_KIND_CALL, _KIND_TOOL, _KIND_KV, _KIND_PART = 1, 2, 3, 4
# Per kind: its vtables, its packer, where its first string field sits.
_KINDS: dict[int, tuple[tuple[bytes, ...], struct.Struct, int]] = {
    _KIND_CALL: (_CALL_VTS, _CALL, _CALL_AT["id"]),
    _KIND_TOOL: (_TOOL_VTS, _TOOL, _TOOL_AT["name"]),
    _KIND_KV: (_KV_VTS, _KV, _KV_AT["key"]),
}


def _strings_table(
    buf: bytearray,
    vt_pos: dict[int, int],
    kind: int,
    strings: Sequence[bytes],
    *,
    tail: tuple[int, ...] = (),
    mask_extra: int = 0,
) -> int:
    """Append a table whose leading fields are strings (4 bytes each, from
    offset 4), followed by ``tail`` scalars, then its strings right after it;
    returns the table position."""
    vts, packer, field0 = _KINDS[kind]
    mask = mask_extra
    bit = 1
    for data in strings:
        if data:
            mask |= bit
        bit <<= 1
    key = kind << 8 | mask
    vpos = _vtable(buf, vt_pos, key, vts[mask])
    tpos = len(buf)
    first = tpos + packer.size
    buf += packer.pack(tpos - vpos, *_string_offsets(first, tpos + field0, strings), *tail)
    _strings_after(buf, strings)
    return tpos


def _reasoning_part(buf: bytearray, vt_pos: dict[int, int], part: ReasoningPart) -> int:
    """A reasoning part: its table, then its strings and payload; returns the
    table position."""
    text, opaque, id_ = part.text.encode(), part.opaque, part.id.encode()
    dialect, redacted = part.dialect, part.redacted
    mask = (
        (1 if text else 0)
        | (2 if opaque else 0)
        | (4 if dialect else 0)
        | (8 if id_ else 0)
        | (16 if redacted else 0)
    )
    key = _KIND_PART << 8 | mask
    vpos = _vtable(buf, vt_pos, key, _PART_VTS[mask])
    tpos = len(buf)
    # text, opaque (length word, bytes, padding: a string's layout) and id follow.
    at = tpos + _PART.size
    t_off = o_off = i_off = 0
    if text:
        t_off = at - (tpos + _PART_TEXT_AT)
        at += len(text) + 8 - (len(text) & 3)
    if opaque:
        o_off = at - (tpos + _PART_OPAQUE_AT)
        at += len(opaque) + 8 - (len(opaque) & 3)
    if id_:
        i_off = at - (tpos + _PART_ID_AT)
    buf += _PART.pack(tpos - vpos, t_off, o_off, i_off, dialect, redacted)
    _strings_after(buf, (text, opaque, id_))
    return tpos


def _message(  # noqa: PLR0917 - one call per message of the rare shape, positional
    buf: bytearray,
    vt_pos: dict[int, int],
    role: int,
    content: bytes,
    name: bytes,
    call_id: bytes,
    calls: Sequence[Call],
    is_error: bool,
    reasoning: Sequence[ReasoningPart] = (),
    parts: Sequence[ContentPart] = (),
) -> int:
    """A message of any shape: the table, its strings, then its tool calls,
    reasoning parts and content parts; returns the table position."""
    mask = (
        (1 if content else 0)
        | (2 if name else 0)
        | (4 if calls else 0)
        | (8 if call_id else 0)
        | (16 if is_error else 0)
        | (32 if reasoning else 0)
        | (64 if parts else 0)
    )
    vpos = _vtable(buf, vt_pos, mask, _MSG_VTS[mask])
    tpos = len(buf)
    # The strings follow the table in this order, then the tool-call vector.
    at = tpos + _MSG_SIZE
    c_off = n_off = id_off = calls_off = 0
    if content:
        c_off = at - (tpos + _MSG_CONTENT_AT)
        at += len(content) + 8 - (len(content) & 3)
    if name:
        n_off = at - (tpos + _MSG_NAME_AT)
        at += len(name) + 8 - (len(name) & 3)
    if call_id:
        id_off = at - (tpos + _MSG_CALL_ID_AT)
        at += len(call_id) + 8 - (len(call_id) & 3)
    if calls:
        calls_off = at - (tpos + _MSG_CALLS_AT)
    buf += _MSG.pack(tpos - vpos, c_off, n_off, calls_off, id_off, 0, 0, role, is_error)
    _strings_after(buf, (content, name, call_id))
    if calls:
        vec = _offset_vector(buf, len(calls))
        for i, call in enumerate(calls):
            cpos = _strings_table(buf, vt_pos, _KIND_CALL, call)
            PACK_U32_INTO(buf, vec + 4 + 4 * i, cpos - (vec + 4 + 4 * i))
    if reasoning:
        vec = _offset_vector(buf, len(reasoning))
        PACK_U32_INTO(buf, tpos + _MSG_REASONING_AT, vec - (tpos + _MSG_REASONING_AT))
        for i, part in enumerate(reasoning):
            ppos = _reasoning_part(buf, vt_pos, part)
            PACK_U32_INTO(buf, vec + 4 + 4 * i, ppos - (vec + 4 + 4 * i))
    if parts:
        vec = write_parts(buf, vt_pos, parts)
        PACK_U32_INTO(buf, tpos + _MSG_PARTS_AT, vec - (tpos + _MSG_PARTS_AT))
    return tpos


class RequestWriter:
    """One ``CompletionRequest`` being written (see the module docstring for
    the order of calls)."""

    __slots__ = ("_buf", "_meta", "_msgs", "_vals", "_vt", "_vt_pos")

    def __init__(self) -> None:
        self._buf = bytearray(_HEAD)
        self._vt = _ROOT_VT_EMPTY.copy()
        # Root uoffsets of the children, as they are written: request_id,
        # model_name, tool_choice_name, user, tenant, response_format, tools,
        # stop, extras.
        self._vals = [0, 0, 0, 0, 0, 0, 0, 0, 0]
        self._msgs = 0
        self._meta = 0
        # Shared vtables written so far: message ones by their field mask,
        # other tables' by kind << 8 | mask.
        self._vt_pos: dict[int, int] = {}

    def strings(
        self,
        *,
        request_id: str,
        model_name: str,
        tenant: str,
        user: str,
        tool_choice_name: str,
        response_format: bytes,
        extras: bytes = b"",
    ) -> None:
        """The root's strings, right after the root table (call first);
        ``extras``: the client's fields with no slot, one JSON object text."""
        buf, vt, vals, put = self._buf, self._vt, self._vals, put_string
        if request_id:
            vals[0] = put(buf, request_id.encode()) - (_ROOT_POS + _AT_REQUEST_ID)
            vt[_V_REQUEST_ID] = _AT_REQUEST_ID
        if model_name:
            vals[1] = put(buf, model_name.encode()) - (_ROOT_POS + _AT_MODEL_NAME)
            vt[_V_MODEL_NAME] = _AT_MODEL_NAME
        if tool_choice_name:
            vals[2] = put(buf, tool_choice_name.encode()) - (_ROOT_POS + _AT_TOOL_CHOICE_NAME)
            vt[_V_TOOL_CHOICE_NAME] = _AT_TOOL_CHOICE_NAME
        if user:
            vals[3] = put(buf, user.encode()) - (_ROOT_POS + _AT_USER)
            vt[_V_USER] = _AT_USER
        if tenant:
            vals[4] = put(buf, tenant.encode()) - (_ROOT_POS + _AT_TENANT)
            vt[_V_TENANT] = _AT_TENANT
        if response_format:
            vals[5] = put(buf, response_format) - (_ROOT_POS + _AT_RESPONSE_FORMAT)
            vt[_V_RESPONSE_FORMAT] = _AT_RESPONSE_FORMAT
        if extras:
            vals[8] = put(buf, extras) - (_ROOT_POS + _AT_EXTRAS)
            vt[_V_EXTRAS] = _AT_EXTRAS

    def messages(self, messages: Sequence[WireMessage]) -> None:
        """The messages, in order: ``(role, text)`` for a message with nothing
        but non-empty text (the common shape: one pack each), or ``(role,
        content, name, call id, calls, is_error)`` for any other."""
        buf = self._buf
        vt_pos = self._vt_pos
        count = len(messages)
        vec = len(buf)
        buf += PACK_U32(count)
        buf += bytes(4 * count)
        self._msgs = vec - (_ROOT_POS + _AT_MESSAGES)
        self._vt[_V_MESSAGES] = _AT_MESSAGES
        pack_text = _TEXT_MSG.pack
        pack_slot = PACK_U32_INTO
        text_vt = -1
        slot = vec + 4
        for m in messages:
            tpos = len(buf)
            if len(m) == 2:
                role, data = m
                if text_vt < 0:
                    text_vt = vt_pos.get(_TEXT_KEY, -1)
                    if text_vt < 0:
                        vt_pos[_TEXT_KEY] = text_vt = tpos
                        buf += _TEXT_VT
                        tpos += len(_TEXT_VT)
                n = len(data)
                buf += pack_text(tpos - text_vt, _TEXT_UOFFSET, role, n)
                buf += data
                buf += PAD[n & 3]
            else:
                tpos = _message(buf, vt_pos, *m)
            pack_slot(buf, slot, tpos - slot)
            slot += 4

    def tools(self, tools: Sequence[ToolSpec]) -> None:
        """The tool definitions (none: call nothing)."""
        buf = self._buf
        vec = _offset_vector(buf, len(tools))
        self._vals[6] = vec - (_ROOT_POS + _AT_TOOLS)
        self._vt[_V_TOOLS] = _AT_TOOLS
        for i, (name, description, parameters, strict) in enumerate(tools):
            tpos = _strings_table(
                buf,
                self._vt_pos,
                _KIND_TOOL,
                (name, description, parameters),
                tail=(1 if strict else 0,),
                mask_extra=8 if strict else 0,
            )
            PACK_U32_INTO(buf, vec + 4 + 4 * i, tpos - (vec + 4 + 4 * i))

    def stops(self, stops: Sequence[bytes]) -> None:
        """The stop sequences, non-empty ones only (none: call nothing)."""
        buf = self._buf
        vec = len(buf)
        count = len(stops)
        self._vals[7] = vec - (_ROOT_POS + _AT_STOP)
        self._vt[_V_STOP] = _AT_STOP
        offs = _string_offsets(vec + 4 + 4 * count, vec + 4, stops)
        head = _VEC_HEADS[count] if count < len(_VEC_HEADS) else struct.Struct(f"<{count + 1}I")
        buf += head.pack(count, *offs)
        _strings_after(buf, stops)

    def metadata(self, metadata: Mapping[str, str]) -> None:
        """The metadata vector: ``KeyValue`` tables sorted by key (code point
        order is UTF-8 byte order), each followed by its strings."""
        buf = self._buf
        vt_pos = self._vt_pos
        items = sorted(metadata.items())
        count = len(items)
        vec = len(buf)
        self._vt[_V_METADATA] = _AT_METADATA
        self._meta = vec - (_ROOT_POS + _AT_METADATA)
        buf += PACK_U32(count)
        buf += bytes(4 * count)
        pack_kv = _KV.pack
        elem = vec + 4
        for key, value in items:
            k, v = key.encode(), value.encode()
            mask = (1 if k else 0) | (2 if v else 0)
            vkey = _KIND_KV << 8 | mask
            vpos = _vtable(buf, vt_pos, vkey, _KV_VTS[mask])
            tpos = len(buf)
            nk = len(k)
            k_size = nk + 8 - (nk & 3) if k else 0
            buf += pack_kv(tpos - vpos, _KV_KEY if k else 0, _KV_VALUE + k_size if v else 0)
            if k:
                buf += PACK_U32(nk)
                buf += k
                buf += PAD[nk & 3]
            if v:
                nv = len(v)
                buf += PACK_U32(nv)
                buf += v
                buf += PAD[nv & 3]
            PACK_U32_INTO(buf, elem, tpos - elem)
            elem += 4

    def finish(
        self,
        *,
        provider: int,
        tool_choice: int = 0,
        max_tokens: int = 0,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int = 0,
        seed: int | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        n: int = 0,
        stream: bool = False,
        include_usage: bool = False,
        parallel_tool_calls: bool | None = None,
        extras_dialect: int = 0,
    ) -> bytes:
        """The scalars, then the root table and its vtable in one pack each;
        the finished buffer (``extras_dialect``: the ``ApiDialect`` of the
        extras given to ``strings``)."""
        vt = self._vt
        if max_tokens:
            vt[_V_MAX_TOKENS] = _AT_MAX_TOKENS
        if temperature is not None:
            vt[_V_TEMPERATURE] = _AT_TEMPERATURE
        if top_p is not None:
            vt[_V_TOP_P] = _AT_TOP_P
        if top_k:
            vt[_V_TOP_K] = _AT_TOP_K
        if seed is not None:
            vt[_V_SEED] = _AT_SEED
        if presence_penalty is not None:
            vt[_V_PRESENCE] = _AT_PRESENCE
        if frequency_penalty is not None:
            vt[_V_FREQUENCY] = _AT_FREQUENCY
        if n:
            vt[_V_N] = _AT_N
        if provider:
            vt[_V_PROVIDER] = _AT_PROVIDER
        if tool_choice:
            vt[_V_TOOL_CHOICE] = _AT_TOOL_CHOICE
        if stream:
            vt[_V_STREAM] = _AT_STREAM
        if include_usage:
            vt[_V_INCLUDE_USAGE] = _AT_INCLUDE_USAGE
        if parallel_tool_calls is not None:
            vt[_V_PTC] = _AT_PTC
        if extras_dialect:
            vt[_V_EXTRAS_DIALECT] = _AT_EXTRAS_DIALECT
        rid, name, choice_name, user, tenant, rfo, tools, stop, extras = self._vals
        buf = self._buf
        _ROOT_TABLE.pack_into(
            buf,
            _ROOT_POS,
            _ROOT_POS - _ROOT_VT_POS,
            seed or 0,
            rid,
            name,
            max_tokens,
            temperature or 0.0,
            tools,
            self._msgs,
            choice_name,
            top_p or 0.0,
            stop,
            presence_penalty or 0.0,
            frequency_penalty or 0.0,
            n,
            user,
            tenant,
            self._meta,
            rfo,
            top_k,
            extras,
            provider,
            tool_choice,
            stream,
            include_usage,
            bool(parallel_tool_calls),
            extras_dialect,
        )
        _ROOT_VT.pack_into(buf, _ROOT_VT_POS, *vt)
        return bytes(buf)
