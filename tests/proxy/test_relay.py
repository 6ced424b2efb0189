"""Pure pieces of the relay: frame cutting, final-chunk detection, stub deltas."""

from __future__ import annotations

import random

import pytest

from benchmarks.codecs.stock_chunk import build_chunk
from flatgate.proxy.stub import deltas_of
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunk.frames import (
    ChunkError,
    FrameCutter,
    MalformedFrame,
    chunk_is_final,
    unprefix,
)
from flatgate.proxy.wire.schema import FinishReason

POOL = BuilderPool(debug=True)


def stream(n: int, final: bool = True) -> list[bytes]:
    frames = [build_chunk(POOL, request_id="r", content=f"w{i} " * (i + 1)) for i in range(n)]
    if final:
        frames.append(build_chunk(POOL, request_id="r", finish_reason=FinishReason.STOP))
    return frames


def test_whole_frames_pass_through_without_copy() -> None:
    data = b"".join(stream(3))
    cutter = FrameCutter()
    assert cutter.feed(data) is data
    assert cutter.finished()
    spans = cutter.spans(data)
    assert [data[a:b] for a, b in spans] == [bytes(unprefix(f)) for f in stream(3)]


def test_any_cut_relays_whole_frames_only() -> None:
    frames = stream(12)
    data = b"".join(frames)
    rng = random.Random(5)
    for _ in range(100):
        cutter = FrameCutter()
        out = b""
        pos = 0
        while pos < len(data):
            step = rng.randrange(1, 50)
            ready = cutter.feed(data[pos : pos + step])
            if ready:  # the last frame of what went out starts at last_at
                k = next(k for k in range(len(frames) + 1) if out + ready == b"".join(frames[:k]))
                assert ready[cutter.last_at :] == frames[k - 1]
            out += ready
            pos += step
            # Whatever went out ends on a frame boundary.
            assert data.startswith(out)
            assert any(out == b"".join(frames[:k]) for k in range(len(frames) + 1))
        assert out == data
        assert cutter.finished()


def test_truncated_or_unfinished_streams_are_not_finished() -> None:
    data = b"".join(stream(3))
    cutter = FrameCutter()
    cutter.feed(data[:-3])
    assert not cutter.finished()
    cutter = FrameCutter()
    cutter.feed(b"".join(stream(3, final=False)))
    assert not cutter.finished()
    assert not FrameCutter().finished()


def test_absurd_frame_size_is_a_cut() -> None:
    with pytest.raises(MalformedFrame):
        FrameCutter().feed(b"\xff\xff\xff\x7f" + b"x" * 10)


def test_a_frame_in_many_pieces_is_gathered_once() -> None:
    big = build_chunk(POOL, content="z" * 200_000, finish_reason=FinishReason.STOP)
    cutter = FrameCutter()
    pieces = [big[i : i + 1000] for i in range(0, len(big), 1000)]
    for piece in pieces[:-1]:
        assert cutter.feed(piece) == b""
    assert cutter.pending == len(big) - len(pieces[-1])
    assert cutter.feed(pieces[-1]) == big
    assert cutter.pending == 0
    assert cutter.finished()


def test_chunk_is_final() -> None:
    assert chunk_is_final(unprefix(build_chunk(POOL, finish_reason=FinishReason.LENGTH)))
    assert chunk_is_final(unprefix(build_chunk(POOL, error=ChunkError("e", "m"))))
    assert not chunk_is_final(unprefix(build_chunk(POOL, content="more")))
    for bad in (b"", b"\x00" * 3, b"\xff" * 16, b"\x08\x00\x00\x00FGCK\xff\xff\xff\xff"):
        assert not chunk_is_final(bad)
    # In place, at an offset inside several frames (what the relay asks).
    more = build_chunk(POOL, content="more")
    last = build_chunk(POOL, finish_reason=FinishReason.STOP)
    both = more + last
    assert chunk_is_final(both, len(more) + 4) and not chunk_is_final(both, 4)
    assert not chunk_is_final(more + b"\x00" * 8, len(more) + 4)


@pytest.mark.parametrize(
    "text", ["", " ", "one", "  lead and trail  ", "tabs\tand\nnewlines\r\n", "ünï cödé ✓ x"]
)
def test_deltas_join_back_exactly(text: str) -> None:
    deltas = deltas_of(text)
    assert "".join(deltas) == text
    assert all(d.strip() or d == text for d in deltas)


def test_delta_limit_keeps_one_more() -> None:
    assert deltas_of("a b c d e", 2) == ["a ", "b ", "c "]
    assert deltas_of("a b", 5) == ["a ", "b"]
