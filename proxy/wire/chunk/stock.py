"""Chunk frames through flatc's generated accessors: the reference reader.

``decode_chunk`` reads one chunk into a ``Chunk`` through the generated
accessors: the reference the fast reader is tested against, and a client's
convenience (the README's tour); hot paths read with
``wire.chunk.reader.read_chunk``. Any malformed buffer raises
``MalformedFrame``, never anything else. Chunks are written with
``wire.chunk.writer``; the stock builder's chunk (the benchmarks' and tests'
reference writer) is ``benchmarks.codecs.stock_chunk``.

Generated code for chunks is read here and nowhere else in the product. No
I/O.
"""

from __future__ import annotations

from flatgate.generated.LLMGateway import CompletionChunk as _fb_chunk
from flatgate.proxy.wire.chunk.frames import (
    Chunk,
    ChunkError,
    MalformedFrame,
    ToolCallDelta,
    Usage,
)
from flatgate.proxy.wire.layout import HEADER, IDENTIFIER_AT
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import CHUNK_IDENTIFIER, finish_reason_of

__all__ = ["decode_chunk"]


def _text(value: bytes | None) -> str:
    return value.decode("utf-8") if value else ""


def decode_chunk(buf: bytes | memoryview) -> Chunk:
    """Decode one chunk buffer (not size-prefixed) into a ``Chunk``, through the
    generated accessors."""
    data = bytes(buf)
    if len(data) < HEADER or data[IDENTIFIER_AT:HEADER] != CHUNK_IDENTIFIER:
        raise MalformedFrame("chunk frame: missing or wrong file identifier")
    try:
        fb = _fb_chunk.CompletionChunk.GetRootAs(data, 0)
        calls = []
        for i in range(fb.ToolCallsLength()):
            tc = fb.ToolCalls(i)
            calls.append(
                ToolCallDelta(
                    index=tc.Index(),
                    id=_text(tc.Id()),
                    name=_text(tc.Name()),
                    arguments=_text(tc.Arguments()),
                )
            )
        u = fb.Usage()
        e = fb.Error()
        usage = None
        if u is not None:
            usage = Usage(
                u.PromptTokens(),
                u.CompletionTokens(),
                u.CachedTokens(),
                u.ReasoningTokens(),
                u.CacheWriteTokens(),
            )
        p = fb.ReasoningPart()
        part = None
        if p is not None:
            opaque = (
                b"" if p.OpaqueIsNone() else bytes(p.Opaque(i) for i in range(p.OpaqueLength()))
            )
            part = ReasoningPart(_text(p.Text()), opaque, p.Dialect(), _text(p.Id()), p.Redacted())
        return Chunk(
            request_id=_text(fb.RequestId()),
            content=_text(fb.Content()),
            tool_calls=tuple(calls),
            finish_reason=finish_reason_of(fb.FinishReason()),
            usage=usage,
            error=None if e is None else ChunkError(_text(e.Code()), _text(e.Message())),
            index=fb.Index(),
            model=_text(fb.Model()),
            reasoning=_text(fb.Reasoning()),
            stop_sequence=_text(fb.StopSequence()),
            reasoning_part=part,
            extras=_text(fb.Extras()),
            extras_dialect=fb.ExtrasDialect(),
        )
    except MalformedFrame:
        raise
    except Exception as exc:  # the generated accessors raise anything on bad bytes
        raise MalformedFrame(f"chunk frame does not decode: {exc!r}") from exc
