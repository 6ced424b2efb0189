"""The vtable slot of every field of the wire tables, by name: the one place
the hand-written readers and writers take field positions from.

A FlatBuffers table's vtable holds one 16-bit offset per field, in schema
order: field ``slot`` lives at vtable byte ``4 + 2 * slot``. The route reader,
the verifier, the chunk reader and the schema-specific writers
(``write_request``, ``write_chunk``) lay out or follow offsets by hand for
speed; each takes its slots from here, and ``tests/schema/test_layouts.py``
derives every slot from the generated code, so a renamed, reordered or
appended field fails a test, never the wire. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "COMPLETION_CHUNK",
    "COMPLETION_REQUEST",
    "ERROR",
    "KEY_VALUE",
    "MESSAGE",
    "TABLES",
    "TOOL",
    "TOOL_CALL",
    "TOOL_CALL_DELTA",
    "USAGE",
    "Table",
]


@dataclass(frozen=True, slots=True)
class Table:
    """A table's fields in slot order."""

    name: str
    fields: tuple[str, ...]
    _slots: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_slots", {f: i for i, f in enumerate(self.fields)})

    def slot(self, name: str) -> int:
        """The field's slot (``KeyError`` for a field this table has not)."""
        return self._slots[name]

    def voffset(self, name: str) -> int:
        """Where the field's entry sits in the table's vtable, in bytes."""
        return 4 + 2 * self._slots[name]


TOOL_CALL = Table("ToolCall", ("id", "name", "arguments"))
MESSAGE = Table("Message", ("role", "content", "name", "tool_calls", "tool_call_id", "is_error"))
TOOL = Table("Tool", ("name", "description", "parameters", "strict"))
KEY_VALUE = Table("KeyValue", ("key", "value"))
COMPLETION_REQUEST = Table(
    "CompletionRequest",
    (
        "request_id",
        "provider",
        "model_name",
        "max_tokens",
        "temperature",
        "tools",
        "messages",
        "tool_choice",
        "tool_choice_name",
        "top_p",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "n",
        "stream",
        "user",
        "tenant",
        "metadata",
        "include_usage",
        "parallel_tool_calls",
        "response_format",
        "top_k",
    ),
)
TOOL_CALL_DELTA = Table("ToolCallDelta", ("index", "id", "name", "arguments"))
USAGE = Table("Usage", ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"))
ERROR = Table("Error", ("code", "message"))
COMPLETION_CHUNK = Table(
    "CompletionChunk",
    (
        "request_id",
        "content",
        "tool_calls",
        "finish_reason",
        "usage",
        "error",
        "index",
        "model",
        "reasoning",
        "stop_sequence",
    ),
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        TOOL_CALL,
        MESSAGE,
        TOOL,
        KEY_VALUE,
        COMPLETION_REQUEST,
        TOOL_CALL_DELTA,
        USAGE,
        ERROR,
        COMPLETION_CHUNK,
    )
}
