"""The bounds-checked primitives every wire reader and writer is built on.

Owns, once for the wire layer:

- the precompiled ``struct`` unpackers and packers (``U32``, ``I32``,
  ``U16``, ..., ``UNPACK`` by a field's ``struct`` code, ``ENTRIES`` for a
  vtable's entries), shared as bound ``unpack_from`` objects so that a hot
  loop calls them directly, with no layer between;
- ``MalformedBuffer``, the wire layer's one error for a buffer that fails a
  check (its message names the check and the offset), and ``check_input``,
  the one rule for what a reader accepts (``bytes`` or a flat read-only
  memoryview);
- the checked lookups of a whole buffer, as the verifier needs them
  (``string_at``, ``vector_at``, ``ref_at``): each checks every offset it
  follows (alignment, inside the buffer, a string's NUL) and raises
  ``MalformedBuffer(check, offset)``;
- ``Window``, the same lookups bounded to a slice of a larger buffer (a chunk
  read in place among others), checking bounds only;
- the unchecked lookups of a buffer already checked (``entries``,
  ``field_at``, ``elements``): for readers that run after the verifier or
  catch ``struct.error`` themselves;
- the string encoding both writers use (``PAD``, ``put_string``).

Hot readers (``read_route``, ``read_chunk``, the verifier's per-table
checks) inline their checks where a call per check would cost; they take
their unpackers from here. Slots and offsets
come from ``wire.layout``, never from here. Pure: no I/O, no state.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

__all__ = [
    "ENTRIES",
    "F32",
    "I8",
    "I32",
    "I64",
    "MAX_BUFFER_BYTES",
    "PACK_U32",
    "PACK_U32_INTO",
    "PAD",
    "STRUCTS",
    "U16",
    "U32",
    "UINT32",
    "UNPACK",
    "VT_HEAD",
    "MalformedBuffer",
    "Unpack",
    "Window",
    "check_input",
    "elements",
    "entries",
    "field_at",
    "put_string",
    "ref_at",
    "scalars_at",
    "string_at",
    "string_bytes",
    "vector_at",
    "window_string",
]

# FlatBuffers' own limit (2 GiB - 1): offsets are 32-bit, soffsets signed.
MAX_BUFFER_BYTES = (1 << 31) - 1

Unpack = Callable[..., tuple[Any, ...]]

# Every FlatBuffers scalar by its struct code ("I" is also a uoffset).
STRUCTS: dict[str, struct.Struct] = {c: struct.Struct("<" + c) for c in "b?BhHiIqQfd"}
UNPACK: dict[str, Unpack] = {c: s.unpack_from for c, s in STRUCTS.items()}
UINT32 = STRUCTS["I"]
U32 = UINT32.unpack_from
# Packers are shared bound, like the unpackers: CPython 3.11 compiles
# ``imported_name.method(...)`` as an attribute load (a bound method made per
# call), not a method call, so a module that imported ``UINT32`` and called
# ``UINT32.pack`` would pay for it in every loop.
PACK_U32 = UINT32.pack
PACK_U32_INTO = UINT32.pack_into
I32 = STRUCTS["i"].unpack_from
U16 = STRUCTS["H"].unpack_from
I8 = STRUCTS["b"].unpack_from
F32 = STRUCTS["f"].unpack_from
I64 = STRUCTS["q"].unpack_from
# A vtable's head: its size, its table's inline size.
VT_HEAD: Unpack = struct.Struct("<HH").unpack_from
# ENTRIES[n] reads n vtable entries at once.
ENTRIES: tuple[Unpack, ...] = tuple(struct.Struct(f"<{n}H").unpack_from for n in range(65))
# A string's NUL terminator and padding to 4 bytes, by its length & 3.
PAD = (b"\0\0\0\0", b"\0\0\0", b"\0\0", b"\0")


class MalformedBuffer(ValueError):
    """A buffer failed a check; the message names the check and its offset.

    The only exception ``read_route`` and ``verify_request`` raise. ``check``
    and ``offset`` are the parts; ``path`` collects where in the tables the
    verifier was when a lookup failed.
    """

    def __init__(self, check: str, offset: int | None = None) -> None:
        super().__init__(check if offset is None else f"{check} at offset {offset}")
        self.check = check
        self.offset = offset
        self.path: list[str] = []


def check_input(buf: object) -> bytes | memoryview:
    """``buf`` itself if it is ``bytes`` or a flat read-only byte memoryview.

    Writable buffers are refused: they could change between the check and the
    read, and a view of one is unhashable (route keys). Convert once, at the
    edge of the system, with ``bytes(...)``.
    """
    if isinstance(buf, bytes):
        return buf
    if isinstance(buf, memoryview):
        try:
            flat = buf.readonly and buf.format == "B" and buf.ndim == 1 and buf.c_contiguous
        except ValueError:  # a released memoryview
            raise MalformedBuffer("input: released memoryview") from None
        if flat:
            return buf
        raise MalformedBuffer(
            "input: memoryview must be read-only, format 'B', 1-D and contiguous "
            "(convert with bytes(...) at the edge)"
        )
    raise MalformedBuffer(
        f"input: expected bytes or a read-only memoryview, got {type(buf).__name__}"
    )


# --- Checked lookups over a whole buffer of ``n`` bytes (the verifier's). ---


def string_at(buf: bytes | memoryview, n: int, at: int) -> int:
    """The byte length of the string whose uoffset is stored at ``at`` (itself
    inside the buffer): the uoffset and the string 4-byte aligned, the length
    word, bytes and NUL terminator inside the buffer."""
    if at & 3:
        raise MalformedBuffer("string uoffset not 4-byte aligned", at)
    s = at + U32(buf, at)[0]
    if s & 3:
        raise MalformedBuffer("string not 4-byte aligned", s)
    if s + 4 > n:
        raise MalformedBuffer("string length past buffer end", s)
    length: int = U32(buf, s)[0]
    end = s + 4 + length
    if end >= n:
        raise MalformedBuffer("string bytes or terminator past buffer end", s)
    if buf[end] != 0:
        raise MalformedBuffer("string terminator is not NUL", end)
    return length


def vector_at(buf: bytes | memoryview, n: int, at: int) -> tuple[int, int]:
    """``(first element, length)`` of the vector of uoffsets whose uoffset is
    stored at ``at``: aligned, its length word and elements inside the buffer."""
    if at & 3:
        raise MalformedBuffer("vector uoffset not 4-byte aligned", at)
    v = at + U32(buf, at)[0]
    if v & 3:
        raise MalformedBuffer("vector not 4-byte aligned", v)
    if v + 4 > n:
        raise MalformedBuffer("vector length past buffer end", v)
    length: int = U32(buf, v)[0]
    if v + 4 + 4 * length > n:
        raise MalformedBuffer(f"vector of {length} elements past buffer end", v)
    return v + 4, length


def scalars_at(buf: bytes | memoryview, n: int, at: int, size: int) -> tuple[int, int]:
    """``(first element, length)`` of the vector of ``size``-byte scalars whose
    uoffset is stored at ``at``: aligned (its length word to 4, its elements
    to their size), its length word and ``length * size`` bytes inside the
    buffer."""
    if at & 3:
        raise MalformedBuffer("vector uoffset not 4-byte aligned", at)
    v = at + U32(buf, at)[0]
    if v & 3 or (v + 4) % size:
        raise MalformedBuffer("vector not aligned", v)
    if v + 4 > n:
        raise MalformedBuffer("vector length past buffer end", v)
    length: int = U32(buf, v)[0]
    if v + 4 + size * length > n:
        raise MalformedBuffer(f"vector of {length} elements past buffer end", v)
    return v + 4, length


def ref_at(buf: bytes | memoryview, at: int) -> int:
    """Where the table whose uoffset is stored at ``at`` starts (checked by
    the caller next): the uoffset 4-byte aligned."""
    if at & 3:
        raise MalformedBuffer("table uoffset not 4-byte aligned", at)
    target: int = at + U32(buf, at)[0]
    return target


# --- Checked lookups bounded to [lo, stop) of a larger buffer. ---


class Window:
    """Reads inside ``data[lo:stop]``, every offset followed checked to stay
    there (bounds only: a chunk read in place among others). Failures raise
    ``MalformedBuffer`` naming ``what``."""

    __slots__ = ("data", "lo", "stop")

    def __init__(self, data: bytes, lo: int, stop: int) -> None:
        self.data = data
        self.lo = lo
        self.stop = stop

    def check(self, pos: int, size: int, what: str) -> None:
        if pos < self.lo or pos + size > self.stop:
            raise MalformedBuffer(f"{what} out of bounds")

    def vtable(self, pos: int, what: str, most: int) -> tuple[int, int, int]:
        """``(vtable, vtable size, inline size)`` of the table at ``pos``, the
        vtable holding at most ``most`` entries."""
        data = self.data
        self.check(pos, 4, what)
        vt = pos - I32(data, pos)[0]
        self.check(vt, 4, f"{what} vtable")
        vt_size, t_size = VT_HEAD(data, vt)
        if vt_size < 4 or vt_size & 1 or vt_size > 4 + 2 * most:
            raise MalformedBuffer(f"{what} vtable size {vt_size}")
        self.check(vt, vt_size, f"{what} vtable")
        self.check(pos, t_size, what)
        return vt, vt_size, t_size

    def table(self, pos: int, what: str, most: int) -> tuple[int, tuple[int, ...]]:
        """A table at ``pos``: ``(pos, its vtable's field offsets)``, each inside
        it, its vtable checked as ``vtable`` does."""
        vt, vt_size, t_size = self.vtable(pos, what, most)
        data = self.data
        count = (vt_size - 4) >> 1
        fields: tuple[int, ...] = ENTRIES[count](data, vt + 4)
        for f in fields:
            if f and f + 1 > t_size:
                raise MalformedBuffer(f"{what} field outside its table")
        return pos, fields

    def slot(self, table: int, slot: int, what: str, most: int) -> int:
        """The field offset of ``slot`` in the table at ``table`` (0: absent),
        its vtable checked as ``table`` does, without listing every field."""
        vt, vt_size, t_size = self.vtable(table, what, most)
        at = 4 + 2 * slot
        if at + 2 > vt_size:
            return 0
        field: int = U16(self.data, vt + at)[0]
        if field and field + 1 > t_size:
            raise MalformedBuffer(f"{what} field outside its table")
        return field

    def ref(self, table: int, field: int, what: str) -> int:
        """Follow the uoffset stored at ``table + field``."""
        at = table + field
        self.check(at, 4, what)
        target: int = at + U32(self.data, at)[0]
        self.check(target, 4, what)
        return target

    def string(self, table: int, field: int, what: str) -> str:
        """The string field at ``table + field`` (``""`` when ``field`` is 0)."""
        if not field:
            return ""
        return window_string(self.data, self.lo, self.stop, table + field, what)

    def blob(self, table: int, field: int, what: str) -> bytes:
        """The ``[ubyte]`` field at ``table + field`` (``b""`` when ``field`` is 0)."""
        if not field:
            return b""
        vec = self.ref(table, field, what)
        size = U32(self.data, vec)[0]
        self.check(vec + 4, size, what)
        return bytes(self.data[vec + 4 : vec + 4 + size])

    def scalar(self, table: int, field: int, fmt: struct.Struct, what: str) -> int:
        """The scalar field at ``table + field`` (0 when ``field`` is 0)."""
        if not field:
            return 0
        self.check(table + field, fmt.size, what)
        return int(fmt.unpack_from(self.data, table + field)[0])


def window_string(data: bytes, lo: int, stop: int, at: int, what: str) -> str:
    """The string whose uoffset is at ``at``, every offset checked to stay in
    ``[lo, stop)``, decoded as strict UTF-8: a hot reader's one call per string."""
    if at + 4 > stop:  # at lies past lo: a table's position plus a field offset
        raise MalformedBuffer(f"{what} out of bounds")
    pos = at + U32(data, at)[0]
    if pos + 4 > stop:
        raise MalformedBuffer(f"{what} out of bounds")
    start = pos + 4
    size = U32(data, pos)[0]
    if start + size > stop:
        raise MalformedBuffer(f"{what} out of bounds")
    try:
        return data[start : start + size].decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedBuffer(f"{what} is not UTF-8") from None


# --- Unchecked lookups, for a buffer a check has passed already. ---


def entries(buf: bytes | memoryview, pos: int, count: int) -> tuple[int, ...]:
    """The first ``count`` vtable entries of the table at ``pos`` (0 past the
    vtable's end)."""
    vt = pos - I32(buf, pos)[0]
    have: int = (U16(buf, vt)[0] - 4) >> 1
    if have >= count:
        got: tuple[int, ...] = ENTRIES[count](buf, vt + 4)
        return got
    short: tuple[int, ...] = ENTRIES[have](buf, vt + 4)
    return short + (0,) * (count - have)


def field_at(buf: bytes | memoryview, table: int, voffset: int) -> int:
    """Where the field whose vtable entry is at ``voffset`` of the table at
    ``table`` is (0: absent)."""
    vt = table - I32(buf, table)[0]
    if voffset + 2 > U16(buf, vt)[0]:
        return 0
    off: int = U16(buf, vt + voffset)[0]
    return table + off if off else 0


def elements(buf: bytes | memoryview, at: int, most: int = MAX_BUFFER_BYTES) -> list[int]:
    """What the vector of uoffsets whose uoffset is at ``at`` points at: the
    first ``most`` of its elements."""
    v = at + U32(buf, at)[0]
    count: int = U32(buf, v)[0]
    out = []
    e = v + 4
    # A loop, not a comprehension: on 3.11 that would make a function per call.
    for _ in range(count if count < most else most):
        out.append(e + U32(buf, e)[0])
        e += 4
    return out


# --- Writing. ---


def string_bytes(data: bytes) -> bytes:
    """One string as laid out: length word, bytes, NUL, padding to 4."""
    n = len(data)
    return UINT32.pack(n) + data + PAD[n & 3]


def put_string(buf: bytearray, data: bytes) -> int:
    """Append one string (as ``string_bytes``) to ``buf``; its position."""
    pos = len(buf)
    n = len(data)
    buf += UINT32.pack(n)
    buf += data
    buf += PAD[n & 3]
    return pos
