"""Every slot the hand-written readers and writers use, derived from the schema.

``wire.layout`` names each table's fields in slot order, and every hand-written
reader and writer (``read_route``, ``chunk_is_final``, ``read_chunk``,
``write_chunk``, ``write_request``, the verifier's ``LAYOUTS``) takes its slots
from there. These tests derive the slots from flatc's generated code (each
``Add<Field>`` function passes its slot to the builder), and check that the
writers write every field of the schema: renaming, reordering or appending a
field breaks a test here, never the wire.
"""

from __future__ import annotations

import importlib
import re
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flatgate.edge_translator.anthropic.models import decode_messages
from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.openai.models import decode_request
from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.wire import layout
from flatgate.proxy.wire.frames import ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.schema import FinishReason
from flatgate.proxy.wire.verify import LAYOUTS
from flatgate.proxy.wire.writer import write_chunk

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from


class _SlotRecorder:
    """Stands in for ``flatbuffers.Builder``: records the slot an ``Add*`` writes."""

    def __init__(self) -> None:
        self.slot: int | None = None

    def __getattr__(self, name: str) -> Any:
        def prepend(slot: int, *_: Any) -> None:
            self.slot = slot

        if name.startswith("Prepend") and name.endswith("Slot"):
            return prepend
        raise AttributeError(name)


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def generated_slots(table: str) -> dict[str, int]:
    """Field name -> slot, from the generated module's ``Add<Field>`` functions."""
    module = importlib.import_module(f"flatgate.generated.LLMGateway.{table}")
    out = {}
    for name, fn in vars(module).items():
        if name.startswith("Add") and callable(fn):
            rec = _SlotRecorder()
            fn(rec, 0)
            assert rec.slot is not None, name
            out[_snake(name[3:])] = rec.slot
    return out


@pytest.mark.parametrize("table", sorted(layout.TABLES))
def test_layout_slots_are_the_generated_ones(table: str) -> None:
    expected = generated_slots(table)
    t = layout.TABLES[table]
    assert {f: t.slot(f) for f in t.fields} == expected
    assert [t.voffset(f) for f in t.fields] == [4 + 2 * s for s in sorted(expected.values())]


def test_every_generated_table_is_laid_out() -> None:
    tables = {
        p.stem
        for p in Path(importlib.import_module("flatgate.generated.LLMGateway").__path__[0]).glob(
            "*.py"
        )
        if "def Start(" in p.read_text()
    }
    assert set(layout.TABLES) == tables
    assert set(LAYOUTS) | {"CompletionChunk", "ToolCallDelta", "Usage", "Error"} == set(
        layout.TABLES
    )


@pytest.mark.parametrize("table", sorted(LAYOUTS))
def test_the_verifier_walks_the_layout(table: str) -> None:
    assert tuple(spec.name for spec in LAYOUTS[table]) == layout.TABLES[table].fields


def _table(buf: bytes, pos: int) -> tuple[int, dict[int, int]]:
    """(table position, slot -> field offset) of the table at ``pos``."""
    vt = pos - _I32(buf, pos)[0]
    size = _U16(buf, vt)[0]
    return pos, {i: _U16(buf, vt + 4 + 2 * i)[0] for i in range((size - 4) // 2)}


def _present(t: layout.Table, fields: dict[int, int]) -> set[str]:
    return {name for name in t.fields if fields.get(t.slot(name))}


def _deref(buf: bytes, table: int, offset: int) -> int:
    at = table + offset
    return at + int(_U32(buf, at)[0])


def _tables_of(buf: bytes, table: int, offset: int) -> list[tuple[int, dict[int, int]]]:
    vec = _deref(buf, table, offset)
    return [
        _table(buf, vec + 4 + 4 * i + _U32(buf, vec + 4 + 4 * i)[0])
        for i in range(_U32(buf, vec)[0])
    ]


FULL_REQUEST = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "s", "name": "sys"},
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "content": "a",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {}, "strict": True},
        }
    ],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "temperature": 0.5,
    "top_p": 0.5,
    "top_k": 40,
    "max_tokens": 9,
    "stop": ["x"],
    "seed": 1,
    "presence_penalty": 0.1,
    "frequency_penalty": 0.1,
    "n": 2,
    "stream": True,
    "stream_options": {"include_usage": True},
    "user": "end-user",
    "metadata": {"k": "v"},
    "parallel_tool_calls": True,
    "response_format": {"type": "json_object"},
}


# The Messages edge's counterpart of FULL_REQUEST: what OpenAI's lacks (a tool
# result's is_error) and the rest again.
FULL_MESSAGES = {
    "model": "m",
    "max_tokens": 9,
    "system": "s",
    "messages": [
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "r", "is_error": True}
            ],
        },
    ],
    "tools": [{"name": "f", "description": "d", "input_schema": {}, "strict": True}],
    "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
    "temperature": 0.5,
    "top_p": 0.5,
    "top_k": 40,
    "stop_sequences": ["x"],
    "metadata": {"user_id": "end-user"},
    "stream": True,
}


def _written(buf: bytes) -> dict[str, set[str]]:
    """Every field present in the buffer, by table."""
    root, fields = _table(buf, _U32(buf, 0)[0])
    r = layout.COMPLETION_REQUEST
    seen: dict[str, set[str]] = {t: set() for t in layout.TABLES}
    seen[r.name] = _present(r, fields)
    for pos, mf in _tables_of(buf, root, fields[r.slot("messages")]):
        seen["Message"] |= _present(layout.MESSAGE, mf)
        if mf.get(layout.MESSAGE.slot("tool_calls")):
            for _, cf in _tables_of(buf, pos, mf[layout.MESSAGE.slot("tool_calls")]):
                seen["ToolCall"] |= _present(layout.TOOL_CALL, cf)
    for name, table in (("tools", layout.TOOL), ("metadata", layout.KEY_VALUE)):
        if fields.get(r.slot(name)):
            for _, tf in _tables_of(buf, root, fields[r.slot(name)]):
                seen[table.name] |= _present(table, tf)
    return seen


def test_the_edges_write_every_field_of_every_table() -> None:
    """Between them, the two client APIs' writers write every request field;
    only a tool result's ``is_error`` has no OpenAI form."""
    openai = _written(
        write_request(
            decode_request(msgspec.json.encode(FULL_REQUEST)),
            provider=1,
            model_name="m",
            tenant="t",
            request_id="r",
        )
    )
    messages = _written(
        write_messages(
            decode_messages(msgspec.json.encode(FULL_MESSAGES)),
            provider=1,
            model_name="m",
            tenant="t",
            request_id="r",
        )
    )
    for name in ("CompletionRequest", "Message", "ToolCall", "Tool", "KeyValue"):
        table = layout.TABLES[name]
        assert openai[name] | messages[name] == set(table.fields), name
    assert set(layout.MESSAGE.fields) - openai["Message"] == {"is_error"}
    assert set(layout.MESSAGE.fields) - messages["Message"] == {"name"}


def test_write_chunk_writes_every_field_of_every_table() -> None:
    frame = write_chunk(
        request_id="r",
        content="c",
        tool_calls=(ToolCallDelta(0, "id", "name", "{}"),),
        finish_reason=FinishReason.ERROR,
        usage=Usage(1, 2, 3, 4),
        error=ChunkError("code", "message"),
        index=1,
        model="m",
        reasoning="thought",
        stop_sequence="stop",
    )
    buf = frame[4:]
    root, fields = _table(buf, _U32(buf, 0)[0])
    c = layout.COMPLETION_CHUNK
    assert _present(c, fields) == set(c.fields)
    _, uf = _table(buf, _deref(buf, root, fields[c.slot("usage")]))
    assert _present(layout.USAGE, uf) == set(layout.USAGE.fields)
    _, ef = _table(buf, _deref(buf, root, fields[c.slot("error")]))
    assert _present(layout.ERROR, ef) == set(layout.ERROR.fields)
    [(_, tf)] = _tables_of(buf, root, fields[c.slot("tool_calls")])
    assert _present(layout.TOOL_CALL_DELTA, tf) == set(layout.TOOL_CALL_DELTA.fields)
