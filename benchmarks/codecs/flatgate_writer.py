"""flatgate's schema-specific chunk writer (``proxy.frames.write_chunk``).

Only the ``chunk`` op: the frames a stream is made of (token deltas, final and
error chunks) laid out by hand instead of through ``flatbuffers.Builder``; the
stub backend and the proxy's error frames use it. Same inputs as the
FlatBuffers codec. No I/O.
"""

from __future__ import annotations

from benchmarks.codecs.common import Delta
from benchmarks.codecs.fbs_generated import inputs
from flatgate.proxy.wire.frames import write_chunk

__all__ = ["OPS", "chunk", "inputs"]

OPS = ("chunk",)


def chunk(delta: Delta) -> bytes:
    return write_chunk(
        request_id=delta.request_id,
        content=delta.content,
        index=delta.index,
        model=delta.model,
    )
