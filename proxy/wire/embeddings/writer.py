"""``EmbeddingRequest`` and ``EmbeddingResponse`` buffers written by hand.

Owns ``write_embedding_request`` (what the edge sends the proxy) and
``write_embedding_response`` (what a backend adapter or the stub answers).
Both lay the buffer out front to back, every ``uoffset`` pointing forward,
the root tables' inline layouts taken from ``wire.layout``:

- request: root offset, ``FGEQ``, the root vtable, the root table, its
  strings, then the ``texts`` vector and its strings, or the ``tokens``
  vector, one shared ``TokenIds`` vtable and per input its table with its
  ``ids`` vector right after it (one ``struct`` pack per input);
- response: root offset, ``FGEV``, the root vtable, the root table, its two
  strings, the ``values`` length word, then the caller's float bytes, joined
  in with one copy and no per-float work; everything before them is a
  multiple of 4 bytes long, so the floats are aligned.

Conventions as the chat writers': empty strings are omitted (absent reads
as ""), scalars at 0 are not written. The writers hold no policy: a request
with both or neither of texts and tokens, too many inputs or a dimensions
out of bounds is written as given, and the reader refuses it (tests build
hostile buffers that way). They raise ``ValueError`` only for what the wire
cannot carry: a value outside its field's type, a response whose float bytes
are not ``count * dimensions * 4``. Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from flatgate.proxy.wire.buffer import MAX_BUFFER_BYTES, PACK_U32, PACK_U32_INTO, put_string
from flatgate.proxy.wire.layout import (
    EMBEDDING_REQUEST,
    EMBEDDING_RESPONSE,
    HEADER,
    TOKEN_IDS,
    VTABLE_HEAD,
    Table,
)
from flatgate.proxy.wire.schema import EMBEDDING_REQUEST_IDENTIFIER, EMBEDDING_RESPONSE_IDENTIFIER

__all__ = ["write_embedding_request", "write_embedding_response"]


def _root(table: Table) -> tuple[struct.Struct, int]:
    """The root vtable's packer (size, table size, an entry per slot) and
    where the root table starts: right after it, 4-aligned (no embeddings
    table has an 8-byte field)."""
    vt = struct.Struct(f"<{2 + len(table.fields)}H")
    return vt, HEADER + vt.size + (-vt.size % 4)


# --- EmbeddingRequest ---

_Q_AT = EMBEDDING_REQUEST.inline
_Q_TABLE = EMBEDDING_REQUEST.packer(
    "request_id model_name texts tokens dimensions user tenant extras provider extras_dialect"
)
_Q_VT, _Q_ROOT = _root(EMBEDDING_REQUEST)
_Q_SLOT = {name: 2 + EMBEDDING_REQUEST.slot(name) for name in EMBEDDING_REQUEST.fields}
_Q_HEAD = PACK_U32(_Q_ROOT) + EMBEDDING_REQUEST_IDENTIFIER + bytes(_Q_ROOT - HEADER + _Q_TABLE.size)
# The one TokenIds vtable (ids present), padded to 4, and the table: soffset,
# then the uoffset of the ids vector that follows it at once.
_T_AT = TOKEN_IDS.inline["ids"]
_T_TABLE = TOKEN_IDS.packer("ids")
_T_VT = struct.pack("<3H", VTABLE_HEAD + 2, _T_TABLE.size, _T_AT)
_T_VT += bytes(-len(_T_VT) % 4)
_T_IDS = _T_TABLE.size - _T_AT
if TOKEN_IDS.fields != ("ids",) or _T_AT != 4 or _T_TABLE.size != 8:
    raise ImportError("write_embedding_request's TokenIds layout no longer fits the schema")
_STRINGS = ("request_id", "model_name", "user", "tenant", "extras")


def _vector_of_strings(buf: bytearray, items: Sequence[bytes]) -> int:
    """Append a vector of strings (its offsets, then the strings); its position."""
    vec = len(buf)
    buf += PACK_U32(len(items))
    buf += bytes(4 * len(items))
    slot = vec + 4
    for data in items:
        PACK_U32_INTO(buf, slot, put_string(buf, data) - slot)
        slot += 4
    return vec


def _vector_of_tokens(buf: bytearray, inputs: Sequence[Sequence[int]]) -> int:
    """Append the tokens vector, the shared TokenIds vtable and every input's
    table and ids; the vector's position."""
    vec = len(buf)
    buf += PACK_U32(len(inputs))
    buf += bytes(4 * len(inputs))
    vpos = len(buf)
    buf += _T_VT
    slot = vec + 4
    for ids in inputs:
        tpos = len(buf)
        k = len(ids)
        buf += struct.pack(f"<iII{k}i", tpos - vpos, _T_IDS, k, *ids)
        PACK_U32_INTO(buf, slot, tpos - slot)
        slot += 4
    return vec


def write_embedding_request(
    model_name: str,
    *,
    texts: Sequence[str] = (),
    tokens: Sequence[Sequence[int]] = (),
    request_id: str = "",
    provider: int = 0,
    dimensions: int = 0,
    user: str = "",
    tenant: str = "",
    extras: str = "",
    extras_dialect: int = 0,
) -> bytes:
    """One ``EmbeddingRequest`` (``texts`` or ``tokens``: the inputs; an
    empty one is omitted). ``ValueError`` for a value its field cannot hold
    (a token id or ``dimensions`` outside int32, an enum outside a byte)."""
    buf = bytearray(_Q_HEAD)
    vt = [_Q_VT.size, _Q_TABLE.size] + [0] * len(EMBEDDING_REQUEST.fields)
    offs = dict.fromkeys(EMBEDDING_REQUEST.fields, 0)
    values = {
        "request_id": request_id,
        "model_name": model_name,
        "user": user,
        "tenant": tenant,
        "extras": extras,
    }
    for name in _STRINGS:
        text = values[name]
        if text:
            offs[name] = put_string(buf, text.encode()) - (_Q_ROOT + _Q_AT[name])
    try:
        if texts:
            vec = _vector_of_strings(buf, [t.encode() for t in texts])
            offs["texts"] = vec - (_Q_ROOT + _Q_AT["texts"])
        if tokens:
            vec = _vector_of_tokens(buf, tokens)
            offs["tokens"] = vec - (_Q_ROOT + _Q_AT["tokens"])
        offs["dimensions"] = dimensions
        offs["provider"] = provider
        offs["extras_dialect"] = extras_dialect
        for name, value in offs.items():
            if value:
                vt[_Q_SLOT[name]] = _Q_AT[name]
        _Q_TABLE.pack_into(
            buf,
            _Q_ROOT,
            _Q_ROOT - HEADER,
            offs["request_id"],
            offs["model_name"],
            offs["texts"],
            offs["tokens"],
            dimensions,
            offs["user"],
            offs["tenant"],
            offs["extras"],
            provider,
            extras_dialect,
        )
    except struct.error as exc:
        raise ValueError(f"EmbeddingRequest: a value does not fit its field: {exc}") from None
    _Q_VT.pack_into(buf, HEADER, *vt)
    return bytes(buf)


# --- EmbeddingResponse ---

_V_AT = EMBEDDING_RESPONSE.inline
_V_TABLE = EMBEDDING_RESPONSE.packer(
    "request_id model count dimensions values prompt_tokens total_tokens"
)
_V_VT, _V_ROOT = _root(EMBEDDING_RESPONSE)
_V_SLOT = {name: 2 + EMBEDDING_RESPONSE.slot(name) for name in EMBEDDING_RESPONSE.fields}
# The fields always written; the strings only when non-empty.
_V_ALWAYS = ("count", "dimensions", "values", "prompt_tokens", "total_tokens")


def write_embedding_response(
    *,
    model: str,
    count: int,
    dimensions: int,
    values: bytes | bytearray | memoryview,
    prompt_tokens: int = 0,
    total_tokens: int = 0,
    request_id: str = "",
) -> bytes:
    """One ``EmbeddingResponse``: ``values`` is ``count * dimensions * 4``
    bytes of little-endian float32, row-major, copied once into the buffer
    (any C-contiguous buffer: a numpy ``<f4`` array's memoryview too).
    ``ValueError`` when its size is not that, or a count, dimensions or token
    count does not fit its field."""
    view = values if isinstance(values, memoryview) else memoryview(values)
    if not view.c_contiguous:
        raise ValueError("EmbeddingResponse: values must be C-contiguous")
    size = view.nbytes
    if count < 0 or dimensions < 0 or size != 4 * count * dimensions:
        raise ValueError(
            f"EmbeddingResponse: {size} bytes of values for {count} vectors "
            f"of {dimensions} floats (expected {4 * count * dimensions})"
        )
    if size > MAX_BUFFER_BYTES:
        raise ValueError(f"EmbeddingResponse: {size} bytes of values exceed a buffer")
    head = bytearray(PACK_U32(_V_ROOT) + EMBEDDING_RESPONSE_IDENTIFIER)
    head += bytes(_V_ROOT - HEADER + _V_TABLE.size)
    vt = [_V_VT.size, _V_TABLE.size] + [0] * len(EMBEDDING_RESPONSE.fields)
    for name in _V_ALWAYS:
        vt[_V_SLOT[name]] = _V_AT[name]
    rid = mod = 0
    if request_id:
        rid = put_string(head, request_id.encode()) - (_V_ROOT + _V_AT["request_id"])
        vt[_V_SLOT["request_id"]] = _V_AT["request_id"]
    if model:
        mod = put_string(head, model.encode()) - (_V_ROOT + _V_AT["model"])
        vt[_V_SLOT["model"]] = _V_AT["model"]
    vec = len(head)
    head += PACK_U32(count * dimensions)
    try:
        _V_TABLE.pack_into(
            head,
            _V_ROOT,
            _V_ROOT - HEADER,
            rid,
            mod,
            count,
            dimensions,
            vec - (_V_ROOT + _V_AT["values"]),
            prompt_tokens,
            total_tokens,
        )
    except struct.error as exc:
        raise ValueError(f"EmbeddingResponse: a value does not fit its field: {exc}") from None
    _V_VT.pack_into(head, HEADER, *vt)
    # Floats after a 4-byte multiple: aligned. One copy of them, in the join.
    return b"".join((head, view))
