"""The verifiers of ``EmbeddingRequest`` and ``EmbeddingResponse`` buffers.

Owns ``verify_embedding_request`` and ``verify_embedding_response``: every
offset the readers follow, checked before they follow it, with the
primitives of ``wire.buffer``, and the contract's bounds. Each returns what
it found (``Checked``), so the readers in ``wire.embeddings.reader`` read
with unchecked lookups and do not walk the buffer twice. The slots and
kinds come from ``wire.layout`` (``tests/schema/test_layouts.py`` holds them
to the schema). The only exception either raises is ``MalformedBuffer``.

Checked, as ``wire.request.verify`` checks a ``CompletionRequest``:

- the input (``check_input``), its size (at most ``max_bytes`` when given,
  and ``MAX_BUFFER_BYTES``), the file identifier (``FGEQ``, ``FGEV``), the
  root offset past the header;
- every table (the root, each ``TokenIds``): 4-byte aligned, its soffset,
  vtable (2-byte aligned, size even and >= 4) and inline size inside the
  buffer, every field this schema knows at an offset >= 4 that fits the
  inline size, scalars aligned to their size; fields past those (a newer
  writer's) are skipped, never read;
- every string (aligned, length and bytes inside the buffer, NUL) and vector
  (aligned, length word and elements inside the buffer, scalars aligned to
  their size);
- the bounds: at most ``MAX_INPUTS`` inputs (checked on the vector's length
  word, before any element is visited) and vectors, ``dimensions`` within
  ``[0, MAX_DIMENSIONS]``; a request has exactly one of ``texts`` and
  ``tokens`` non-empty; a response's ``values`` holds ``count *
  dimensions`` floats;
- what the buffer expands to: the bytes of its strings and vector elements,
  counted once per reference, at most ``max_bytes`` (or, when not given,
  the buffer's own size: a buffer that shares nothing always expands to
  less; one whose inputs all point at one large string does not pass).

Not checked here: UTF-8 (the readers decode strictly and raise
``MalformedBuffer``), enum values (raw ints pass through). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from flatgate.proxy.wire.buffer import (
    ENTRIES,
    I32,
    MAX_BUFFER_BYTES,
    STRUCTS,
    U32,
    VT_HEAD,
    MalformedBuffer,
    check_input,
    ref_at,
    scalars_at,
    string_at,
    vector_at,
)
from flatgate.proxy.wire.embeddings.values import MAX_DIMENSIONS, MAX_INPUTS
from flatgate.proxy.wire.layout import (
    EMBEDDING_REQUEST,
    EMBEDDING_RESPONSE,
    HEADER,
    IDENTIFIER_AT,
    TOKEN_IDS,
    FieldKind,
    Table,
)
from flatgate.proxy.wire.schema import EMBEDDING_REQUEST_IDENTIFIER, EMBEDDING_RESPONSE_IDENTIFIER

__all__ = ["Checked", "verify_embedding_request", "verify_embedding_response"]


@dataclass(frozen=True, slots=True)
class Checked:
    """What a verifier found: the buffer as checked (``bytes`` or a read-only
    memoryview), the root's field positions by slot (0: absent), and the
    vectors' ``(first element, length)``: ``inputs`` for the request's texts
    or tokens (their uoffsets), ``ids`` per ``TokenIds`` (its int32s; (0, 0)
    for none), ``values`` for the response's floats."""

    buf: bytes | memoryview
    fields: tuple[int, ...]
    inputs: tuple[int, int] = (0, 0)
    ids: tuple[tuple[int, int], ...] = ()
    values: tuple[int, int] = (0, 0)


def _sizes(table: Table) -> tuple[tuple[bool, int], ...]:
    """Per slot: (is a scalar, the inline size to fit in the table)."""
    return tuple((f.kind == FieldKind.SCALAR, f.size) for f in table.specs)


class _Root(NamedTuple):
    """A root table as a verifier opens it (``_root``): its name in the
    messages, its file identifier, its slots (``_sizes``) and its string
    fields by slot."""

    what: str
    identifier: bytes
    slots: tuple[tuple[bool, int], ...]
    strings: tuple[tuple[int, str], ...]


def _strings(table: Table, *names: str) -> tuple[tuple[int, str], ...]:
    return tuple((table.slot(f), f) for f in names)


_REQUEST = _Root(
    "EmbeddingRequest",
    EMBEDDING_REQUEST_IDENTIFIER,
    _sizes(EMBEDDING_REQUEST),
    _strings(EMBEDDING_REQUEST, "request_id", "model_name", "user", "tenant", "extras"),
)
_RESPONSE = _Root(
    "EmbeddingResponse",
    EMBEDDING_RESPONSE_IDENTIFIER,
    _sizes(EMBEDDING_RESPONSE),
    _strings(EMBEDDING_RESPONSE, "request_id", "model"),
)
_TOKEN_IDS = _sizes(TOKEN_IDS)
_Q_TEXTS = EMBEDDING_REQUEST.slot("texts")
_Q_TOKENS = EMBEDDING_REQUEST.slot("tokens")
_Q_DIMENSIONS = EMBEDDING_REQUEST.slot("dimensions")
_T_IDS = TOKEN_IDS.slot("ids")
_T_SIZE = STRUCTS[TOKEN_IDS.spec("ids").element].size
_V_COUNT = EMBEDDING_RESPONSE.slot("count")
_V_DIMENSIONS = EMBEDDING_RESPONSE.slot("dimensions")
_V_VALUES = EMBEDDING_RESPONSE.slot("values")
_V_SIZE = STRUCTS[EMBEDDING_RESPONSE.spec("values").element].size
_SCALARS = (
    EMBEDDING_RESPONSE.spec("count").fmt,
    EMBEDDING_RESPONSE.spec("dimensions").fmt,
    EMBEDDING_REQUEST.spec("dimensions").fmt,
)
if _SCALARS != ("I", "I", "i"):
    raise ImportError("the embeddings verifier's scalar types no longer fit the schema")


def _table(
    buf: bytes | memoryview, n: int, pos: int, slots: tuple[tuple[bool, int], ...], what: str
) -> tuple[int, ...]:
    """The positions of the known fields of the table at ``pos`` (0: absent),
    its header and every present field's place checked."""
    if pos & 3:
        raise MalformedBuffer(f"{what}: table not 4-byte aligned", pos)
    if pos + 4 > n:
        raise MalformedBuffer(f"{what}: table soffset past buffer end", pos)
    vt = pos - I32(buf, pos)[0]
    if vt < 0 or vt + 4 > n:
        raise MalformedBuffer(f"{what}: vtable outside buffer", vt)
    if vt & 1:
        raise MalformedBuffer(f"{what}: vtable not 2-byte aligned", vt)
    vsize, tsize = VT_HEAD(buf, vt)
    if vsize < 4 or vsize & 1:
        raise MalformedBuffer(f"{what}: vtable size {vsize} odd or < 4", vt)
    if vt + vsize > n:
        raise MalformedBuffer(f"{what}: vtable past buffer end", vt)
    if tsize < 4 or pos + tsize > n:
        raise MalformedBuffer(f"{what}: table inline size {tsize} < 4 or past buffer end", pos)
    present = min((vsize - 4) >> 1, len(slots))
    offsets = ENTRIES[present](buf, vt + 4)
    out = [0] * len(slots)
    for i in range(present):
        off = offsets[i]
        if not off:
            continue
        scalar, size = slots[i]
        if off < 4 or off + size > tsize:
            raise MalformedBuffer(
                f"{what}: field offset {off} outside table inline size {tsize}", vt + 4 + 2 * i
            )
        at = pos + off
        if at & (size - 1 if scalar else 3):
            raise MalformedBuffer(f"{what}: {size}-byte field not aligned", at)
        out[i] = at
    return tuple(out)


def _root(
    buf: object, max_bytes: int | None, kind: _Root
) -> tuple[bytes | memoryview, int, tuple[int, ...], int, int]:
    """The checked input; its root table's position and fields (``_table``),
    the root's strings checked; the bytes the buffer may expand to
    (``max_bytes``, or its own size) and what those strings leave of them."""
    what, identifier = kind.what, kind.identifier
    data = check_input(buf)
    n = len(data)
    if max_bytes is not None and n > max_bytes:
        raise MalformedBuffer(f"buffer of {n} bytes exceeds max_bytes {max_bytes}")
    if n > MAX_BUFFER_BYTES:
        raise MalformedBuffer(f"buffer of {n} bytes exceeds {MAX_BUFFER_BYTES}")
    if n < HEADER:
        raise MalformedBuffer(f"root offset and file identifier: buffer of {n} bytes", 0)
    found = data[IDENTIFIER_AT:HEADER]
    if found != identifier:
        raise MalformedBuffer(
            f"file identifier: expected {identifier!r}, found {bytes(found)!r}", IDENTIFIER_AT
        )
    root = U32(data, 0)[0]
    if root < HEADER:
        raise MalformedBuffer("root offset points into the header", 0)
    fields = _table(data, n, root, kind.slots, what)
    room = limit = n if max_bytes is None else max_bytes
    for slot, name in kind.strings:
        if fields[slot]:
            try:
                room -= string_at(data, n, fields[slot])
            except MalformedBuffer as fail:
                raise MalformedBuffer(f"{what}.{name}: {fail.check}", fail.offset) from None
    return data, root, fields, limit, room


def _vector(buf: bytes | memoryview, n: int, at: int, what: str) -> tuple[int, int]:
    """``vector_at``, its failure naming the field."""
    try:
        return vector_at(buf, n, at)
    except MalformedBuffer as fail:
        raise MalformedBuffer(f"{what}: {fail.check}", fail.offset) from None


def _expands(what: str, room: int, limit: int) -> None:
    if room < 0:
        raise MalformedBuffer(
            f"{what}: expands to more than {limit} bytes of strings and vectors (max_bytes)"
        )


def verify_embedding_request(buf: bytes | memoryview, *, max_bytes: int | None = None) -> Checked:
    """Check the whole ``EmbeddingRequest`` in ``buf`` (see the module
    docstring); what it found, for the reader. ``MalformedBuffer`` on any
    failed check."""
    what = _REQUEST.what
    data, root, fields, limit, room = _root(buf, max_bytes, _REQUEST)
    n = len(data)
    inputs = (0, 0)
    ids: list[tuple[int, int]] = []
    texts = tokens = 0
    if fields[_Q_TEXTS]:
        first, texts = inputs = _vector(data, n, fields[_Q_TEXTS], f"{what}.texts")
        if texts > MAX_INPUTS:
            raise MalformedBuffer(f"{what}.texts: {texts} inputs, more than {MAX_INPUTS}", first)
        room -= 4 * texts
        for j in range(texts):
            try:
                room -= string_at(data, n, first + 4 * j)
            except MalformedBuffer as fail:
                raise MalformedBuffer(f"{what}.texts[{j}]: {fail.check}", fail.offset) from None
    if fields[_Q_TOKENS]:
        first, tokens = _vector(data, n, fields[_Q_TOKENS], f"{what}.tokens")
        if tokens > MAX_INPUTS:
            raise MalformedBuffer(f"{what}.tokens: {tokens} inputs, more than {MAX_INPUTS}", first)
        if tokens and texts:
            raise MalformedBuffer(f"{what}: both texts and tokens", root)
        if tokens:
            inputs = (first, tokens)
        room -= 4 * tokens
        for j in range(tokens):
            part = f"{what}.tokens[{j}]"
            try:
                row = _table(data, n, ref_at(data, first + 4 * j), _TOKEN_IDS, part)
                vec = (0, 0)
                if row[_T_IDS]:
                    vec = scalars_at(data, n, row[_T_IDS], _T_SIZE)
            except MalformedBuffer as fail:
                raise MalformedBuffer(
                    fail.check if fail.check.startswith(part) else f"{part}: {fail.check}",
                    fail.offset,
                ) from None
            room -= _T_SIZE * vec[1]
            _expands(what, room, limit)
            ids.append(vec)
    if not texts and not tokens:
        raise MalformedBuffer(f"{what}: neither texts nor tokens", root)
    _expands(what, room, limit)
    if fields[_Q_DIMENSIONS]:
        dimensions = I32(data, fields[_Q_DIMENSIONS])[0]
        if not 0 <= dimensions <= MAX_DIMENSIONS:
            raise MalformedBuffer(
                f"{what}.dimensions: {dimensions} outside [0, {MAX_DIMENSIONS}]",
                fields[_Q_DIMENSIONS],
            )
    return Checked(data, fields, inputs, tuple(ids))


def verify_embedding_response(buf: bytes | memoryview, *, max_bytes: int | None = None) -> Checked:
    """Check the whole ``EmbeddingResponse`` in ``buf`` (see the module
    docstring); what it found, for the reader. ``MalformedBuffer`` on any
    failed check."""
    what = _RESPONSE.what
    data, _, fields, limit, room = _root(buf, max_bytes, _RESPONSE)
    n = len(data)
    count = U32(data, fields[_V_COUNT])[0] if fields[_V_COUNT] else 0
    dimensions = U32(data, fields[_V_DIMENSIONS])[0] if fields[_V_DIMENSIONS] else 0
    if count > MAX_INPUTS:
        raise MalformedBuffer(f"{what}.count: {count} vectors, more than {MAX_INPUTS}")
    if dimensions > MAX_DIMENSIONS:
        raise MalformedBuffer(f"{what}.dimensions: {dimensions}, more than {MAX_DIMENSIONS}")
    values = (0, 0)
    if fields[_V_VALUES]:
        try:
            values = scalars_at(data, n, fields[_V_VALUES], _V_SIZE)
        except MalformedBuffer as fail:
            raise MalformedBuffer(f"{what}.values: {fail.check}", fail.offset) from None
    if values[1] != count * dimensions:
        raise MalformedBuffer(
            f"{what}.values: {values[1]} floats for {count} vectors of {dimensions}",
            values[0] - 4 if values[0] else None,
        )
    room -= _V_SIZE * values[1]
    _expands(what, room, limit)
    return Checked(data, fields, values=values)
