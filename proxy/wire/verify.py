"""The full verifier of a ``CompletionRequest`` buffer, and the wire layer's error.

Owns ``verify_request`` (re-exported by ``proxy.wire``), ``MalformedBuffer``
and the hand-written field table (``LAYOUTS``) that mirrors
``schema/gateway.fbs``; ``tests/proxy/test_verify.py`` checks the table against
the schema, so a schema change the verifier does not know about fails a test.

The promise: any buffer ``verify_request`` accepts decodes fully with the
generated accessors and the object API (``CompletionRequestT.InitFromPackedBuf``)
without an exception. Checked, like the C++ verifier does:

- the root offset, and the file identifier ``FGRQ`` at bytes 4..8 (required:
  every writer given this schema writes it; see ``proxy.wire``);
- every table: its soffset inside the buffer and 4-byte aligned, its vtable
  2-byte aligned and inside the buffer, the vtable size even and >= 4, the
  table's inline size >= 4 and inside the buffer, and each present field known
  to the schema at an offset >= 4 with ``offset + size`` within the inline size
  and aligned to its size;
- every uoffset 4-byte aligned; every string's length word and bytes inside the
  buffer, 4-byte aligned, with its NUL terminator; every vector's length word
  and ``length * 4`` element bytes inside the buffer;
- nested tables (``Tool``, ``Message``, ``ToolCall``, ``KeyValue``) the same way.

Not checked, on purpose: UTF-8. The generated accessors and the object API
(generated without ``--python-decode-obj-api-strings``) return strings as
``bytes`` and never decode them, so invalid UTF-8 cannot make a decode raise;
checking it would make the cost grow with string bytes. Whoever decodes text
(the backend adapters) chooses its own error handler. Enum fields may hold
values this schema does not name (accessors return plain ints). Fields in the
vtable past the ones this schema knows (a newer writer) are skipped, as they are
never read. ``model_name`` is optional here (the schema does not mark it
required); ``read_route`` is what insists on it.

Limits: the schema has no recursive table, so nesting is at most 3 tables deep
(``CompletionRequest`` -> ``Message`` -> ``ToolCall``); ``max_depth`` (default
``MAX_DEPTH``) is still enforced so that a future recursive table stays bounded.
Every uoffset points forward (it is unsigned), so no offset chain can cycle; but
objects may be shared (many vector entries pointing at one table), so the total
number of tables, vectors and strings visited is capped by ``max_objects``
(default ``MAX_OBJECTS``), counting a shared object once per reference. What
the buffer expands to when decoded is capped too: the bytes of every string
(its length word) and of every vector's elements (4 per uoffset), summed once
per reference, at most ``max_bytes`` (default ``MAX_BYTES``). Without that cap
2,000 ``messages`` entries pointing at one 256 KiB ``Message`` (a 270 KB body)
decode to 500 MiB. Each service passes its own ``max_body_bytes``: distinct
strings and vectors occupy distinct bytes of a buffer, so one that shares
nothing expands to less than its own size; one that shares strings (flatc's
``CreateSharedString``) is held to what it would weigh unshared, a body the
service accepts. The cost is linear in the objects visited and independent of
string bytes (the sum reads no byte beyond each string's length word).

Pure: no I/O, no state. Only ``MalformedBuffer`` leaves ``verify_request``.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER

__all__ = [
    "LAYOUTS",
    "MAX_BUFFER_BYTES",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_OBJECTS",
    "FieldKind",
    "FieldSpec",
    "MalformedBuffer",
    "check_input",
    "verify_request",
]

# FlatBuffers' own limit (2 GiB - 1): offsets are 32-bit, soffsets signed.
MAX_BUFFER_BYTES = (1 << 31) - 1
# CompletionRequest -> Message -> ToolCall is 3; headroom for appended tables.
MAX_DEPTH = 8
# Tables + vectors + strings visited. A 20-message request visits ~100.
MAX_OBJECTS = 65_536
# String and vector bytes a buffer may expand to, shared ones counted per
# reference; callers in service pass their max_body_bytes instead.
MAX_BYTES = 8 << 20

_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U16 = struct.Struct("<H").unpack_from
_U16X2 = struct.Struct("<HH").unpack_from


class MalformedBuffer(ValueError):
    """A request buffer failed a check; the message names the check and offset.

    The only exception ``read_route`` and ``verify_request`` raise.
    """


class FieldKind(enum.IntEnum):
    """What a vtable slot holds, as far as verification cares."""

    SCALAR = 0
    STRING = 1
    TABLE = 2
    STRING_VECTOR = 3
    TABLE_VECTOR = 4


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One schema field: ``size`` is the scalar's width (4 for offsets);
    ``table`` names the element/field table for TABLE and TABLE_VECTOR."""

    name: str
    kind: FieldKind
    size: int = 4
    table: str | None = None


def _scalar(name: str, size: int) -> FieldSpec:
    return FieldSpec(name, FieldKind.SCALAR, size)


def _string(name: str) -> FieldSpec:
    return FieldSpec(name, FieldKind.STRING)


def _tables(name: str, table: str) -> FieldSpec:
    return FieldSpec(name, FieldKind.TABLE_VECTOR, table=table)


# Slot order is vtable order (slot i lives at voffset 4 + 2 * i). Keep in step
# with schema/gateway.fbs: tests/proxy/test_verify.py compares the two.
LAYOUTS: Mapping[str, tuple[FieldSpec, ...]] = {
    "ToolCall": (_string("id"), _string("name"), _string("arguments")),
    "Message": (
        _scalar("role", 1),
        _string("content"),
        _string("name"),
        _tables("tool_calls", "ToolCall"),
        _string("tool_call_id"),
        _scalar("is_error", 1),
    ),
    "Tool": (
        _string("name"),
        _string("description"),
        _string("parameters"),
        _scalar("strict", 1),
    ),
    "KeyValue": (_string("key"), _string("value")),
    "CompletionRequest": (
        _string("request_id"),
        _scalar("provider", 1),
        _string("model_name"),
        _scalar("max_tokens", 4),
        _scalar("temperature", 4),
        _tables("tools", "Tool"),
        _tables("messages", "Message"),
        _scalar("tool_choice", 1),
        _string("tool_choice_name"),
        _scalar("top_p", 4),
        FieldSpec("stop", FieldKind.STRING_VECTOR),
        _scalar("seed", 8),
        _scalar("presence_penalty", 4),
        _scalar("frequency_penalty", 4),
        _scalar("n", 4),
        _scalar("stream", 1),
        _string("user"),
        _string("tenant"),
        _tables("metadata", "KeyValue"),
        _scalar("include_usage", 1),
        _scalar("parallel_tool_calls", 1),
        _string("response_format"),
        _scalar("top_k", 4),
    ),
}

# Compiled form of LAYOUTS: per table, its name, a struct reading all known
# vtable slots at once (indexed by how many the vtable holds), and per slot
# (name, kind, size, nested layout or None).
_Slot = tuple[str, int, int, "_Layout | None"]


@dataclass(frozen=True, slots=True)
class _Layout:
    name: str
    slots: tuple[_Slot, ...]
    readers: tuple[struct.Struct, ...]


def _compile(layouts: Mapping[str, tuple[FieldSpec, ...]]) -> dict[str, _Layout]:
    done: dict[str, _Layout] = {}

    def build(name: str, seen: tuple[str, ...]) -> _Layout:
        if name in done:
            return done[name]
        if name in seen:  # a recursive table: the verifier would need a new shape
            raise ValueError(f"recursive table {name} is not supported")
        slots: list[_Slot] = []
        for spec in layouts[name]:
            nested = None
            if spec.table is not None:
                nested = build(spec.table, (*seen, name))
            slots.append((spec.name, int(spec.kind), spec.size, nested))
        count = len(slots)
        layout = _Layout(
            name, tuple(slots), tuple(struct.Struct(f"<{k}H") for k in range(count + 1))
        )
        done[name] = layout
        return layout

    for table in layouts:
        build(table, ())
    return done


_COMPILED = _compile(LAYOUTS)
_ROOT = _COMPILED["CompletionRequest"]

_SCALAR = int(FieldKind.SCALAR)
_STRING = int(FieldKind.STRING)
_TABLE = int(FieldKind.TABLE)
_STRING_VECTOR = int(FieldKind.STRING_VECTOR)
_TABLE_VECTOR = int(FieldKind.TABLE_VECTOR)


class _Fail(Exception):
    """Internal: a failed check, collecting its path while it unwinds."""

    def __init__(self, check: str, offset: int) -> None:
        super().__init__(check)
        self.check = check
        self.offset = offset
        self.path: list[str] = []


class _Walk:
    """One verification: the buffer, its size and what is left of the limits."""

    __slots__ = ("buf", "max_bytes", "max_depth", "n", "objects", "room")

    def __init__(
        self, buf: bytes | memoryview, objects: int, max_depth: int, max_bytes: int
    ) -> None:
        self.buf = buf
        self.n = len(buf)
        self.objects = objects
        self.max_depth = max_depth
        self.max_bytes = max_bytes
        # Bytes of strings and vector elements still allowed (max_bytes).
        self.room = max_bytes


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


def _string_at(buf: bytes | memoryview, n: int, at: int) -> int:
    """Check the string whose uoffset is stored at ``at`` (already in bounds);
    return its length in bytes."""
    if at & 3:
        raise _Fail("string uoffset not 4-byte aligned", at)
    s = at + _U32(buf, at)[0]
    if s & 3:
        raise _Fail("string not 4-byte aligned", s)
    if s + 4 > n:
        raise _Fail("string length past buffer end", s)
    length: int = _U32(buf, s)[0]
    end = s + 4 + length
    if end >= n:
        raise _Fail("string bytes or terminator past buffer end", s)
    if buf[end] != 0:
        raise _Fail("string terminator is not NUL", end)
    return length


def _vector_at(w: _Walk, at: int) -> tuple[int, int]:
    """Check a vector of uoffsets whose uoffset is stored at ``at``;
    return (first element position, length)."""
    buf = w.buf
    n = w.n
    if at & 3:
        raise _Fail("vector uoffset not 4-byte aligned", at)
    v = at + _U32(buf, at)[0]
    if v & 3:
        raise _Fail("vector not 4-byte aligned", v)
    if v + 4 > n:
        raise _Fail("vector length past buffer end", v)
    length = _U32(buf, v)[0]
    if v + 4 + 4 * length > n:
        raise _Fail(f"vector of {length} elements past buffer end", v)
    w.objects -= length + 1
    if w.objects < 0:
        raise _Fail("too many objects (max_objects)", v)
    return v + 4, length


def _expands(w: _Walk) -> str:
    return f"expands to more than {w.max_bytes} bytes of strings and vectors (max_bytes)"


def _table_at(w: _Walk, pos: int, layout: _Layout, depth: int) -> None:
    """Check the table at ``pos`` and everything it references."""
    buf = w.buf
    n = w.n
    if depth > w.max_depth:
        raise _Fail("tables nested too deep (max_depth)", pos)
    if pos & 3:
        raise _Fail("table not 4-byte aligned", pos)
    if pos + 4 > n:
        raise _Fail("table soffset past buffer end", pos)
    vt = pos - _I32(buf, pos)[0]
    if vt < 0 or vt + 4 > n:
        raise _Fail("vtable outside buffer", vt)
    if vt & 1:
        raise _Fail("vtable not 2-byte aligned", vt)
    vsize, tsize = _U16X2(buf, vt)
    if vsize < 4 or vsize & 1:
        raise _Fail(f"vtable size {vsize} odd or < 4", vt)
    if vt + vsize > n:
        raise _Fail("vtable past buffer end", vt)
    if tsize < 4 or pos + tsize > n:
        raise _Fail(f"table inline size {tsize} < 4 or past buffer end", pos)
    slots = layout.slots
    present = min((vsize - 4) >> 1, len(slots))
    offsets = layout.readers[present].unpack_from(buf, vt + 4)
    name = ""
    # Bytes of this table's own strings and vector elements (max_bytes),
    # charged once its fields are checked; nested tables charge their own.
    text = 0
    try:
        for i in range(present):
            off = offsets[i]
            if not off:
                continue
            name, kind, size, nested = slots[i]
            if off < 4 or off + size > tsize:
                raise _Fail(f"field offset {off} outside table inline size {tsize}", vt + 4 + 2 * i)
            at = pos + off
            if kind == _SCALAR:
                if at & (size - 1):
                    raise _Fail(f"{size}-byte scalar not aligned", at)
            elif kind == _STRING:
                w.objects -= 1
                text += _string_at(buf, n, at)
            elif kind == _TABLE_VECTOR:
                first, length = _vector_at(w, at)
                text += 4 * length
                assert nested is not None
                for j in range(length):
                    e = first + 4 * j
                    try:
                        _table_at(w, e + _U32(buf, e)[0], nested, depth + 1)
                    except _Fail as fail:
                        fail.path.append(f"[{j}]")
                        raise
            elif kind == _STRING_VECTOR:
                first, length = _vector_at(w, at)
                text += 4 * length
                for j in range(length):
                    try:
                        text += _string_at(buf, n, first + 4 * j)
                    except _Fail as fail:
                        fail.path.append(f"[{j}]")
                        raise
            else:  # _TABLE: no field of this kind yet; kept for appended fields
                if at & 3:
                    raise _Fail("table uoffset not 4-byte aligned", at)
                assert nested is not None
                w.objects -= 1
                _table_at(w, at + _U32(buf, at)[0], nested, depth + 1)
    except _Fail as fail:
        fail.path.append(f".{name}")
        raise
    if w.objects < 0:
        raise _Fail("too many objects (max_objects)", pos)
    if text:
        w.room -= text
        if w.room < 0:
            raise _Fail(_expands(w), pos)


def verify_request(
    buf: bytes | memoryview,
    *,
    max_objects: int = MAX_OBJECTS,
    max_depth: int = MAX_DEPTH,
    max_bytes: int = MAX_BYTES,
) -> None:
    """Check the whole ``CompletionRequest`` in ``buf``; raise ``MalformedBuffer``.

    ``buf`` is ``bytes`` or a read-only memoryview (see ``check_input``).
    ``max_bytes``: what the buffer may expand to (see the module docstring);
    a service passes its ``max_body_bytes``.
    """
    _verify_root(buf, _ROOT, REQUEST_IDENTIFIER, max_objects, max_depth, max_bytes=max_bytes)


def _verify_root(
    buf: bytes | memoryview,
    root_layout: _Layout,
    identifier: bytes,
    max_objects: int,
    depth: int,
    *,
    max_bytes: int = MAX_BYTES,
) -> None:
    """Verify a finished buffer (not size-prefixed) whose root is ``root_layout``."""
    data = check_input(buf)
    n = len(data)
    if n > MAX_BUFFER_BYTES:
        raise MalformedBuffer(f"buffer of {n} bytes exceeds {MAX_BUFFER_BYTES}")
    if n < 8:
        raise MalformedBuffer(f"root offset and file identifier: buffer of {n} bytes at offset 0")
    if data[4:8] != identifier:
        raise MalformedBuffer(
            f"file identifier: expected {identifier!r}, found {bytes(data[4:8])!r} at offset 4"
        )
    root = _U32(data, 0)[0]
    walk = _Walk(data, max_objects - 1, depth, max_bytes)
    try:
        if root < 8:
            raise _Fail("root offset points into the header", 0)
        _table_at(walk, root, root_layout, 1)
    except _Fail as fail:
        path = root_layout.name + "".join(reversed(fail.path))
        raise MalformedBuffer(f"{path}: {fail.check} at offset {fail.offset}") from None
