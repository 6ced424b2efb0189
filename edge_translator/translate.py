"""OpenAI request -> ``CompletionRequest`` FlatBuffer: the edge's hot path.

Owns the mapping from a decoded ``ChatCompletionRequest`` to the wire request
(DESIGN section 1) and ``write_request``, a schema-specific writer: it lays the
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

import os
import struct
from collections.abc import Mapping, Sequence

from flatgate.edge_translator.config import ModelConfig
from flatgate.edge_translator.errors import ModelNotFound
from flatgate.edge_translator.models import (
    AssistantMessage,
    ChatCompletionRequest,
    ContentPart,
    DeveloperMessage,
    Message,
    RefusalPart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolChoiceFunction,
    ToolMessage,
    UserMessage,
)
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER, Role, ToolChoiceMode

__all__ = [
    "ROLE_OF",
    "extras_of",
    "max_tokens_of",
    "new_request_id",
    "resolve_model",
    "stops_of",
    "text_of",
    "tool_choice_of",
    "write_request",
]

# Message type -> wire role.
ROLE_OF: dict[type, int] = {
    UserMessage: Role.User,
    SystemMessage: Role.System,
    DeveloperMessage: Role.Developer,
    AssistantMessage: Role.Assistant,
    ToolMessage: Role.Tool,
}
_CHOICE: dict[str, int] = {
    "auto": ToolChoiceMode.Auto,
    "none": ToolChoiceMode.None_,
    "required": ToolChoiceMode.Required,
}


def new_request_id() -> str:
    """A fresh OpenAI-style completion id."""
    return "chatcmpl-" + os.urandom(12).hex()


def resolve_model(models: Mapping[str, ModelConfig], name: str) -> ModelConfig:
    """The configured model for a name or alias; ``ModelNotFound`` (404) otherwise."""
    found = models.get(name)
    if found is None:
        raise ModelNotFound(
            f"The model '{name}' does not exist or you do not have access to it.",
            param="model",
        )
    return found


def text_of(content: str | list[ContentPart] | None) -> str:
    """A message's text: the string, or its text (and refusal) parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        p.text if isinstance(p, TextPart) else p.refusal if isinstance(p, RefusalPart) else ""
        for p in content
    )


def max_tokens_of(req: ChatCompletionRequest) -> int:
    if req.max_completion_tokens is not None:
        return req.max_completion_tokens
    return req.max_tokens or 0


def stops_of(req: ChatCompletionRequest) -> list[str]:
    stop = req.stop
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    return [s for s in stop if s]


def tool_choice_of(req: ChatCompletionRequest) -> tuple[int, str]:
    choice = req.tool_choice
    if choice is None:
        return ToolChoiceMode.Unset, ""
    if isinstance(choice, ToolChoiceFunction):
        return ToolChoiceMode.Function, choice.function.name
    return _CHOICE[choice], ""


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

# Root table (84 bytes): soffset@0, seed@4, then 4-byte fields request_id@12,
# model_name@16, max_tokens@20, temperature@24, tools@28, messages@32,
# tool_choice_name@36, top_p@40, stop@44, presence_penalty@48,
# frequency_penalty@52, n@56, user@60, tenant@64, metadata@68,
# response_format@72, then bytes provider@76, tool_choice@77, stream@78,
# include_usage@79, parallel_tool_calls@80. Vtable entry = 2 + slot.
_R_SIZE = 84
_ROOT_TABLE = struct.Struct("<iqIIifIIIfIffiIIIIbbbbb3x")
_ROOT_VT = struct.Struct("<24H")
_ROOT_VT_POS = 8
_ROOT_POS = _ROOT_VT_POS + _ROOT_VT.size + 4  # 60: 4 mod 8
assert _ROOT_TABLE.size == _R_SIZE and _ROOT_POS % 8 == 4
# Header (root offset, identifier), a zeroed root vtable and table to fill in.
_HEAD = _U32.pack(_ROOT_POS) + REQUEST_IDENTIFIER + bytes(_ROOT_POS - 8 + _R_SIZE)
# Root vtable: size, table size, then one voffset per slot (0: absent).
_ROOT_VT_EMPTY = [_ROOT_VT.size, _R_SIZE] + [0] * 22


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
_MSG_VTS = _vtables(_MSG_SIZE, (20, 4, 8, 12, 16), always=frozenset({0}))
# Content-only message (the common case), table and its string's length prefix.
_MSG_CONTENT = struct.Struct("<iIIIIb3xI")
# Tool: soffset, name@4, description@8, parameters@12, strict@16.
_TOOL = struct.Struct("<iIIIb3x")
_TOOL_VTS = _vtables(_TOOL.size, (4, 8, 12, 16))
# ToolCall: soffset, id@4, name@8, arguments@12.
_CALL = struct.Struct("<iIII")
_CALL_VTS = _vtables(_CALL.size, (4, 8, 12))
# KeyValue: soffset, key@4, value@8.
_KV = struct.Struct("<iII")
_KV_VTS = _vtables(_KV.size, (4, 8))

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


def extras_of(msg: Message) -> tuple[bytes, bytes, Sequence[ToolCall]]:
    """A message's name, tool call id and tool calls (by type: a failed
    ``getattr`` raises and catches an exception, which costs a microsecond)."""
    if isinstance(msg, ToolMessage):
        return b"", msg.tool_call_id.encode(), ()
    name = msg.name.encode() if msg.name else b""
    if isinstance(msg, AssistantMessage):
        return name, b"", msg.tool_calls or ()
    return name, b"", ()


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
        rid = put(buf, request_id.encode()) - (root + 12)
        vt[2] = 12
    if model_name:
        name = put(buf, model_name.encode()) - (root + 16)
        vt[4] = 16
    choice, choice_name = tool_choice_of(req)
    if choice:
        vt[9] = 77
        if choice_name:
            choice_name_off = put(buf, choice_name.encode()) - (root + 36)
            vt[10] = 36
    if req.user:
        user = put(buf, req.user.encode()) - (root + 60)
        vt[18] = 60
    if tenant:
        ten = put(buf, tenant.encode()) - (root + 64)
        vt[19] = 64
    rf = bytes(req.response_format)
    if rf and rf != b"null":
        rfo = put(buf, rf) - (root + 72)
        vt[23] = 72

    # Messages: the vector, then each message with its strings right after it.
    messages = req.messages
    vec = len(buf)
    buf += _U32.pack(len(messages))
    buf += bytes(4 * len(messages))
    msgs = vec - (root + 32)
    vt[8] = 32
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
        tools, vt[7] = vec - (root + 28), 28
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
            stop, vt[12] = vec - (root + 44), 44
            offs = _string_offsets(vec + 4 + 4 * count, vec + 4, stops)
            buf += _VEC_HEADS[count].pack(count, *offs)
            _strings_after(buf, stops)

    metadata = 0
    if req.metadata:
        vec = len(buf)
        metadata, vt[20] = vec - (root + 68), 68
        _metadata(buf, vt_pos, req.metadata)

    # Scalars, then the root table and its vtable in one pack each.
    max_tokens = max_tokens_of(req)
    if max_tokens:
        vt[5] = 20
    temperature = req.temperature
    if temperature is not None:
        vt[6] = 24
    top_p = req.top_p
    if top_p is not None:
        vt[11] = 40
    seed = req.seed
    if seed is not None:
        vt[13] = 4
    presence = req.presence_penalty
    if presence is not None:
        vt[14] = 48
    frequency = req.frequency_penalty
    if frequency is not None:
        vt[15] = 52
    n_choices = req.n or 0
    if n_choices:
        vt[16] = 56
    if provider:
        vt[3] = 76
    stream = bool(req.stream)
    include_usage = False
    if stream:
        vt[17] = 78
        options = req.stream_options
        if options is not None and options.include_usage:
            include_usage = True
            vt[21] = 79
    ptc = req.parallel_tool_calls
    if ptc is not None:
        vt[22] = 80
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
