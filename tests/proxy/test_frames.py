"""Chunk frames: build/decode round trips and both stream framings."""

from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.codecs.stock_chunk import build_chunk
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunk.frames import (
    Chunk,
    ChunkError,
    FrameSplitter,
    MalformedFrame,
    SSESplitter,
    ToolCallDelta,
    Usage,
    chunk_is_final,
    sse_event,
    unprefix,
)
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.schema import FinishReason

POOL = BuilderPool(debug=True)


def test_full_chunk_round_trips() -> None:
    want = Chunk(
        request_id="r1",
        content="héllo ✓ ",
        tool_calls=(ToolCallDelta(0, "call_1", "get_weather", '{"city":'), ToolCallDelta(1)),
        finish_reason=FinishReason.TOOL_CALLS,
        usage=Usage(12, 3),
        error=ChunkError("backend_error", "boom"),
        index=2,
        model="m",
    )
    frame = build_chunk(
        POOL,
        request_id=want.request_id,
        content=want.content,
        tool_calls=want.tool_calls,
        finish_reason=want.finish_reason,
        usage=want.usage,
        error=want.error,
        index=want.index,
        model=want.model,
    )
    assert int.from_bytes(frame[:4], "little") == len(frame) - 4
    assert decode_chunk(unprefix(frame)) == want


def test_empty_chunk_and_unprefixed() -> None:
    buf = build_chunk(POOL, size_prefixed=False)
    assert decode_chunk(buf) == Chunk()


def test_frame_splitter_any_cut() -> None:
    frames = [build_chunk(POOL, content=f"w{i} " * i) for i in range(20)]
    stream = b"".join(frames)
    rng = random.Random(7)
    for _ in range(50):
        splitter = FrameSplitter()
        got: list[bytes] = []
        pos = 0
        while pos < len(stream):
            step = rng.randrange(1, 40)
            got += splitter.feed(stream[pos : pos + step])
            pos += step
        assert got == frames
        assert splitter.pending == 0


def test_frame_splitter_rejects_absurd_size() -> None:
    with pytest.raises(MalformedFrame):
        FrameSplitter().feed(b"\xff\xff\xff\xff")


def test_sse_round_trip() -> None:
    frames = [build_chunk(POOL, content=f"t{i}", size_prefixed=False) for i in range(5)]
    stream = b"".join(sse_event(f) for f in frames)
    splitter = SSESplitter()
    got = []
    for i in range(0, len(stream), 7):
        got += splitter.feed(stream[i : i + 7])
    assert got == frames


@pytest.mark.parametrize("bad", [b"", b"\x00" * 8, b"\x08\x00\x00\x00FGCK", b"\xff" * 64])
def test_decode_rejects_garbage(bad: bytes) -> None:
    with pytest.raises(MalformedFrame):
        decode_chunk(bad)


def test_decode_survives_mutations() -> None:
    good = build_chunk(
        POOL, request_id="r", content="hello", usage=Usage(1, 2), size_prefixed=False
    )
    rng = random.Random(1234)
    for _ in range(2000):
        bad = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        with contextlib.suppress(MalformedFrame):
            decode_chunk(bytes(bad))


_text = st.text(max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    request_id=_text,
    content=_text,
    finish=st.sampled_from(list(FinishReason)),
    usage=st.none() | st.builds(Usage, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)),
    error=st.none() | st.builds(ChunkError, _text, _text),
    index=st.integers(0, 2**31 - 1),
    model=_text,
    prefixed=st.booleans(),
)
def test_write_chunk_makes_the_chunk_build_chunk_makes(  # noqa: PLR0917
    request_id: str,
    content: str,
    finish: FinishReason,
    usage: Usage | None,
    error: ChunkError | None,
    index: int,
    model: str,
    prefixed: bool,
) -> None:
    fields = {
        "request_id": request_id,
        "content": content,
        "finish_reason": finish,
        "usage": usage,
        "error": error,
        "index": index,
        "model": model,
        "size_prefixed": prefixed,
    }
    fast, stock = write_chunk(**fields), build_chunk(POOL, **fields)  # type: ignore[arg-type]
    if prefixed:
        assert int.from_bytes(fast[:4], "little") == len(fast) - 4
        fast_buf, stock_buf = unprefix(fast), unprefix(stock)
    else:
        fast_buf, stock_buf = memoryview(fast), memoryview(stock)
    want = decode_chunk(stock_buf)
    assert decode_chunk(fast_buf) == want  # the generated accessors
    assert read_chunk(bytes(fast_buf), 0) == want  # the bounds-checked reader
    assert chunk_is_final(fast_buf) == chunk_is_final(stock_buf)
    assert len(fast_buf) % 4 == 0
