"""The wire format's tables, laid out once: every field's slot, kind and size,
and where the hand-written writers put it inside its table.

A FlatBuffers table's vtable holds one 16-bit offset per field, in schema
order: field ``slot`` lives at vtable byte ``VTABLE_HEAD + 2 * slot``. Each
``Table`` here lists its fields in slot order with their kind and their
inline value's ``struct`` code (a scalar's type; ``"I"`` for the uoffset of a
string, table or vector), so that:

- the verifiers (``wire.request.verify``, ``wire.embeddings.verify``) walk
  every table from these descriptions;
- the readers (route, decode, estimate, the chunk reader, ``chunk_is_final``,
  the embeddings readers) take their slots and scalar widths from them;
- the writers (the request writer, the chunk writer, the embeddings writers)
  take the inline layout of each table from ``Table.inline``: the soffset
  first, then the fields by size, largest first, in slot order within a
  size, the table padded to 4 bytes. A table with an 8-byte field must
  start at 4 mod 8 for it to be aligned. One exception: the request
  writer's ``Message`` of a role and text alone has a narrower table of its
  own (role and content only), so that fields appended to ``Message`` cost
  the common message nothing.

``tests/schema/test_layouts.py`` checks every table against the schema and
the generated code (slots, kinds, scalar types, nested tables), so a renamed,
reordered, retyped or appended field fails a test, never the wire. This is
the one module that says where a field lives. No I/O.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "COMPLETION_CHUNK",
    "COMPLETION_REQUEST",
    "CONTENT_PART",
    "EMBEDDING_REQUEST",
    "EMBEDDING_RESPONSE",
    "ERROR",
    "HEADER",
    "IDENTIFIER_AT",
    "KEY_VALUE",
    "MESSAGE",
    "REASONING_PART",
    "TABLES",
    "TOKEN_IDS",
    "TOOL",
    "TOOL_CALL",
    "TOOL_CALL_DELTA",
    "USAGE",
    "VTABLE_HEAD",
    "Field",
    "FieldKind",
    "Table",
]

# A finished buffer opens with the root table's uoffset, then the 4-byte file
# identifier: HEADER bytes before anything else.
IDENTIFIER_AT = 4
HEADER = 8
# A vtable opens with its own size and its table's inline size (2 bytes each);
# the field entries follow.
VTABLE_HEAD = 4


class FieldKind(enum.IntEnum):
    """What a slot holds, as far as reading and verifying care."""

    SCALAR = 0
    STRING = 1
    TABLE = 2
    STRING_VECTOR = 3
    TABLE_VECTOR = 4
    # A vector of scalars (``[ubyte]``, ``[float]``): ``Field.element`` is
    # their ``struct`` code.
    SCALAR_VECTOR = 5


@dataclass(frozen=True, slots=True)
class Field:
    """One field: ``fmt`` is the ``struct`` code of its inline value (the
    scalar's type, ``"I"`` for a uoffset); ``table`` names the table a TABLE
    or TABLE_VECTOR field points at; ``element`` is a SCALAR_VECTOR's
    element code."""

    name: str
    kind: FieldKind
    fmt: str = "I"
    table: str | None = None
    element: str = ""

    @property
    def size(self) -> int:
        """Its inline value's size in bytes."""
        return struct.calcsize("<" + self.fmt)


@dataclass(frozen=True, slots=True)
class Table:
    """A table's fields in slot order, and its writers' inline layout."""

    name: str
    specs: tuple[Field, ...]
    # Field names in slot order.
    fields: tuple[str, ...] = field(init=False)
    # Field -> its offset inside the table as the writers lay it out.
    inline: Mapping[str, int] = field(init=False, repr=False, compare=False)
    # The fields in that inline order (the order a packer takes them in).
    inline_order: tuple[str, ...] = field(init=False, repr=False, compare=False)
    # The table's ``struct`` format: the soffset, the fields in inline order,
    # the padding to 4 bytes.
    inline_format: str = field(init=False, repr=False, compare=False)
    _slots: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = tuple(f.name for f in self.specs)
        order = sorted(range(len(self.specs)), key=lambda i: (-self.specs[i].size, i))
        inline: dict[str, int] = {}
        at = 4
        for i in order:
            inline[names[i]] = at
            at += self.specs[i].size
        fmt = "<i" + "".join(self.specs[i].fmt for i in order) + "x" * (-at % 4)
        set_ = object.__setattr__
        set_(self, "fields", names)
        set_(self, "inline", inline)
        set_(self, "inline_order", tuple(names[i] for i in order))
        set_(self, "inline_format", fmt)
        set_(self, "_slots", {n: i for i, n in enumerate(names)})

    def slot(self, name: str) -> int:
        """The field's slot (``KeyError`` for a field this table has not)."""
        return self._slots[name]

    def voffset(self, name: str) -> int:
        """Where the field's entry sits in the table's vtable, in bytes."""
        return VTABLE_HEAD + 2 * self._slots[name]

    def spec(self, name: str) -> Field:
        """The field itself."""
        return self.specs[self._slots[name]]

    @property
    def inline_size(self) -> int:
        """The table's inline size as the writers lay it out."""
        return struct.calcsize(self.inline_format)

    def packer(self, order: str) -> struct.Struct:
        """The ``struct`` that packs this table's inline layout, for a writer
        that passes the values in ``order`` (field names, space-separated):
        ``ValueError`` at import unless that is the layout's order."""
        if list(self.inline_order) != order.split():
            raise ValueError(
                f"{self.name}: a writer packs {order!r}; the layout: {self.inline_order}"
            )
        return struct.Struct(self.inline_format)


def _scalar(name: str, fmt: str) -> Field:
    return Field(name, FieldKind.SCALAR, fmt)


def _string(name: str) -> Field:
    return Field(name, FieldKind.STRING)


def _tables(name: str, table: str) -> Field:
    return Field(name, FieldKind.TABLE_VECTOR, table=table)


def _table(name: str, table: str) -> Field:
    return Field(name, FieldKind.TABLE, table=table)


def _scalars(name: str, element: str) -> Field:
    return Field(name, FieldKind.SCALAR_VECTOR, element=element)


# Scalar codes: byte (and the byte enums) "b", bool "?", int32 "i",
# uint32 "I", float32 "f", int64 "q"; ubyte "B".
REASONING_PART = Table(
    "ReasoningPart",
    (
        _string("text"),
        _scalars("opaque", "B"),
        _scalar("dialect", "b"),
        _string("id"),
        _scalar("redacted", "?"),
    ),
)
CONTENT_PART = Table(
    "ContentPart",
    (
        _scalar("kind", "b"),
        _string("text"),
        _scalars("data", "B"),
        _string("media_type"),
        _string("url"),
        _string("file_id"),
        _scalar("dialect", "b"),
        _string("detail"),
        _string("filename"),
        _string("title"),
        _string("context"),
        _scalar("citations", "?"),
        _scalar("span", "i"),
        _string("extras"),
    ),
)
TOOL_CALL = Table("ToolCall", (_string("id"), _string("name"), _string("arguments")))
MESSAGE = Table(
    "Message",
    (
        _scalar("role", "b"),
        _string("content"),
        _string("name"),
        _tables("tool_calls", "ToolCall"),
        _string("tool_call_id"),
        _scalar("is_error", "?"),
        _tables("reasoning", "ReasoningPart"),
        _tables("parts", "ContentPart"),
    ),
)
TOOL = Table(
    "Tool",
    (_string("name"), _string("description"), _string("parameters"), _scalar("strict", "?")),
)
KEY_VALUE = Table("KeyValue", (_string("key"), _string("value")))
COMPLETION_REQUEST = Table(
    "CompletionRequest",
    (
        _string("request_id"),
        _scalar("provider", "b"),
        _string("model_name"),
        _scalar("max_tokens", "i"),
        _scalar("temperature", "f"),
        _tables("tools", "Tool"),
        _tables("messages", "Message"),
        _scalar("tool_choice", "b"),
        _string("tool_choice_name"),
        _scalar("top_p", "f"),
        Field("stop", FieldKind.STRING_VECTOR),
        _scalar("seed", "q"),
        _scalar("presence_penalty", "f"),
        _scalar("frequency_penalty", "f"),
        _scalar("n", "i"),
        _scalar("stream", "?"),
        _string("user"),
        _string("tenant"),
        _tables("metadata", "KeyValue"),
        _scalar("include_usage", "?"),
        _scalar("parallel_tool_calls", "?"),
        _string("response_format"),
        _scalar("top_k", "i"),
        _string("extras"),
        _scalar("extras_dialect", "b"),
    ),
)
TOOL_CALL_DELTA = Table(
    "ToolCallDelta",
    (_scalar("index", "i"), _string("id"), _string("name"), _string("arguments")),
)
USAGE = Table(
    "Usage",
    (
        _scalar("prompt_tokens", "i"),
        _scalar("completion_tokens", "i"),
        _scalar("cached_tokens", "i"),
        _scalar("reasoning_tokens", "i"),
        _scalar("cache_write_tokens", "i"),
    ),
)
ERROR = Table("Error", (_string("code"), _string("message")))
COMPLETION_CHUNK = Table(
    "CompletionChunk",
    (
        _string("request_id"),
        _string("content"),
        _tables("tool_calls", "ToolCallDelta"),
        _scalar("finish_reason", "b"),
        _table("usage", "Usage"),
        _table("error", "Error"),
        _scalar("index", "i"),
        _string("model"),
        _string("reasoning"),
        _string("stop_sequence"),
        _table("reasoning_part", "ReasoningPart"),
        _string("extras"),
        _scalar("extras_dialect", "b"),
    ),
)
# schema/embeddings.fbs. EmbeddingRequest's slots 0 to 2 are
# CompletionRequest's (read_route reads both kinds at the same slots).
TOKEN_IDS = Table("TokenIds", (_scalars("ids", "i"),))
EMBEDDING_REQUEST = Table(
    "EmbeddingRequest",
    (
        _string("request_id"),
        _scalar("provider", "b"),
        _string("model_name"),
        Field("texts", FieldKind.STRING_VECTOR),
        _tables("tokens", "TokenIds"),
        _scalar("dimensions", "i"),
        _string("user"),
        _string("tenant"),
        _string("extras"),
        _scalar("extras_dialect", "b"),
    ),
)
EMBEDDING_RESPONSE = Table(
    "EmbeddingResponse",
    (
        _string("request_id"),
        _string("model"),
        _scalar("count", "I"),
        _scalar("dimensions", "I"),
        _scalars("values", "f"),
        _scalar("prompt_tokens", "i"),
        _scalar("total_tokens", "i"),
    ),
)

TABLES: Mapping[str, Table] = {
    t.name: t
    for t in (
        REASONING_PART,
        CONTENT_PART,
        TOOL_CALL,
        MESSAGE,
        TOOL,
        KEY_VALUE,
        COMPLETION_REQUEST,
        TOOL_CALL_DELTA,
        USAGE,
        ERROR,
        COMPLETION_CHUNK,
        TOKEN_IDS,
        EMBEDDING_REQUEST,
        EMBEDDING_RESPONSE,
    )
}
