"""``verify_request``: the field table against the schema, and each check."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path

import flatbuffers
import pytest

from flatgate.generated.LLMGateway import CompletionRequest as fb_request
from flatgate.generated.LLMGateway import Message as fb_message
from flatgate.generated.LLMGateway.CompletionChunk import CompletionChunk, CompletionChunkT
from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequest, CompletionRequestT
from flatgate.generated.LLMGateway.Message import MessageT
from flatgate.generated.LLMGateway.ToolCall import ToolCallT
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.frames import ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.route import read_route
from flatgate.proxy.wire.schema import CHUNK_IDENTIFIER, REQUEST_IDENTIFIER, FinishReason
from flatgate.proxy.wire.stock import build_chunk, decode_chunk
from flatgate.proxy.wire.verify import (
    LAYOUTS,
    MAX_DEPTH,
    FieldKind,
    FieldSpec,
    MalformedBuffer,
    _compile,
    _verify_root,
    verify_request,
)
from tests.proxy.wire_helpers import build, field_position, full_decode, sample_request
from tests.schema.fbs_parse import Schema, parse, parse_file

SCHEMA = Path(__file__).resolve().parents[2] / "schema" / "gateway.fbs"

_SCALAR_SIZES = {
    "bool": 1,
    "byte": 1,
    "ubyte": 1,
    "int8": 1,
    "uint8": 1,
    "short": 2,
    "ushort": 2,
    "int16": 2,
    "uint16": 2,
    "int": 4,
    "uint": 4,
    "int32": 4,
    "uint32": 4,
    "float": 4,
    "float32": 4,
    "long": 8,
    "ulong": 8,
    "int64": 8,
    "uint64": 8,
    "double": 8,
    "float64": 8,
}


def expected_spec(schema: Schema, name: str, ftype: str) -> FieldSpec:
    """What the verifier's table must say for a schema field of type ``ftype``."""
    if ftype == "string":
        return FieldSpec(name, FieldKind.STRING)
    if ftype == "[string]":
        return FieldSpec(name, FieldKind.STRING_VECTOR)
    if ftype.startswith("["):
        inner = ftype[1:-1]
        if inner not in schema.tables:
            raise AssertionError(f"{name}: vectors of {inner} are not supported by the verifier")
        return FieldSpec(name, FieldKind.TABLE_VECTOR, table=inner)
    if ftype in schema.tables:
        return FieldSpec(name, FieldKind.TABLE, table=ftype)
    if ftype in schema.enums:
        return FieldSpec(name, FieldKind.SCALAR, _SCALAR_SIZES[schema.enums[ftype][0]])
    if ftype in _SCALAR_SIZES:
        return FieldSpec(name, FieldKind.SCALAR, _SCALAR_SIZES[ftype])
    raise AssertionError(f"{name}: type {ftype} unknown to the verifier (union? struct?)")


def layout_errors(
    schema: Schema, layouts: Mapping[str, tuple[FieldSpec, ...]], root: str = "CompletionRequest"
) -> list[str]:
    """Every difference between a verifier field table and the tables ``root`` reaches."""
    errors: list[str] = []
    todo, seen = [root], set()
    while todo:
        table = todo.pop()
        if table in seen:
            continue
        seen.add(table)
        want = [expected_spec(schema, f.name, f.type) for f in schema.tables[table]]
        have = list(layouts.get(table, ()))
        if want != have:
            errors.append(f"{table}: schema says {want}, verifier has {have}")
        todo.extend(spec.table for spec in want if spec.table is not None)
    extra = set(layouts) - seen
    if extra:
        errors.append(f"verifier knows tables the request does not reach: {sorted(extra)}")
    return errors


def test_field_table_matches_the_schema() -> None:
    assert layout_errors(parse_file(SCHEMA), LAYOUTS) == []


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (("  top_k: int32;\n}", "  top_k: int32;\n  x: string;\n}"), "Compl"),
        (("  strict: bool;", "  strict: bool;\n  extra: [Message];"), "Tool"),
        (("  tool_call_id: string;", "  tool_call_id: int64;"), "Message"),
        (("  value: string;", "  value: [string];"), "KeyValue"),
    ],
)
def test_the_field_table_check_catches_schema_changes(
    edit: tuple[str, str], complaint: str
) -> None:
    text = SCHEMA.read_text()
    assert edit[0] in text
    errors = layout_errors(parse(text.replace(edit[0], edit[1], 1)), LAYOUTS)
    assert errors
    assert errors[0].startswith(complaint)


def test_accepts_built_requests() -> None:
    for t in (sample_request(), CompletionRequestT(), CompletionRequestT(modelName="m")):
        for force in (False, True):
            buf = build(t, force_defaults=force)
            verify_request(buf)
            verify_request(memoryview(buf))
            full_decode(buf)


def test_accepts_unknown_enum_values_and_invalid_utf8() -> None:
    t = sample_request()
    t.messages[0].role = 99
    t.toolChoice = -7
    t.messages[1].content = b"\xff\xfe not utf-8"
    buf = build(t)
    verify_request(buf)
    decoded = full_decode(buf)
    assert decoded.messages[0].role == 99
    assert decoded.messages[1].content == b"\xff\xfe not utf-8"


def test_accepts_an_older_writers_short_vtable() -> None:
    b = flatbuffers.Builder(64)
    model = b.CreateString("old")
    b.StartObject(3)
    fb_request.AddModelName(b, model)
    b.Finish(b.EndObject(), REQUEST_IDENTIFIER)
    buf = bytes(b.Output())
    verify_request(buf)
    assert full_decode(buf).stream is False


def message_content_position(buf: bytes, index: int) -> int:
    msg = CompletionRequest.GetRootAs(buf, 0).Messages(index)
    return field_position(msg, 6)


def corrupt(buf: bytes, fmt: str, at: int, value: int) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def test_string_terminator_and_path_in_message() -> None:
    buf = build(sample_request())
    at = message_content_position(buf, 1)
    s = at + struct.unpack_from("<I", buf, at)[0]
    length = struct.unpack_from("<I", buf, s)[0]
    bad = corrupt(buf, "<B", s + 4 + length, 0x41)
    with pytest.raises(
        MalformedBuffer,
        match=rf"^CompletionRequest\.messages\[1\]\.content: string terminator is not NUL "
        rf"at offset {s + 4 + length}$",
    ):
        verify_request(bad)
    # read_route never looks at messages: routing still works.
    assert read_route(bad)[1].tobytes() == b"gpt-4o-mini"


def test_string_length_past_end() -> None:
    buf = build(sample_request())
    at = message_content_position(buf, 0)
    s = at + struct.unpack_from("<I", buf, at)[0]
    with pytest.raises(MalformedBuffer, match=r"messages\[0\]\.content: string bytes"):
        verify_request(corrupt(buf, "<I", s, 0xFFFFFFF0))


def test_unaligned_string_offset() -> None:
    buf = build(sample_request())
    at = message_content_position(buf, 0)
    with pytest.raises(MalformedBuffer, match="string not 4-byte aligned"):
        verify_request(corrupt(buf, "<I", at, struct.unpack_from("<I", buf, at)[0] + 1))


@pytest.mark.parametrize("length", [0x40000000, 0xFFFFFFFF, 10_000])
def test_vector_length_past_end(length: int) -> None:
    buf = build(sample_request())
    root = CompletionRequest.GetRootAs(buf, 0)
    at = field_position(root, 16)  # messages
    v = at + struct.unpack_from("<I", buf, at)[0]
    with pytest.raises(MalformedBuffer, match=r"^CompletionRequest\.messages: vector of"):
        verify_request(corrupt(buf, "<I", v, length))


def test_nested_table_vtable_checks() -> None:
    buf = build(sample_request())
    msg = CompletionRequest.GetRootAs(buf, 0).Messages(2)
    pos = msg._tab.Pos
    vt = pos - struct.unpack_from("<i", buf, pos)[0]
    with pytest.raises(MalformedBuffer, match=r"messages\[2\]: vtable size 5 odd or < 4"):
        verify_request(corrupt(buf, "<H", vt, 5))
    with pytest.raises(MalformedBuffer, match=r"messages\[2\]: table inline size 60000"):
        verify_request(corrupt(buf, "<H", vt + 2, 60000))
    with pytest.raises(MalformedBuffer, match=r"messages\[2\]: vtable outside buffer"):
        verify_request(corrupt(buf, "<i", pos, -len(buf)))
    with pytest.raises(MalformedBuffer, match=r"messages\[2\]: vtable not 2-byte aligned"):
        verify_request(corrupt(buf, "<i", pos, pos - vt + 1))


def test_field_offset_must_fit_the_inline_table() -> None:
    buf = build(sample_request())
    msg = CompletionRequest.GetRootAs(buf, 0).Messages(2)
    pos = msg._tab.Pos
    vt = pos - struct.unpack_from("<i", buf, pos)[0]
    tsize = struct.unpack_from("<H", buf, vt + 2)[0]
    with pytest.raises(MalformedBuffer, match=r"messages\[2\]\.tool_calls: field offset"):
        verify_request(corrupt(buf, "<H", vt + 4 + 2 * 3, tsize - 2))
    with pytest.raises(MalformedBuffer, match=r"messages\[2\]\.role: field offset 2 outside"):
        verify_request(corrupt(buf, "<H", vt + 4, 2))  # overlapping the soffset


def test_scalar_alignment() -> None:
    buf = build(sample_request(), force_defaults=True)
    root = CompletionRequest.GetRootAs(buf, 0)
    vt = root._tab.Pos - struct.unpack_from("<i", buf, root._tab.Pos)[0]
    seed_off = struct.unpack_from("<H", buf, vt + 4 + 2 * 11)[0]
    with pytest.raises(MalformedBuffer, match=r"\.seed: 8-byte scalar not aligned"):
        verify_request(corrupt(buf, "<H", vt + 4 + 2 * 11, seed_off - 4))


def count_objects(obj: object) -> int:
    """Tables, vectors and strings reachable from an object-API value."""
    if obj is None or isinstance(obj, (int, float)):
        return 0
    if isinstance(obj, (str, bytes)):
        return 1
    if isinstance(obj, list):
        return 1 + sum(count_objects(item) for item in obj)
    return 1 + sum(count_objects(value) for value in vars(obj).values())


def test_object_limit_counts_tables_vectors_and_strings() -> None:
    buf = build(sample_request())
    objects = count_objects(full_decode(buf))
    assert objects > 30
    verify_request(buf, max_objects=objects)
    with pytest.raises(MalformedBuffer, match=r"too many objects \(max_objects\)"):
        verify_request(buf, max_objects=objects - 1)


def test_depth_limit() -> None:
    t = CompletionRequestT(
        modelName="m",
        messages=[MessageT(toolCalls=[ToolCallT(id="c")])],
    )
    buf = build(t)
    verify_request(buf, max_depth=3)
    assert MAX_DEPTH >= 3
    with pytest.raises(MalformedBuffer, match=r"messages\[0\]\.tool_calls\[0\]: tables nested"):
        verify_request(buf, max_depth=2)


def shared_message_request(count: int) -> bytes:
    """``count`` messages entries all pointing at one table (legal sharing)."""
    b = flatbuffers.Builder(1024)
    content = b.CreateString("shared")
    fb_message.Start(b)
    fb_message.AddContent(b, content)
    msg = b.EndObject()
    fb_request.StartMessagesVector(b, count)
    for _ in range(count):
        b.PrependUOffsetTRelative(msg)
    messages = b.EndVector()
    model = b.CreateString("m")
    fb_request.Start(b)
    fb_request.AddModelName(b, model)
    fb_request.AddMessages(b, messages)
    b.Finish(fb_request.End(b), REQUEST_IDENTIFIER)
    return bytes(b.Output())


def test_shared_tables_are_counted_each_time() -> None:
    buf = shared_message_request(100)
    verify_request(buf)
    assert len(full_decode(buf).messages) == 100
    with pytest.raises(MalformedBuffer, match="max_objects"):
        verify_request(buf, max_objects=150)
    huge = shared_message_request(200_000)  # 800 KB of pointers to one table
    with pytest.raises(MalformedBuffer, match="max_objects"):
        verify_request(huge)


def test_root_checks() -> None:
    buf = build(sample_request())
    with pytest.raises(MalformedBuffer, match="root offset points into the header"):
        verify_request(corrupt(buf, "<I", 0, 4))
    with pytest.raises(MalformedBuffer, match=r"^CompletionRequest: table not 4-byte aligned"):
        verify_request(corrupt(buf, "<I", 0, 10))
    with pytest.raises(MalformedBuffer, match="soffset past buffer end"):
        verify_request(corrupt(buf, "<I", 0, len(buf)))
    with pytest.raises(MalformedBuffer, match="buffer of 3 bytes"):
        verify_request(buf[:3])


# The response side has the one field kind the request lacks (a single nested
# table: usage, error). The verifier core is schema-driven, so it checks chunk
# frames too when given their field table; that exercises the TABLE branch.
CHUNK_LAYOUTS: dict[str, tuple[FieldSpec, ...]] = {
    "CompletionChunk": (
        FieldSpec("request_id", FieldKind.STRING),
        FieldSpec("content", FieldKind.STRING),
        FieldSpec("tool_calls", FieldKind.TABLE_VECTOR, table="ToolCallDelta"),
        FieldSpec("finish_reason", FieldKind.SCALAR, 1),
        FieldSpec("usage", FieldKind.TABLE, table="Usage"),
        FieldSpec("error", FieldKind.TABLE, table="Error"),
        FieldSpec("index", FieldKind.SCALAR, 4),
        FieldSpec("model", FieldKind.STRING),
        FieldSpec("reasoning", FieldKind.STRING),
        FieldSpec("stop_sequence", FieldKind.STRING),
    ),
    "ToolCallDelta": (
        FieldSpec("index", FieldKind.SCALAR, 4),
        FieldSpec("id", FieldKind.STRING),
        FieldSpec("name", FieldKind.STRING),
        FieldSpec("arguments", FieldKind.STRING),
    ),
    "Usage": (
        FieldSpec("prompt_tokens", FieldKind.SCALAR, 4),
        FieldSpec("completion_tokens", FieldKind.SCALAR, 4),
        FieldSpec("cached_tokens", FieldKind.SCALAR, 4),
        FieldSpec("reasoning_tokens", FieldKind.SCALAR, 4),
    ),
    "Error": (FieldSpec("code", FieldKind.STRING), FieldSpec("message", FieldKind.STRING)),
}


def verify_chunk(buf: bytes, max_objects: int = 1000) -> None:
    root = _compile(CHUNK_LAYOUTS)["CompletionChunk"]
    _verify_root(buf, root, CHUNK_IDENTIFIER, max_objects, MAX_DEPTH)


def test_chunk_field_table_matches_the_schema() -> None:
    assert layout_errors(parse_file(SCHEMA), CHUNK_LAYOUTS, root="CompletionChunk") == []


def test_single_nested_tables() -> None:
    buf = build_chunk(
        BuilderPool(),
        content="hi",
        tool_calls=[ToolCallDelta(0, "c", "f", "{}")],
        finish_reason=FinishReason.ERROR,
        usage=Usage(3, 4),
        error=ChunkError("boom", "it broke"),
        size_prefixed=False,
    )
    verify_chunk(buf)
    assert decode_chunk(buf).usage == Usage(3, 4)
    chunk = CompletionChunk.GetRootAs(buf, 0)
    usage = chunk.Usage()._tab.Pos
    usage_vt = usage - struct.unpack_from("<i", buf, usage)[0]
    with pytest.raises(MalformedBuffer, match=r"^CompletionChunk\.usage: vtable size 3"):
        verify_chunk(corrupt(buf, "<H", usage_vt, 3))
    root = chunk._tab.Pos
    error_slot = root - struct.unpack_from("<i", buf, root)[0] + 4 + 2 * 5
    error_off = field_position(chunk, 14) - root
    with pytest.raises(MalformedBuffer, match=r"^CompletionChunk\.error: table uoffset not 4"):
        verify_chunk(corrupt(buf, "<H", error_slot, error_off + 1))
    # usage and error count as one object each, their strings too.
    objects = count_objects(CompletionChunkT.InitFromPackedBuf(buf, 0))
    assert objects == 11  # root, content, tool_calls + 1 delta + 3 strings, usage, error + 2
    verify_chunk(buf, max_objects=objects)
    with pytest.raises(MalformedBuffer, match="max_objects"):
        verify_chunk(buf, max_objects=objects - 1)
    with pytest.raises(MalformedBuffer, match="file identifier"):
        verify_request(buf)


def test_recursive_tables_are_refused_at_compile_time() -> None:
    loop = {"A": (FieldSpec("next", FieldKind.TABLE, table="A"),)}
    with pytest.raises(ValueError, match="recursive table A"):
        _compile(loop)
