"""The full verifier of a ``CompletionRequest`` buffer.

Owns ``verify_request`` and its limits. It walks the tables as ``wire.layout``
describes them (every table the root reaches, compiled once at import),
checking each table's header itself and every string and vector with the
checked lookups of ``wire.buffer``, whose ``MalformedBuffer`` it raises with
the path of the field that failed; ``tests/schema/test_layouts.py``
checks the layout against the schema, so a schema change the verifier does
not know about fails a test.

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
  and ``length * 4`` element bytes inside the buffer (a vector of scalars,
  ``ReasoningPart.opaque``: ``length * size``, its elements aligned to their
  size);
- nested tables (``Tool``, ``Message``, ``ToolCall``, ``KeyValue``,
  ``ReasoningPart``, ``ContentPart``) the same way;
- a message's content parts: what a ``span`` says holds, so that no reader
  has to clamp one: only a ``Document`` has one, it is not negative, it
  counts no more parts than follow it in the list, and no part it spans has
  a span of its own (a document's content holds no documents).

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
Content parts are bounded by the same limits: their number by
``max_objects`` (each is a table, its data a vector), their bytes by
``max_bytes`` (a part's ``data``, an image of megabytes, is a vector of
``ubyte`` counted once per reference, so a part shared by many messages is
held to what its copies would weigh), and the walk reads no byte of the data.

Pure: no I/O, no state. Only ``MalformedBuffer`` leaves ``verify_request``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flatgate.proxy.wire.buffer import (
    ENTRIES,
    I8,
    I32,
    MAX_BUFFER_BYTES,
    STRUCTS,
    U16,
    U32,
    VT_HEAD,
    MalformedBuffer,
    Unpack,
    check_input,
    ref_at,
    scalars_at,
    string_at,
    vector_at,
)
from flatgate.proxy.wire.layout import (
    CONTENT_PART,
    HEADER,
    IDENTIFIER_AT,
    TABLES,
    FieldKind,
    Table,
)
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER, PartKind

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_OBJECTS", "verify_request"]

# CompletionRequest -> Message -> ToolCall is 3; headroom for appended tables.
MAX_DEPTH = 8
# Tables + vectors + strings visited. A 20-message request visits ~100.
MAX_OBJECTS = 65_536
# String and vector bytes a buffer may expand to, shared ones counted per
# reference; callers in service pass their max_body_bytes instead. 32 MiB, the
# services' default max_body_bytes: a request of images and documents at the
# largest body they take.
MAX_BYTES = 32 << 20

# Compiled form of a layout: per table, its name, per slot (name, kind, size,
# nested layout or None), and the readers of its vtable entries (indexed by
# how many the vtable holds).
_Slot = tuple[str, int, int, "_Layout | None"]


@dataclass(frozen=True, slots=True)
class _Layout:
    name: str
    slots: tuple[_Slot, ...]
    readers: tuple[Unpack, ...]


def _compile(tables: Mapping[str, Table], root: str) -> _Layout:
    """The walk of ``root`` and every table it reaches, from their layouts."""
    done: dict[str, _Layout] = {}

    def build(name: str, seen: tuple[str, ...]) -> _Layout:
        if name in done:
            return done[name]
        if name in seen:  # a recursive table: the verifier would need a new shape
            raise ValueError(f"recursive table {name} is not supported")
        slots: list[_Slot] = []
        for spec in tables[name].specs:
            nested = None
            if spec.table is not None:
                nested = build(spec.table, (*seen, name))
            size = STRUCTS[spec.element].size if spec.element else spec.size
            slots.append((spec.name, int(spec.kind), size, nested))
        layout = _Layout(name, tuple(slots), ENTRIES[: len(slots) + 1])
        done[name] = layout
        return layout

    return build(root, ())


_ROOT = _compile(TABLES, "CompletionRequest")

_SCALAR = int(FieldKind.SCALAR)
_STRING = int(FieldKind.STRING)
_TABLE = int(FieldKind.TABLE)
_STRING_VECTOR = int(FieldKind.STRING_VECTOR)
_TABLE_VECTOR = int(FieldKind.TABLE_VECTOR)
_SCALAR_VECTOR = int(FieldKind.SCALAR_VECTOR)
# Vectors of uoffsets: to tables, or to strings (no nested layout).
_UOFFSET_VECTORS = frozenset({_TABLE_VECTOR, _STRING_VECTOR})


# A content part's kind and span, by their vtable entries (and readers).
_PART_NAME = CONTENT_PART.name
_PART_KIND = CONTENT_PART.voffset("kind")
_PART_SPAN = CONTENT_PART.voffset("span")
_KIND_AT = I8
_SPAN_AT = I32
_DOCUMENT = int(PartKind.DOCUMENT)


def _spans(buf: bytes | memoryview, first: int, length: int) -> None:
    """Check the spans of the ``length`` content parts whose uoffsets start
    at ``first`` (each part's table already checked)."""
    inside = 0
    for j in range(length):
        e = first + 4 * j
        pos = e + U32(buf, e)[0]
        vt = pos - I32(buf, pos)[0]
        vsize = U16(buf, vt)[0]
        within = inside > 0
        if within:
            inside -= 1
        off = U16(buf, vt + _PART_SPAN)[0] if vsize >= _PART_SPAN + 2 else 0
        span = _SPAN_AT(buf, pos + off)[0] if off else 0
        if not span:
            continue
        off = U16(buf, vt + _PART_KIND)[0] if vsize >= _PART_KIND + 2 else 0
        kind = _KIND_AT(buf, pos + off)[0] if off else 0
        if kind != _DOCUMENT:
            check = f"span {span} on a part of kind {kind}: only a Document spans parts"
        elif within:
            check = f"span {span} on a document inside another document's span"
        elif span < 0 or span > length - 1 - j:
            check = f"span {span} past the {length - 1 - j} parts after it"
        else:
            inside = span
            continue
        fail = MalformedBuffer(check, pos + off)
        fail.path += [".span", f"[{j}]"]
        raise fail


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


def _expands(w: _Walk) -> str:
    return f"expands to more than {w.max_bytes} bytes of strings and vectors (max_bytes)"


def _table_at(w: _Walk, pos: int, layout: _Layout, depth: int) -> None:
    """Check the table at ``pos`` and everything it references."""
    buf = w.buf
    n = w.n
    if depth > w.max_depth:
        raise MalformedBuffer("tables nested too deep (max_depth)", pos)
    # The table's own checks, inline: a call per table costs the walk ~2%.
    if pos & 3:
        raise MalformedBuffer("table not 4-byte aligned", pos)
    if pos + 4 > n:
        raise MalformedBuffer("table soffset past buffer end", pos)
    vt = pos - I32(buf, pos)[0]
    if vt < 0 or vt + 4 > n:
        raise MalformedBuffer("vtable outside buffer", vt)
    if vt & 1:
        raise MalformedBuffer("vtable not 2-byte aligned", vt)
    vsize, tsize = VT_HEAD(buf, vt)
    if vsize < 4 or vsize & 1:
        raise MalformedBuffer(f"vtable size {vsize} odd or < 4", vt)
    if vt + vsize > n:
        raise MalformedBuffer("vtable past buffer end", vt)
    if tsize < 4 or pos + tsize > n:
        raise MalformedBuffer(f"table inline size {tsize} < 4 or past buffer end", pos)
    slots = layout.slots
    present = min((vsize - 4) >> 1, len(slots))
    offsets = layout.readers[present](buf, vt + 4)
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
            if off < 4 or off + (4 if kind == _SCALAR_VECTOR else size) > tsize:
                raise MalformedBuffer(
                    f"field offset {off} outside table inline size {tsize}", vt + 4 + 2 * i
                )
            at = pos + off
            if kind == _SCALAR:
                if at & (size - 1):
                    raise MalformedBuffer(f"{size}-byte scalar not aligned", at)
            elif kind == _STRING:
                w.objects -= 1
                text += string_at(buf, n, at)
            elif kind in _UOFFSET_VECTORS:
                first, length = vector_at(buf, n, at)
                w.objects -= length + 1
                if w.objects < 0:
                    raise MalformedBuffer("too many objects (max_objects)", first - 4)
                text += 4 * length
                for j in range(length):
                    e = first + 4 * j
                    try:
                        if nested is None:  # a string vector
                            text += string_at(buf, n, e)
                        else:
                            _table_at(w, e + U32(buf, e)[0], nested, depth + 1)
                    except MalformedBuffer as fail:
                        fail.path.append(f"[{j}]")
                        raise
                if nested is not None and nested.name == _PART_NAME:
                    _spans(buf, first, length)
            elif kind == _SCALAR_VECTOR:
                # ``size`` is the element's; the field itself is a uoffset.
                _, length = scalars_at(buf, n, at, size)
                w.objects -= 1
                text += size * length
            else:  # _TABLE: no request field of this kind yet (chunks have them)
                assert nested is not None
                w.objects -= 1
                _table_at(w, ref_at(buf, at), nested, depth + 1)
    except MalformedBuffer as fail:
        fail.path.append(f".{name}")
        raise
    if w.objects < 0:
        raise MalformedBuffer("too many objects (max_objects)", pos)
    if text:
        w.room -= text
        if w.room < 0:
            raise MalformedBuffer(_expands(w), pos)


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
    if n < HEADER:
        raise MalformedBuffer(f"root offset and file identifier: buffer of {n} bytes", 0)
    found = data[IDENTIFIER_AT:HEADER]
    if found != identifier:
        raise MalformedBuffer(
            f"file identifier: expected {identifier!r}, found {bytes(found)!r}", IDENTIFIER_AT
        )
    root = U32(data, 0)[0]
    walk = _Walk(data, max_objects - 1, depth, max_bytes)
    try:
        if root < HEADER:
            raise MalformedBuffer("root offset points into the header", 0)
        _table_at(walk, root, root_layout, 1)
    except MalformedBuffer as fail:
        path = root_layout.name + "".join(reversed(fail.path))
        raise MalformedBuffer(f"{path}: {fail.check}", fail.offset) from None
