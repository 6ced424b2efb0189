from __future__ import annotations

import contextlib
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.codecs.stock_chunk import build_chunk
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunk.frames import (
    ChunkError,
    MalformedFrame,
    ToolCallDelta,
    Usage,
    chunk_is_final,
    unprefix,
)
from flatgate.proxy.wire.chunk.reader import read_chunk, read_outcome
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.layout import COMPLETION_CHUNK
from flatgate.proxy.wire.schema import FinishReason

POOL = BuilderPool(debug=True)

_calls = st.lists(
    st.builds(
        ToolCallDelta,
        st.integers(0, 9),
        st.text(max_size=8),
        st.text(max_size=8),
        st.text(max_size=20),
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(
    request_id=st.text(max_size=40),
    content=st.text(max_size=60),
    tool_calls=_calls,
    finish=st.sampled_from(list(FinishReason)),
    usage=st.none() | st.builds(Usage, *[st.integers(0, 2**31 - 1)] * 4),
    error=st.none() | st.builds(ChunkError, st.text(max_size=10), st.text(max_size=30)),
    index=st.integers(0, 2**31 - 1),
    model=st.text(max_size=20),
    reasoning=st.text(max_size=20),
    stop_sequence=st.text(max_size=10),
)
def test_reads_what_decode_chunk_reads(  # noqa: PLR0917
    request_id, content, tool_calls, finish, usage, error, index, model, reasoning, stop_sequence
):
    """The stock builder and the hand-written writer give chunks that both readers
    (the generated accessors and the fast reader) read the same."""
    fields = {
        "request_id": request_id,
        "content": content,
        "tool_calls": tool_calls,
        "finish_reason": finish,
        "usage": usage,
        "error": error,
        "index": index,
        "model": model,
        "reasoning": reasoning,
        # The schema's rule: only a final chunk names a stop sequence.
        "stop_sequence": stop_sequence if finish else "",
    }
    frame = build_chunk(POOL, **fields)
    expected = decode_chunk(unprefix(frame))
    assert read_chunk(frame) == expected
    written = write_chunk(**fields)
    assert read_chunk(written) == expected
    assert decode_chunk(unprefix(written)) == expected
    unprefixed = build_chunk(POOL, content=content, model=model, size_prefixed=False)
    assert read_chunk(unprefixed, 0) == decode_chunk(unprefixed)
    # The log's reader: the same tokens and error code, nothing else.
    tokens = None if expected.usage is None else expected.usage.completion_tokens
    code = "" if expected.error is None else expected.error.code or "error"
    assert read_outcome(frame) == read_outcome(written) == (tokens, code)


def test_only_a_final_chunk_is_read_for_its_stop_sequence():
    """A token delta never looks (the per-token path reads one field less)."""
    final = write_chunk(finish_reason=FinishReason.STOP, stop_sequence="###")
    assert read_chunk(final).stop_sequence == "###"
    stray = write_chunk(content="x", stop_sequence="###")
    assert read_chunk(stray).stop_sequence == ""
    assert decode_chunk(unprefix(stray)).stop_sequence == "###"


def test_wrong_identifier_and_short_frames():
    frame = build_chunk(POOL, content="x")
    with pytest.raises(MalformedFrame, match="identifier"):
        read_chunk(frame[:4] + frame[4:8] + b"XXXX" + frame[12:])
    with pytest.raises(MalformedFrame):
        read_chunk(frame[:9])


def test_out_of_bounds_offsets_are_caught():
    frame = bytearray(build_chunk(POOL, request_id="r", content="hello", model="m"))
    root = 4 + struct.unpack_from("<I", frame, 4)[0]
    bad_root = bytearray(frame)
    struct.pack_into("<I", bad_root, 4, 10_000)
    with pytest.raises(MalformedFrame, match="root table"):
        read_chunk(bytes(bad_root))
    bad_vtable = bytearray(frame)
    struct.pack_into("<i", bad_vtable, root, -10_000)
    with pytest.raises(MalformedFrame, match="vtable"):
        read_chunk(bytes(bad_vtable))
    with pytest.raises(MalformedFrame):
        read_chunk(bytes(frame[: len(frame) // 2]))


def test_bad_utf8_is_malformed():
    frame = bytearray(build_chunk(POOL, content="héllo"))
    at = frame.find("é".encode())
    frame[at] = 0xFF
    with pytest.raises(MalformedFrame, match="UTF-8"):
        read_chunk(bytes(frame))


@pytest.mark.parametrize("value", [6, 99, -1])
def test_a_finish_reason_from_a_newer_writer_reads_as_stop(value):
    """A rolling upgrade: a newer proxy may send a finish reason this one does not
    know. It still ends the stream, as STOP, in both readers."""
    odd = bytearray(build_chunk(POOL, content="x", finish_reason=FinishReason.STOP))
    root = 4 + struct.unpack_from("<I", odd, 4)[0]
    vt = root - struct.unpack_from("<i", odd, root)[0]
    field = struct.unpack_from("<H", odd, vt + COMPLETION_CHUNK.voffset("finish_reason"))[0]
    assert odd[root + field] == FinishReason.STOP
    struct.pack_into("<b", odd, root + field, value)
    assert read_chunk(bytes(odd)).finish_reason is FinishReason.STOP
    assert decode_chunk(bytes(odd[4:])).finish_reason is FinishReason.STOP
    assert chunk_is_final(bytes(odd[4:]))


def test_random_corruption_raises_only_malformed_frame():
    rng = random.Random(20261129)
    base = build_chunk(
        POOL,
        request_id="chatcmpl-1",
        content="some words ",
        tool_calls=[ToolCallDelta(0, "c", "f", "{}")],
        finish_reason=FinishReason.TOOL_CALLS,
        usage=Usage(3, 4),
        error=ChunkError("e", "m"),
        model="m",
    )
    for _ in range(3000):
        frame = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            frame[rng.randrange(len(frame))] = rng.randrange(256)
        if rng.random() < 0.2:
            del frame[rng.randrange(len(frame)) :]
        with contextlib.suppress(MalformedFrame):
            read_chunk(bytes(frame))
        with contextlib.suppress(MalformedFrame):
            read_outcome(bytes(frame))


def test_reads_in_place_bounded_by_its_own_frame():
    a = build_chunk(POOL, request_id="a", content="first")
    b = build_chunk(POOL, request_id="b", content="second " * 20)
    data = a + b
    assert read_chunk(data, 4, len(a)) == decode_chunk(unprefix(a))
    assert read_chunk(data, len(a) + 4, len(data)) == decode_chunk(unprefix(b))
    # Point a's content at bytes that lie in b: in bounds of the buffer, not of the frame.
    bad = bytearray(data)
    root = 4 + struct.unpack_from("<I", bad, 4)[0]
    vt = root - struct.unpack_from("<i", bad, root)[0]
    field = root + struct.unpack_from("<H", bad, vt + 4 + 2 * 1)[0]
    struct.pack_into("<I", bad, field, len(a) + 8 - field)
    with pytest.raises(MalformedFrame, match="out of bounds"):
        read_chunk(bytes(bad), 4, len(a))
