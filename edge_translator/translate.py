"""OpenAI request -> ``CompletionRequest`` FlatBuffer: the edge's hot path.

Owns ``write_request``: a decoded ``ChatCompletionRequest`` (DESIGN section 1;
what each field means on the wire is ``mapping``) as a ``CompletionRequest``
buffer. A schema-specific writer: it lays the
buffer out front to back in one ``bytearray`` (root table first, children after
it, since every ``uoffset`` points forward), with fixed table layouts packed by
precompiled ``struct.Struct`` objects, vtables shared per shape, and strings
written from their UTF-8 bytes. About a third of the calls of a stock builder;
the stock-builder reference it is tested and benchmarked against lives in
``benchmarks/codecs/stock_writer.py``.

Conventions: empty strings and empty vectors are omitted (absent reads as ""),
optional scalars (temperature, top_p, seed, penalties, parallel_tool_calls) are
written only when given, metadata is sorted by key (``KeyValue.key`` is the
table's key), ``max_completion_tokens`` wins over ``max_tokens``, and text
content parts are joined. Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from flatgate.edge_translator.mapping import (
    ROLE_OF,
    extras_of,
    max_tokens_of,
    stops_of,
    text_of,
    tool_choice_of,
)
from flatgate.edge_translator.models import (
    AssistantMessage,
    ChatCompletionRequest,
    Message,
    ToolMessage,
)
from flatgate.proxy.wire.layout import COMPLETION_REQUEST, KEY_VALUE, MESSAGE, TOOL, TOOL_CALL
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER

__all__ = ["write_request"]

# --------------------------------------------------------------------------
# The schema-specific writer.
#
# Layout: [root uoffset][b"FGRQ"][root vtable][pad][root table][root strings]
# [messages vector][per message: (vtable)(table)(strings)(tool calls)]
# [tools][stop][metadata]. Everything stays 4-aligned; the root table starts at
# 4 mod 8 so that ``seed`` (the one 8-byte field, first after the soffset) is
# 8-aligned. Vtables may sit before or after the tables that use them (a
# signed soffset), as with the stock builder when it shares a vtable.
# --------------------------------------------------------------------------

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_PAD = (b"\0\0\0\0", b"\0\0\0", b"\0\0", b"\0")  # NUL terminator + pad to 4

# The root table, in the writer's own order (fields by size, so that nothing
# needs padding): soffset, seed (8 bytes, 8-aligned as the table starts at
# 4 mod 8), the 4-byte fields, then the 1-byte ones. Field -> struct code.
_ROOT_FIELDS = (
    ("seed", "q"),
    ("request_id", "I"),
    ("model_name", "I"),
    ("max_tokens", "i"),
    ("temperature", "f"),
    ("tools", "I"),
    ("messages", "I"),
    ("tool_choice_name", "I"),
    ("top_p", "f"),
    ("stop", "I"),
    ("presence_penalty", "f"),
    ("frequency_penalty", "f"),
    ("n", "i"),
    ("user", "I"),
    ("tenant", "I"),
    ("metadata", "I"),
    ("response_format", "I"),
    ("provider", "b"),
    ("tool_choice", "b"),
    ("stream", "b"),
    ("include_usage", "b"),
    ("parallel_tool_calls", "b"),
)
_ROOT_TABLE = struct.Struct("<i" + "".join(code for _, code in _ROOT_FIELDS) + "3x")
_R_SIZE = _ROOT_TABLE.size
# Field -> its offset in the root table, and -> its index in the vtable list
# (size, table size, then one entry per slot, from the layout).
_AT = {
    name: struct.calcsize("<i" + "".join(c for _, c in _ROOT_FIELDS[:i]))
    for i, (name, _) in enumerate(_ROOT_FIELDS)
}
_V = {name: 2 + COMPLETION_REQUEST.slot(name) for name, _ in _ROOT_FIELDS}
_ROOT_VT = struct.Struct(f"<{2 + len(COMPLETION_REQUEST.fields)}H")
_ROOT_VT_POS = 8
_ROOT_POS = _ROOT_VT_POS + _ROOT_VT.size + (4 if _ROOT_VT.size % 8 == 0 else 0)
# Header (root offset, identifier), a zeroed root vtable and table to fill in.
_HEAD = _U32.pack(_ROOT_POS) + REQUEST_IDENTIFIER + bytes(_ROOT_POS - 8 + _R_SIZE)
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
_V_MESSAGES, _AT_MESSAGES = _V["messages"], _AT["messages"]
_V_TOOLS, _AT_TOOLS = _V["tools"], _AT["tools"]
_V_STOP, _AT_STOP = _V["stop"], _AT["stop"]
_V_METADATA, _AT_METADATA = _V["metadata"], _AT["metadata"]
_V_MAX_TOKENS, _AT_MAX_TOKENS = _V["max_tokens"], _AT["max_tokens"]
_V_TEMPERATURE, _AT_TEMPERATURE = _V["temperature"], _AT["temperature"]
_V_TOP_P, _AT_TOP_P = _V["top_p"], _AT["top_p"]
_V_SEED, _AT_SEED = _V["seed"], _AT["seed"]
_V_PRESENCE, _AT_PRESENCE = _V["presence_penalty"], _AT["presence_penalty"]
_V_FREQUENCY, _AT_FREQUENCY = _V["frequency_penalty"], _AT["frequency_penalty"]
_V_N, _AT_N = _V["n"], _AT["n"]
_V_PROVIDER, _AT_PROVIDER = _V["provider"], _AT["provider"]
_V_STREAM, _AT_STREAM = _V["stream"], _AT["stream"]
_V_INCLUDE_USAGE, _AT_INCLUDE_USAGE = _V["include_usage"], _AT["include_usage"]
_V_PTC, _AT_PTC = _V["parallel_tool_calls"], _AT["parallel_tool_calls"]
if _ROOT_POS % 8 != 4 or _AT["seed"] != 4 or len(_V) != len(COMPLETION_REQUEST.fields):
    raise ImportError("write_request's root layout no longer fits the schema")


def _vtables(
    table_size: int, offsets: Sequence[int], always: frozenset[int] = frozenset()
) -> tuple[bytes, ...]:
    """Every vtable of a table whose fields come and go, padded to 4 bytes.

    ``offsets[i]`` is slot i's offset in the table; slots in ``always`` are
    always present; bit j of the index says whether the j-th other slot is.
    """
    optional = [i for i in range(len(offsets)) if i not in always]
    out = []
    for mask in range(1 << len(optional)):
        present = always | {slot for j, slot in enumerate(optional) if mask >> j & 1}
        entries = [off if i in present else 0 for i, off in enumerate(offsets)]
        raw = struct.pack(f"<{2 + len(offsets)}H", 4 + 2 * len(offsets), table_size, *entries)
        out.append(raw + bytes(-len(raw) % 4))
    return tuple(out)


# Message: soffset, content@4, name@8, tool_calls@12, tool_call_id@16, role@20
# (role, slot 0, always written).
_MSG = struct.Struct("<iIIIIb3x")
_MSG_SIZE = _MSG.size
_MSG_AT = {"content": 4, "name": 8, "tool_calls": 12, "tool_call_id": 16, "role": 20}
_MSG_VTS = _vtables(
    _MSG_SIZE,
    tuple(_MSG_AT[f] for f in MESSAGE.fields),
    always=frozenset({MESSAGE.slot("role")}),
)
# Content-only message (the common case), table and its string's length prefix.
_MSG_CONTENT = struct.Struct("<iIIIIb3xI")
# Tool: soffset, name@4, description@8, parameters@12, strict@16.
_TOOL = struct.Struct("<iIIIb3x")
_TOOL_AT = {"name": 4, "description": 8, "parameters": 12, "strict": 16}
_TOOL_VTS = _vtables(_TOOL.size, tuple(_TOOL_AT[f] for f in TOOL.fields))
# ToolCall: soffset, id@4, name@8, arguments@12.
_CALL = struct.Struct("<iIII")
_CALL_AT = {"id": 4, "name": 8, "arguments": 12}
_CALL_VTS = _vtables(_CALL.size, tuple(_CALL_AT[f] for f in TOOL_CALL.fields))
# KeyValue: soffset, key@4, value@8.
_KV = struct.Struct("<iII")
_KV_AT = {"key": 4, "value": 8}
_KV_VTS = _vtables(_KV.size, tuple(_KV_AT[f] for f in KEY_VALUE.fields))

# Offset-vector heads (count, then the offsets) for the short vectors (stop).
_VEC_HEADS = tuple(struct.Struct(f"<{n + 1}I") for n in range(5))

# Tables written by ``_strings_table``; the kind keys their shared vtables.
_KIND_CALL, _KIND_TOOL, _KIND_KV = 1, 2, 3
_KINDS: dict[int, tuple[tuple[bytes, ...], struct.Struct]] = {
    _KIND_CALL: (_CALL_VTS, _CALL),
    _KIND_TOOL: (_TOOL_VTS, _TOOL),
    _KIND_KV: (_KV_VTS, _KV),
}


def _put_str(buf: bytearray, data: bytes) -> int:
    """Append one string (length, bytes, NUL, pad); returns its position."""
    pos = len(buf)
    n = len(data)
    buf += _U32.pack(n)
    buf += data
    buf += _PAD[n & 3]
    return pos


def _patch(buf: bytearray, field: int, target: int) -> None:
    _U32.pack_into(buf, field, target - field)


def _strings_after(buf: bytearray, strings: Sequence[bytes]) -> None:
    """Append ``strings`` (the empty ones skipped) one after the other."""
    for data in strings:
        if data:
            n = len(data)
            buf += _U32.pack(n)
            buf += data
            buf += _PAD[n & 3]


def _string_offsets(first: int, field0: int, strings: Sequence[bytes]) -> list[int]:
    """uoffsets for string fields at ``field0``, ``field0 + 4``, ... whose strings
    are laid out from ``first`` on, in order (0 for an empty, omitted one)."""
    out = []
    at = first
    field = field0
    for data in strings:
        if data:
            out.append(at - field)
            at += len(data) + 8 - (len(data) & 3)
        else:
            out.append(0)
        field += 4
    return out


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
    vts, packer = _KINDS[kind]
    mask = mask_extra
    bit = 1
    for data in strings:
        if data:
            mask |= bit
        bit <<= 1
    key = kind << 8 | mask
    vpos = vt_pos.get(key)
    if vpos is None:
        vpos = len(buf)
        buf += vts[mask]
        vt_pos[key] = vpos
    tpos = len(buf)
    buf += packer.pack(tpos - vpos, *_string_offsets(tpos + packer.size, tpos + 4, strings), *tail)
    _strings_after(buf, strings)
    return tpos


def _offset_vector(buf: bytearray, count: int) -> int:
    """Append a vector of ``count`` offsets (zeros, patched later); returns its position."""
    pos = len(buf)
    buf += _U32.pack(count)
    buf += bytes(4 * count)
    return pos


def _metadata(buf: bytearray, vt_pos: dict[int, int], metadata: Mapping[str, str]) -> None:
    """The metadata vector at the end of ``buf``: ``KeyValue`` tables sorted by
    key (code point order is UTF-8 byte order), each followed by its strings."""
    items = sorted(metadata.items())
    count = len(items)
    vec = len(buf)
    buf += _U32.pack(count)
    buf += bytes(4 * count)
    pack_kv = _KV.pack
    elem = vec + 4
    for key, value in items:
        k, v = key.encode(), value.encode()
        mask = (1 if k else 0) | (2 if v else 0)
        vkey = _KIND_KV << 8 | mask
        vpos = vt_pos.get(vkey)
        if vpos is None:
            vpos = len(buf)
            buf += _KV_VTS[mask]
            vt_pos[vkey] = vpos
        tpos = len(buf)
        nk = len(k)
        k_size = nk + 8 - (nk & 3) if k else 0
        buf += pack_kv(tpos - vpos, 8 if k else 0, 4 + k_size if v else 0)
        if k:
            buf += _U32.pack(nk)
            buf += k
            buf += _PAD[nk & 3]
        if v:
            nv = len(v)
            buf += _U32.pack(nv)
            buf += v
            buf += _PAD[nv & 3]
        _U32.pack_into(buf, elem, tpos - elem)
        elem += 4


def _message_extra(
    buf: bytearray, vt_pos: dict[int, int], role: int, msg: Message, content: bytes
) -> int:
    """A message with any of name, tool calls or tool call id (the rare shape):
    the table, its strings, then its tool calls."""
    name, call_id, calls = extras_of(msg)
    mask = (1 if content else 0) | (2 if name else 0) | (4 if calls else 0) | (8 if call_id else 0)
    vpos = vt_pos.get(mask)
    if vpos is None:
        vpos = len(buf)
        buf += _MSG_VTS[mask]
        vt_pos[mask] = vpos
    tpos = len(buf)
    strings = (content, name, call_id)
    first = tpos + _MSG_SIZE
    c_off, n_off, id_off = _string_offsets(first, tpos + 4, strings)
    if id_off:  # tool_call_id sits at +16, not +12: its string is where it was laid out
        id_off -= 4
    calls_off = 0
    if calls:  # the vector follows the strings
        calls_off = first + sum(len(d) + 8 - (len(d) & 3) for d in strings if d) - (tpos + 12)
    buf += _MSG.pack(tpos - vpos, c_off, n_off, calls_off, id_off, role)
    _strings_after(buf, strings)
    if calls:
        vec = _offset_vector(buf, len(calls))
        for i, call in enumerate(calls):
            fn = call.function
            cpos = _strings_table(
                buf,
                vt_pos,
                _KIND_CALL,
                (call.id.encode(), fn.name.encode(), fn.arguments.encode()),
            )
            _patch(buf, vec + 4 + 4 * i, cpos)
    return tpos


def write_request(
    req: ChatCompletionRequest,
    *,
    provider: int,
    model_name: str,
    tenant: str = "",
    request_id: str = "",
) -> bytes:
    """``req`` as a ``CompletionRequest`` buffer (the schema-specific writer)."""
    root = _ROOT_POS
    buf = bytearray(_HEAD)
    vt = _ROOT_VT_EMPTY.copy()
    put = _put_str

    # Root strings, right after the root table (field offset = child - field).
    rid = name = choice_name_off = user = ten = rfo = 0
    if request_id:
        rid = put(buf, request_id.encode()) - (root + _AT_REQUEST_ID)
        vt[_V_REQUEST_ID] = _AT_REQUEST_ID
    if model_name:
        name = put(buf, model_name.encode()) - (root + _AT_MODEL_NAME)
        vt[_V_MODEL_NAME] = _AT_MODEL_NAME
    choice, choice_name = tool_choice_of(req)
    if choice:
        vt[_V_TOOL_CHOICE] = _AT_TOOL_CHOICE
        if choice_name:
            choice_name_off = put(buf, choice_name.encode()) - (root + _AT_TOOL_CHOICE_NAME)
            vt[_V_TOOL_CHOICE_NAME] = _AT_TOOL_CHOICE_NAME
    if req.user:
        user = put(buf, req.user.encode()) - (root + _AT_USER)
        vt[_V_USER] = _AT_USER
    if tenant:
        ten = put(buf, tenant.encode()) - (root + _AT_TENANT)
        vt[_V_TENANT] = _AT_TENANT
    rf = bytes(req.response_format)
    if rf and rf != b"null":
        rfo = put(buf, rf) - (root + _AT_RESPONSE_FORMAT)
        vt[_V_RESPONSE_FORMAT] = _AT_RESPONSE_FORMAT

    # Messages: the vector, then each message with its strings right after it.
    messages = req.messages
    vec = len(buf)
    buf += _U32.pack(len(messages))
    buf += bytes(4 * len(messages))
    msgs = vec - (root + _AT_MESSAGES)
    vt[_V_MESSAGES] = _AT_MESSAGES
    vt_pos: dict[int, int] = {}
    role_of = ROLE_OF
    content_only = _MSG_CONTENT.pack
    slot = vec + 4
    for msg in messages:
        kind = type(msg)
        content = msg.content
        data = (content if type(content) is str else text_of(content)).encode()
        if (
            not data
            or kind is ToolMessage
            or msg.name  # type: ignore[union-attr]  # every other kind has a name
            or (kind is AssistantMessage and msg.tool_calls)  # type: ignore[union-attr]
        ):
            tpos = _message_extra(buf, vt_pos, role_of[kind], msg, data)
        else:
            vpos = vt_pos.get(1)
            if vpos is None:
                vpos = len(buf)
                buf += _MSG_VTS[1]
                vt_pos[1] = vpos
            tpos = len(buf)
            n = len(data)
            buf += content_only(tpos - vpos, _MSG_SIZE - 4, 0, 0, 0, role_of[kind], n)
            buf += data
            buf += _PAD[n & 3]
        _U32.pack_into(buf, slot, tpos - slot)
        slot += 4

    tools = 0
    if req.tools:
        vec = _offset_vector(buf, len(req.tools))
        tools, vt[_V_TOOLS] = vec - (root + _AT_TOOLS), _AT_TOOLS
        for i, tool in enumerate(req.tools):
            fn = tool.function
            params = bytes(fn.parameters)
            if params == b"null":
                params = b""
            tpos = _strings_table(
                buf,
                vt_pos,
                _KIND_TOOL,
                (fn.name.encode(), (fn.description or "").encode(), params),
                tail=(1 if fn.strict else 0,),
                mask_extra=8 if fn.strict else 0,
            )
            _patch(buf, vec + 4 + 4 * i, tpos)

    stop = 0
    if req.stop:
        stops = [x.encode() for x in stops_of(req)]
        if stops:
            vec = len(buf)
            count = len(stops)
            stop, vt[_V_STOP] = vec - (root + _AT_STOP), _AT_STOP
            offs = _string_offsets(vec + 4 + 4 * count, vec + 4, stops)
            buf += _VEC_HEADS[count].pack(count, *offs)
            _strings_after(buf, stops)

    metadata = 0
    if req.metadata:
        vec = len(buf)
        metadata, vt[_V_METADATA] = vec - (root + _AT_METADATA), _AT_METADATA
        _metadata(buf, vt_pos, req.metadata)

    # Scalars, then the root table and its vtable in one pack each.
    max_tokens = max_tokens_of(req)
    if max_tokens:
        vt[_V_MAX_TOKENS] = _AT_MAX_TOKENS
    temperature = req.temperature
    if temperature is not None:
        vt[_V_TEMPERATURE] = _AT_TEMPERATURE
    top_p = req.top_p
    if top_p is not None:
        vt[_V_TOP_P] = _AT_TOP_P
    seed = req.seed
    if seed is not None:
        vt[_V_SEED] = _AT_SEED
    presence = req.presence_penalty
    if presence is not None:
        vt[_V_PRESENCE] = _AT_PRESENCE
    frequency = req.frequency_penalty
    if frequency is not None:
        vt[_V_FREQUENCY] = _AT_FREQUENCY
    n_choices = req.n or 0
    if n_choices:
        vt[_V_N] = _AT_N
    if provider:
        vt[_V_PROVIDER] = _AT_PROVIDER
    stream = bool(req.stream)
    include_usage = False
    if stream:
        vt[_V_STREAM] = _AT_STREAM
        options = req.stream_options
        if options is not None and options.include_usage:
            include_usage = True
            vt[_V_INCLUDE_USAGE] = _AT_INCLUDE_USAGE
    ptc = req.parallel_tool_calls
    if ptc is not None:
        vt[_V_PTC] = _AT_PTC
    _ROOT_TABLE.pack_into(
        buf,
        root,
        root - _ROOT_VT_POS,
        seed or 0,
        rid,
        name,
        max_tokens,
        temperature or 0.0,
        tools,
        msgs,
        choice_name_off,
        top_p or 0.0,
        stop,
        presence or 0.0,
        frequency or 0.0,
        n_choices,
        user,
        ten,
        metadata,
        rfo,
        provider,
        choice,
        stream,
        include_usage,
        bool(ptc),
    )
    _ROOT_VT.pack_into(buf, _ROOT_VT_POS, *vt)
    return bytes(buf)
