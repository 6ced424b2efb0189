"""flatgate's per-token chunk writer (``wire.chunk.writer.ChunkWriter``).

Only the ``chunk`` op: a stream's token delta, laid out by hand instead of
through ``flatbuffers.Builder`` (the stream's request id and model written
once, then each delta is a cached head plus its text); the stub and the
backend adapters write with it. Same inputs as the FlatBuffers codec. No I/O.
"""

from __future__ import annotations

from benchmarks.codecs.common import Delta
from benchmarks.codecs.fbs_generated import inputs
from flatgate.proxy.wire.chunk.writer import ChunkWriter

__all__ = ["OPS", "chunk", "inputs"]

OPS = ("chunk",)


_WRITERS: dict[tuple[str, str], ChunkWriter] = {}


def chunk(delta: Delta) -> bytes:
    writer = _WRITERS.get((delta.request_id, delta.model))
    if writer is None:
        writer = _WRITERS[delta.request_id, delta.model] = ChunkWriter(
            delta.request_id, delta.model
        )
    return writer.content(delta.content, delta.index)
