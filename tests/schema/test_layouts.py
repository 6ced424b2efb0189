"""``wire.layout``, the one description of every wire table, against the schema
and the generated code: the one check.

Every hand-written reader, the verifier and both writers take their slots,
kinds, scalar types and inline layouts from ``wire.layout``. These tests
derive each table's slots and scalar types from flatc's generated code (each
``Add<Field>`` function passes its slot to a ``Prepend<Type>Slot`` of the
builder) and its kinds and nested tables from ``schema/gateway.fbs`` and
``schema/embeddings.fbs`` (with what it includes), check
that every inline layout is sound, and that the writers write every field of
the schema: renaming, reordering, retyping or appending a field breaks a test
here, never the wire.
"""

from __future__ import annotations

import importlib
import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.openai.translate import write_request
from flatgate.edge_translator.responses.translate import write_request as write_responses
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.apis.openai_responses.request import decode_request as decode_responses
from flatgate.proxy.wire import layout
from flatgate.proxy.wire.chunk.frames import ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.embeddings import write_embedding_request, write_embedding_response
from flatgate.proxy.wire.layout import Field, FieldKind, Table
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import FinishReason
from tests.schema.fbs_parse import Schema, parse, parse_with_includes

SCHEMA = Path(__file__).resolve().parents[2] / "schema" / "gateway.fbs"
EMBEDDINGS = SCHEMA.parent / "embeddings.fbs"
ROOTS = ("CompletionRequest", "CompletionChunk", "EmbeddingRequest", "EmbeddingResponse")


def _schemas(text: str | None = None, embeddings: str | None = None) -> Schema:
    """Both schema files' tables and enums (``text``, ``embeddings``: edited
    versions of them)."""
    merged = parse_with_includes(EMBEDDINGS)
    if text is not None:
        edited = parse(text)
        merged.tables.update(edited.tables)
        merged.enums.update(edited.enums)
    if embeddings is not None:
        merged.tables.update(parse(embeddings).tables)
    return merged


_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from

# Schema scalar types -> struct codes.
_SCALAR_CODES = {
    "bool": "?",
    "byte": "b",
    "ubyte": "B",
    "int8": "b",
    "uint8": "B",
    "short": "h",
    "ushort": "H",
    "int16": "h",
    "uint16": "H",
    "int": "i",
    "uint": "I",
    "int32": "i",
    "uint32": "I",
    "float": "f",
    "float32": "f",
    "long": "q",
    "ulong": "Q",
    "int64": "q",
    "uint64": "Q",
    "double": "d",
    "float64": "d",
}
# The builder's Prepend<Type>Slot -> struct code (a uoffset: "I").
_PREPEND_CODES = {
    "Bool": "?",
    "Int8": "b",
    "Uint8": "B",
    "Int16": "h",
    "Uint16": "H",
    "Int32": "i",
    "Uint32": "I",
    "Int64": "q",
    "Uint64": "Q",
    "Float32": "f",
    "Float64": "d",
    "UOffsetTRelative": "I",
}


class _SlotRecorder:
    """Stands in for ``flatbuffers.Builder``: records what an ``Add*`` writes."""

    def __init__(self) -> None:
        self.slot: int | None = None
        self.code = ""

    def __getattr__(self, name: str) -> Any:
        def prepend(slot: int, *_: Any) -> None:
            self.slot = slot
            self.code = _PREPEND_CODES[name[len("Prepend") : -len("Slot")]]

        if name.startswith("Prepend") and name.endswith("Slot"):
            return prepend
        raise AttributeError(name)


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def generated_fields(table: str) -> dict[str, tuple[int, str]]:
    """Field name -> (slot, struct code), from the generated ``Add<Field>`` functions."""
    module = importlib.import_module(f"flatgate.generated.LLMGateway.{table}")
    out = {}
    for name, fn in vars(module).items():
        if name.startswith("Add") and callable(fn):
            rec = _SlotRecorder()
            fn(rec, 0)
            assert rec.slot is not None, name
            out[_snake(name[3:])] = (rec.slot, rec.code)
    return out


@pytest.mark.parametrize("table", sorted(layout.TABLES))
def test_slots_and_scalar_types_are_the_generated_ones(table: str) -> None:
    t = layout.TABLES[table]
    assert {f.name: (t.slot(f.name), f.fmt) for f in t.specs} == generated_fields(table)
    slots = sorted(slot for slot, _ in generated_fields(table).values())
    assert [t.voffset(f) for f in t.fields] == [layout.VTABLE_HEAD + 2 * s for s in slots]


def test_every_generated_table_is_laid_out() -> None:
    tables = {
        p.stem
        for p in Path(importlib.import_module("flatgate.generated.LLMGateway").__path__[0]).glob(
            "*.py"
        )
        if "def Start(" in p.read_text()
    }
    assert set(layout.TABLES) == tables


def expected_field(schema: Schema, name: str, ftype: str) -> Field:
    """What the layout must say for a schema field of type ``ftype``."""
    if ftype == "string":
        return Field(name, FieldKind.STRING)
    if ftype == "[string]":
        return Field(name, FieldKind.STRING_VECTOR)
    if ftype.startswith("[") and ftype[1:-1] in _SCALAR_CODES:
        return Field(name, FieldKind.SCALAR_VECTOR, element=_SCALAR_CODES[ftype[1:-1]])
    if ftype.startswith("["):
        inner = ftype[1:-1]
        if inner not in schema.tables:
            raise AssertionError(f"{name}: vectors of {inner} are not supported by the layout")
        return Field(name, FieldKind.TABLE_VECTOR, table=inner)
    if ftype in schema.tables:
        return Field(name, FieldKind.TABLE, table=ftype)
    if ftype in schema.enums:
        return Field(name, FieldKind.SCALAR, _SCALAR_CODES[schema.enums[ftype][0]])
    if ftype in _SCALAR_CODES:
        return Field(name, FieldKind.SCALAR, _SCALAR_CODES[ftype])
    raise AssertionError(f"{name}: type {ftype} unknown to the layout (union? struct?)")


def layout_errors(schema: Schema, tables: Mapping[str, Table], roots: tuple[str, ...]) -> list[str]:
    """Every difference between the layout and the tables the ``roots`` reach."""
    errors: list[str] = []
    todo, seen = list(roots), set()
    while todo:
        table = todo.pop()
        if table in seen:
            continue
        seen.add(table)
        want = [expected_field(schema, f.name, f.type) for f in schema.tables[table]]
        have = list(tables[table].specs) if table in tables else []
        if want != have:
            errors.append(f"{table}: schema says {want}, layout has {have}")
        todo.extend(spec.table for spec in want if spec.table is not None)
    extra = set(tables) - seen
    if extra:
        errors.append(f"layout knows tables the roots do not reach: {sorted(extra)}")
    return errors


def test_layout_matches_the_schema() -> None:
    assert layout_errors(_schemas(), layout.TABLES, ROOTS) == []


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (
            ("  extras_dialect: ApiDialect;\n}", "  extras_dialect: ApiDialect;\n  x: int;\n}"),
            "Compl",
        ),
        (("  opaque: [ubyte];", "  opaque: [float];"), "ReasoningPart"),
        (("  strict: bool;", "  strict: bool;\n  extra: [Message];"), "Tool"),
        (("  tool_call_id: string;", "  tool_call_id: int64;"), "Message"),
        (("  value: string;", "  value: [string];"), "KeyValue"),
        (("  index: int32;\n  id: string;", "  index: int64;\n  id: string;"), "ToolCallDelta"),
        (("  usage: Usage;", "  usage: [Usage];"), "CompletionChunk"),
    ],
)
def test_the_layout_check_catches_schema_changes(edit: tuple[str, str], complaint: str) -> None:
    text = SCHEMA.read_text()
    assert edit[0] in text
    errors = layout_errors(_schemas(text.replace(edit[0], edit[1], 1)), layout.TABLES, ROOTS)
    assert errors
    assert errors[0].startswith(complaint)


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (("  ids: [int32];", "  ids: [int64];"), "TokenIds"),
        (("  texts: [string];", "  texts: [TokenIds];"), "EmbeddingRequest"),
        (("  tenant: string;", "  tenant: string;\n  x: int;"), "EmbeddingRequest"),
        (("  count: uint32;", "  count: int32;"), "EmbeddingResponse"),
        (("  values: [float];", "  values: [ubyte];"), "EmbeddingResponse"),
    ],
)
def test_the_layout_check_catches_embeddings_changes(edit: tuple[str, str], complaint: str) -> None:
    text = EMBEDDINGS.read_text()
    assert edit[0] in text
    errors = layout_errors(
        _schemas(embeddings=text.replace(edit[0], edit[1], 1)), layout.TABLES, ROOTS
    )
    assert errors
    assert errors[0].startswith(complaint)


@pytest.mark.parametrize("table", sorted(layout.TABLES))
def test_inline_layouts_are_sound(table: str) -> None:
    """Every field inside the table, aligned to its size (the table at 4 mod 8
    when it has an 8-byte field), none overlapping; the packer's format says
    the same."""
    t = layout.TABLES[table]
    start = 4 if any(f.size == 8 for f in t.specs) else 0
    taken: set[int] = set(range(4))  # the soffset
    for f in t.specs:
        at = t.inline[f.name]
        assert (start + at) % f.size == 0, f.name
        span = set(range(at, at + f.size))
        assert not span & taken, f.name
        taken |= span
    assert max(taken) < t.inline_size
    assert t.inline_size % 4 == 0
    assert sorted(t.inline, key=t.inline.__getitem__) == list(t.inline_order)
    assert t.packer(" ".join(t.inline_order)).size == t.inline_size


def test_a_writer_packing_in_another_order_fails_at_import() -> None:
    with pytest.raises(ValueError, match="a writer packs"):
        layout.ERROR.packer("message code")


def test_an_appended_field_goes_where_its_size_says() -> None:
    t = Table("T", (Field("a", FieldKind.STRING), Field("b", FieldKind.SCALAR, "b")))
    grown = Table("T", (*t.specs, Field("c", FieldKind.SCALAR, "q")))
    assert dict(t.inline) == {"a": 4, "b": 8}
    assert dict(grown.inline) == {"c": 4, "a": 12, "b": 16}
    assert grown.inline_format == "<iqIbxxx"
    assert grown.voffset("c") == 8


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
        # Content parts: text, an image's bytes with its detail, an image by
        # URL, a file by id with its name.
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "t"},
                {
                    "type": "image_url",
                    "image_url": {
                        "url": "data:image/gif;base64,R0lGODlhAQABAAAAACw=",
                        "detail": "low",
                    },
                },
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}},
            ],
        },
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
                {"type": "tool_result", "tool_use_id": "c1", "content": "r", "is_error": True},
                # Content parts: text, an image's bytes (its breakpoint: the
                # part's extras), a document of blocks (title, context,
                # citations, span) holding an image by URL.
                {"type": "text", "text": "see"},
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/png",
                        "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB",
                    },
                    "cache_control": {"type": "ephemeral"},
                },
                {
                    "type": "document",
                    "source": {
                        "type": "content",
                        "content": [
                            {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}
                        ],
                    },
                    "title": "t",
                    "context": "c",
                    "citations": {"enabled": True},
                },
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


# A Responses request that writes what the other two cannot: reasoning parts
# (text, payload, id; an Anthropic redacted part comes back in flatgate's
# own encrypted_content form) and extras.
FULL_RESPONSES: dict[str, Any] = {
    "model": "m",
    "input": [
        {"role": "user", "content": "hi"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "thinking"}],
            "encrypted_content": "opaque-payload",
        },
        # Anthropic's redacted_thinking, as flatgate hands it to a Responses client.
        {"type": "reasoning", "summary": [], "encrypted_content": "fg1.2.r.ZGF0YQ=="},
        {"type": "message", "role": "assistant", "content": "hello"},
        # Content parts: text, an image's bytes with its detail, a file by id
        # with its name, a document by URL.
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "t"},
                {
                    "type": "input_image",
                    "image_url": "data:image/gif;base64,R0lGODlhAQABAAAAACw=",
                    "detail": "low",
                },
                {"type": "input_file", "file_id": "file-1", "filename": "a.pdf"},
                {"type": "input_file", "file_url": "https://example.com/a.pdf"},
            ],
        },
    ],
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "k",
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
        if mf.get(layout.MESSAGE.slot("reasoning")):
            for _, rf in _tables_of(buf, pos, mf[layout.MESSAGE.slot("reasoning")]):
                seen["ReasoningPart"] |= _present(layout.REASONING_PART, rf)
        if mf.get(layout.MESSAGE.slot("parts")):
            for _, pf in _tables_of(buf, pos, mf[layout.MESSAGE.slot("parts")]):
                seen["ContentPart"] |= _present(layout.CONTENT_PART, pf)
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
    responses = _written(
        write_responses(
            decode_responses(msgspec.json.encode(FULL_RESPONSES)),
            provider=1,
            model_name="m",
            tenant="t",
            request_id="r",
        )
    )
    tables = ("CompletionRequest", "Message", "ToolCall", "Tool", "KeyValue", "ReasoningPart")
    for name in (*tables, "ContentPart"):
        table = layout.TABLES[name]
        assert openai[name] | messages[name] | responses[name] == set(table.fields), name
    # Only the Responses API carries reasoning back (the next issue: Messages too).
    assert set(layout.MESSAGE.fields) - openai["Message"] == {"is_error", "reasoning"}
    # Chat's parts have no Anthropic document fields (title, context,
    # citations, span) and no extras: the Messages edge writes those.
    assert set(layout.CONTENT_PART.fields) - openai["ContentPart"] == {
        "title",
        "context",
        "citations",
        "span",
        "extras",
    }
    assert set(layout.MESSAGE.fields) - messages["Message"] == {"name", "reasoning"}


def test_write_chunk_writes_every_field_of_every_table() -> None:
    frame = write_chunk(
        request_id="r",
        content="c",
        tool_calls=(ToolCallDelta(0, "id", "name", "{}"),),
        finish_reason=FinishReason.ERROR,
        usage=Usage(1, 2, 3, 4, 5),
        error=ChunkError("code", "message"),
        index=1,
        model="m",
        reasoning="thought",
        stop_sequence="stop",
        reasoning_part=ReasoningPart("summary", b"payload", 3, "rs_1", True),
        extras='{"output_item": {}}',
        extras_dialect=3,
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
    _, pf = _table(buf, _deref(buf, root, fields[c.slot("reasoning_part")]))
    assert _present(layout.REASONING_PART, pf) == set(layout.REASONING_PART.fields)


def test_the_embeddings_writers_write_every_field_of_every_table() -> None:
    """Between a texts request and a tokens one, every request field; every
    response field."""
    full = {
        "request_id": "r",
        "provider": 1,
        "dimensions": 8,
        "user": "u",
        "tenant": "t",
        "extras": "{}",
        "extras_dialect": 1,
    }
    q = layout.EMBEDDING_REQUEST
    seen: set[str] = set()
    for inputs in ({"texts": ["a"]}, {"tokens": [[1, 2]]}):
        buf = write_embedding_request("m", **inputs, **full)  # type: ignore[arg-type]
        root, fields = _table(buf, _U32(buf, 0)[0])
        seen |= _present(q, fields)
        if "tokens" in inputs:
            [(_, tf)] = _tables_of(buf, root, fields[q.slot("tokens")])
            assert _present(layout.TOKEN_IDS, tf) == set(layout.TOKEN_IDS.fields)
    assert seen == set(q.fields)
    buf = write_embedding_response(
        model="m",
        count=1,
        dimensions=1,
        values=bytes(4),
        prompt_tokens=1,
        total_tokens=1,
        request_id="r",
    )
    _, fields = _table(buf, _U32(buf, 0)[0])
    assert _present(layout.EMBEDDING_RESPONSE, fields) == set(layout.EMBEDDING_RESPONSE.fields)
