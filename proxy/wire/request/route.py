"""Reading a request's route without decoding it.

Owns ``read_route``: ``(provider, model)`` straight out of the request bytes
(a ``CompletionRequest`` or an ``EmbeddingRequest``: both keep ``provider``
and ``model_name`` at the same slots, which the import checks, so the proxy
routes both kinds with this one read),
``model`` a memoryview slice of the caller's buffer. It follows the root offset,
the root vtable, the two field offsets and the ``model_name`` string itself,
bounds-checking each, and touches nothing else, so its cost and allocations do
not depend on the prompt size. Its one error is ``wire.buffer.MalformedBuffer``.

Must not: copy or decode the body, use the generated accessors (they are the
baseline this beats, see ``benchmarks/codecs/``), do I/O, or let any
exception but ``MalformedBuffer`` escape, whatever the bytes.

Checks, in order, each failure naming itself and its offset: the input type
(``bytes`` or a flat read-only memoryview; writable buffers are refused, see
``wire.buffer.check_input``), the buffer size, the file identifier, the root
offset (4-byte aligned, inside the buffer, past the header), the root's
vtable (inside the buffer, 2-byte aligned, size even and >= 4, the table's
inline size inside the buffer), the ``provider`` and ``model_name`` field
offsets (inside the table's inline size; the string's uoffset 4-byte aligned),
the string (4-byte aligned, length and bytes inside the buffer, NUL present).

The file identifier is required: bytes 4..8 must be ``FGRQ`` (or ``FGEQ``,
an ``EmbeddingRequest``). The schemas declare them, ``flatc -b`` always
writes them, and the generated Python builder writes one when finished with
``builder.Finish(root, REQUEST_IDENTIFIER)``. A buffer without one cannot be
told from a buffer with a wrong one (those four bytes are then part of some
other object), so both are refused. Size-prefixed buffers are not requests
and are refused the same way.

Allocations per call with ``bytes`` input, the same at every body size
(CPython 3.11, counted without a profiler): 8.

- 1 int: ``len(buf)`` (a body is longer than 256 bytes; smaller ints are
  cached singletons and cost nothing);
- 1 int: the ``model_name`` uoffset ``struct`` returns (the string lies far
  from the root table, which writers put at the front);
- 3 ints: the string's position, its first byte and its end (``s``,
  ``start``, ``end``), needed for the slice;
- 3 objects: ``memoryview(buf)``'s managed buffer and view, and the slice.

The root offset, vtable entries and field positions are small ints (the root
table and its vtable sit in the first bytes), the tuples ``struct`` returns
and the result tuple come from CPython's tuple free lists, and every bounds
check is written as ``small + k > n`` rather than ``n - k`` so it allocates
nothing. A memoryview input saves the managed buffer and first view (6). An
``EmbeddingRequest`` costs the same: its identifier is compared with the
same cached small ints.
memray reports more (10 and 9): with its profiler hook set, CPython 3.11 runs
unspecialised bytecode, whose ``UNPACK_SEQUENCE`` allocates an iterator per
tuple unpacked, and makes a frame object for each Python call
(``check_input``); without a profiler neither happens.
"""

from __future__ import annotations

import struct

from flatgate.proxy.wire.buffer import (
    I32,
    MAX_BUFFER_BYTES,
    U16,
    U32,
    UNPACK,
    MalformedBuffer,
    check_input,
    field_at,
)
from flatgate.proxy.wire.layout import COMPLETION_REQUEST, EMBEDDING_REQUEST, HEADER, IDENTIFIER_AT
from flatgate.proxy.wire.schema import EMBEDDING_REQUEST_IDENTIFIER, REQUEST_IDENTIFIER

__all__ = ["read_route", "read_tenant", "tenant_present"]

_PROVIDER_READ = UNPACK[COMPLETION_REQUEST.spec("provider").fmt]
# The root vtable's head (its size, the table's size) and its entries up to the
# two fields read, in one unpack; positions in the tuple come from the layout.
_PROVIDER = 2 + COMPLETION_REQUEST.slot("provider")
_MODEL = 2 + COMPLETION_REQUEST.slot("model_name")
_VTABLE = struct.Struct(f"<{max(_PROVIDER, _MODEL) + 1}H").unpack_from
# Root offset and the identifier as four small ints: cached, so not allocated.
_HEAD = struct.Struct("<I4B").unpack_from
_ID0, _ID1, _ID2, _ID3 = REQUEST_IDENTIFIER
_EID0, _EID1, _EID2, _EID3 = EMBEDDING_REQUEST_IDENTIFIER
# Both kinds route by the same two slots, read the same way.
for _f in ("provider", "model_name"):
    if COMPLETION_REQUEST.slot(_f) != EMBEDDING_REQUEST.slot(_f) or (
        COMPLETION_REQUEST.spec(_f) != EMBEDDING_REQUEST.spec(_f)
    ):
        raise ImportError(f"read_route: {_f} is no longer at one slot in both request kinds")
# tenant_present and read_tenant tell the kinds apart by the identifier's
# third byte alone (the buffer's byte 6).
if _ID2 == _EID2:
    raise ImportError("read_route: the request identifiers no longer differ at byte 6")
_KIND_AT = IDENTIFIER_AT + 2
# Root offset, identifier and the root's soffset: what the first reads need.
_MIN_BYTES = HEADER + 4
# A vtable that holds model_name reaches past its entry.
_VT_MIN = COMPLETION_REQUEST.voffset("model_name") + 2
_VT_PROVIDER = COMPLETION_REQUEST.voffset("provider")
_VT_MODEL = COMPLETION_REQUEST.voffset("model_name")


def _vtable_fail(buf: bytes | memoryview, n: int, vt: int) -> MalformedBuffer:
    # Cold path: a vtable near the end may just be too short to hold model_name.
    if not vt & 1 and 0 <= vt <= n - 4 and U32(buf, vt)[0] & 0xFFFF < _VT_MIN:
        return MalformedBuffer("model_name absent (root vtable too short)", vt)
    return MalformedBuffer("root vtable: unaligned or outside the buffer", vt)


def _vtable_size_fail(vsize: int, n: int, vt: int) -> MalformedBuffer:
    if vsize & 1 or vsize < 4:
        return MalformedBuffer(f"root vtable size {vsize}: odd or < 4", vt)
    if vt + vsize > n:
        return MalformedBuffer(f"root vtable size {vsize}: past the buffer end", vt)
    return MalformedBuffer("model_name absent (root vtable too short)", vt)


def read_route(buf: bytes | memoryview) -> tuple[int, memoryview]:
    """``(provider, model)`` of the request (either kind) in ``buf``;
    ``model`` views ``buf``.

    ``provider`` is the raw enum value (0 when absent; unknown values pass
    through). Raises ``MalformedBuffer`` on any failed check, including a
    missing ``model_name``.
    """
    if type(buf) is not bytes:
        buf = check_input(buf)
    n = len(buf)
    if not _MIN_BYTES <= n <= MAX_BUFFER_BYTES:
        raise MalformedBuffer(f"buffer size {n}: outside [{_MIN_BYTES}, {MAX_BUFFER_BYTES}]", 0)
    root, i0, i1, i2, i3 = _HEAD(buf, 0)
    if (i0 != _ID0 or i1 != _ID1 or i2 != _ID2 or i3 != _ID3) and (
        i0 != _EID0 or i1 != _EID1 or i2 != _EID2 or i3 != _EID3
    ):
        raise MalformedBuffer(
            f"file identifier: expected {REQUEST_IDENTIFIER!r} or {EMBEDDING_REQUEST_IDENTIFIER!r}",
            IDENTIFIER_AT,
        )
    # Comparisons are written so that no intermediate exceeds the offsets
    # involved: the root table sits near the front, so these stay small ints
    # (cached, not allocated), while n - 4 would be a fresh int every call.
    if root & 3 or root < HEADER or root + 4 > n:
        raise MalformedBuffer(f"root offset {root}: unaligned, in the header or past the end", 0)
    vt = root - I32(buf, root)[0]
    if vt & 1 or vt < 0 or vt + _VT_MIN > n:
        raise _vtable_fail(buf, n, vt)
    entries = _VTABLE(buf, vt)
    vsize = entries[0]
    tsize = entries[1]
    f_provider = entries[_PROVIDER]
    f_model = entries[_MODEL]
    if vsize < _VT_MIN or vsize & 1 or vt + vsize > n:
        raise _vtable_size_fail(vsize, n, vt)
    if tsize < 4 or root + tsize > n:
        raise MalformedBuffer(f"root table inline size {tsize}: < 4 or past the buffer end", root)
    if f_provider:
        if not 4 <= f_provider < tsize:
            raise MalformedBuffer(
                f"provider field offset {f_provider}: outside the table", vt + _VT_PROVIDER
            )
        provider = _PROVIDER_READ(buf, root + f_provider)[0]
    else:
        provider = 0
    if not f_model:
        raise MalformedBuffer("model_name absent", vt + _VT_MODEL)
    if not 4 <= f_model <= tsize - 4:
        raise MalformedBuffer(
            f"model_name field offset {f_model}: outside the table", vt + _VT_MODEL
        )
    at = root + f_model
    if at & 3:
        raise MalformedBuffer("model_name uoffset: not 4-byte aligned", at)
    s = at + U32(buf, at)[0]
    start = s + 4
    if s & 3 or start > n:
        raise MalformedBuffer("model_name string: unaligned or past the buffer end", s)
    end = start + U32(buf, s)[0]
    if end >= n or buf[end]:
        raise MalformedBuffer(
            "model_name string: bytes past the buffer end"
            if end >= n
            else "model_name string: terminator is not NUL",
            s if end >= n else end,
        )
    if isinstance(buf, bytes):
        return provider, memoryview(buf)[start:end]
    return provider, buf[start:end]


_VT_TENANT = COMPLETION_REQUEST.voffset("tenant")
_VT_EMBEDDING_TENANT = EMBEDDING_REQUEST.voffset("tenant")


def _tenant_voffset(buf: bytes | memoryview) -> int:
    """Where ``tenant``'s vtable entry is for this request's kind."""
    return _VT_TENANT if buf[_KIND_AT] == _ID2 else _VT_EMBEDDING_TENANT


def tenant_present(buf: bytes | memoryview) -> bool:
    """Whether the request (either kind) sets ``tenant``: one vtable entry,
    read in place.

    Only for a buffer ``read_route`` accepted (its root and vtable are in
    bounds, its identifier one of the two); an entry past the vtable's end
    reads as absent.
    """
    return field_at(buf, U32(buf, 0)[0], _tenant_voffset(buf)) != 0


def read_tenant(buf: bytes | memoryview, limit: int = 128) -> str | None:
    """The request's (either kind's) ``tenant`` (at most ``limit`` bytes of
    it, decoded with replacement), or ``None`` when absent or out of bounds.

    Only for a buffer ``read_route`` accepted. For logs and metrics: it never
    raises, whatever the bytes.
    """
    n = len(buf)
    root = U32(buf, 0)[0]
    vt = root - I32(buf, root)[0]
    vsize, tsize = U16(buf, vt)[0], U16(buf, vt + 2)[0]
    voffset = _tenant_voffset(buf)
    if vsize < voffset + 2:
        return None
    field = U16(buf, vt + voffset)[0]
    if not 4 <= field <= tsize - 4:
        return None
    at = root + field
    if at & 3:
        return None
    s = at + U32(buf, at)[0]
    if s & 3 or s + 4 > n:
        return None
    start = s + 4
    end = start + U32(buf, s)[0]
    if end >= n:
        return None
    return bytes(buf[start : min(end, start + limit)]).decode("utf-8", "replace")
