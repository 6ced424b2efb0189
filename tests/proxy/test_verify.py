"""``verify_request``: each check, on requests and (through the same walk) on chunks.

The layout it walks is checked against the schema in ``tests/schema/test_layouts.py``.
"""

from __future__ import annotations

import struct

import flatbuffers
import pytest

from benchmarks.codecs.stock_chunk import build_chunk
from flatgate.generated.LLMGateway import CompletionRequest as fb_request
from flatgate.generated.LLMGateway import Message as fb_message
from flatgate.generated.LLMGateway.CompletionChunk import CompletionChunk, CompletionChunkT
from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequest, CompletionRequestT
from flatgate.generated.LLMGateway.Message import MessageT
from flatgate.generated.LLMGateway.ToolCall import ToolCallT
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunk.frames import ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.layout import TABLES, Field, FieldKind, Table
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import MAX_DEPTH, _compile, _verify_root, verify_request
from flatgate.proxy.wire.schema import CHUNK_IDENTIFIER, REQUEST_IDENTIFIER, FinishReason
from tests.proxy.wire_helpers import build, field_position, full_decode, sample_request


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
# table: usage, error). The verifier core walks whatever layout it is given,
# so it checks chunk frames too; that exercises the TABLE branch.
_CHUNK_ROOT = _compile(TABLES, "CompletionChunk")


def verify_chunk(buf: bytes, max_objects: int = 1000) -> None:
    _verify_root(buf, _CHUNK_ROOT, CHUNK_IDENTIFIER, max_objects, MAX_DEPTH)


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
    loop = {"A": Table("A", (Field("next", FieldKind.TABLE, table="A"),))}
    with pytest.raises(ValueError, match="recursive table A"):
        _compile(loop, "A")
