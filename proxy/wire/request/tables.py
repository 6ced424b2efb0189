"""The request writers' shared table helpers: vtables by field mask,
strings laid out after a table, offset vectors (``writer``, ``content``).

A table written by hand is packed with its fields' uoffsets computed from
where its strings will land right after it; its vtable is shared by every
table of the same kind and the same fields present (``shared_vtable``).
Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from flatgate.proxy.wire.buffer import PACK_U32, PAD

__all__ = [
    "offset_vector",
    "shared_vtable",
    "string_offsets",
    "strings_after",
    "vtable_of",
    "vtables",
]


def vtable_of(table_size: int, offsets: Sequence[int], present: int) -> bytes:
    """The vtable of a table whose slot i sits at ``offsets[i]`` and is present
    when bit i of ``present`` is set, padded to 4 bytes."""
    entries = [off if present >> i & 1 else 0 for i, off in enumerate(offsets)]
    raw = struct.pack(f"<{2 + len(offsets)}H", 4 + 2 * len(offsets), table_size, *entries)
    return raw + bytes(-len(raw) % 4)


def vtables(
    table_size: int, offsets: Sequence[int], always: frozenset[int] = frozenset()
) -> tuple[bytes, ...]:
    """Every vtable of a table whose fields come and go, padded to 4 bytes.

    ``offsets[i]`` is slot i's offset in the table; slots in ``always`` are
    always present; bit j of the index says whether the j-th other slot is.
    """
    optional = [i for i in range(len(offsets)) if i not in always]
    fixed = sum(1 << i for i in always)
    out = []
    for mask in range(1 << len(optional)):
        present = fixed | sum(1 << slot for j, slot in enumerate(optional) if mask >> j & 1)
        out.append(vtable_of(table_size, offsets, present))
    return tuple(out)


def strings_after(buf: bytearray, strings: Sequence[bytes]) -> None:
    """Append ``strings`` (the empty ones skipped) one after the other."""
    for data in strings:
        if data:
            n = len(data)
            buf += PACK_U32(n)
            buf += data
            buf += PAD[n & 3]


def string_offsets(first: int, field0: int, strings: Sequence[bytes]) -> list[int]:
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


def shared_vtable(buf: bytearray, vt_pos: dict[int, int], key: int, vtable: bytes) -> int:
    """Where the shared vtable ``key`` is: appended now if not written yet."""
    vpos = vt_pos.get(key)
    if vpos is None:
        vpos = vt_pos[key] = len(buf)
        buf += vtable
    return vpos


def offset_vector(buf: bytearray, count: int) -> int:
    """Append a vector of ``count`` offsets (zeros, patched later); returns its position."""
    pos = len(buf)
    buf += PACK_U32(count)
    buf += bytes(4 * count)
    return pos
