"""The stock builder's ``CompletionChunk``: the reference chunk writer.

``build_chunk`` writes one chunk through flatc's generated code with a
builder leased from a ``BuilderPool`` (size-prefixed by default) and returns
an independent ``bytes``: the ``chunk`` row of the FlatBuffers and flatgate
codecs (a fresh builder each time vs a pooled one), and the reference the
hand-written ``wire.chunk.writer.write_chunk`` is tested against. Slow (the
stock builder is pure-Python bookkeeping); the product writes every chunk
with ``write_chunk``. Benchmark and test scaffolding, not product code. No
I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import flatbuffers

from flatgate.generated.LLMGateway import CompletionChunk as _fb_chunk
from flatgate.generated.LLMGateway import Error as _fb_error
from flatgate.generated.LLMGateway import ToolCallDelta as _fb_tcd
from flatgate.generated.LLMGateway import Usage as _fb_usage
from flatgate.proxy.wire.builders import BuilderPool, finish_bytes
from flatgate.proxy.wire.chunk.frames import ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.schema import CHUNK_IDENTIFIER, FinishReason

__all__ = ["build_chunk"]


def _string(builder: flatbuffers.Builder, value: str | bytes | None) -> int:
    return builder.CreateString(value) if value else 0


def build_chunk(
    pool: BuilderPool,
    *,
    request_id: str | bytes = "",
    content: str | bytes = "",
    tool_calls: Sequence[ToolCallDelta] = (),
    finish_reason: int = FinishReason.NONE,
    usage: Usage | None = None,
    error: ChunkError | None = None,
    index: int = 0,
    model: str | bytes = "",
    reasoning: str | bytes = "",
    stop_sequence: str | bytes = "",
    size_prefixed: bool = True,
) -> bytes:
    """One ``CompletionChunk`` as bytes, built with a builder leased from ``pool``."""
    with pool.lease() as b:
        calls_off = 0
        if tool_calls:
            offs = []
            for call in tool_calls:
                cid, name, args = (
                    _string(b, call.id),
                    _string(b, call.name),
                    _string(b, call.arguments),
                )
                _fb_tcd.Start(b)
                _fb_tcd.AddIndex(b, call.index)
                if cid:
                    _fb_tcd.AddId(b, cid)
                if name:
                    _fb_tcd.AddName(b, name)
                if args:
                    _fb_tcd.AddArguments(b, args)
                offs.append(_fb_tcd.End(b))
            _fb_chunk.StartToolCallsVector(b, len(offs))
            for off in reversed(offs):
                b.PrependUOffsetTRelative(off)
            calls_off = b.EndVector()
        usage_off = 0
        if usage is not None:
            _fb_usage.Start(b)
            _fb_usage.AddPromptTokens(b, usage.prompt_tokens)
            _fb_usage.AddCompletionTokens(b, usage.completion_tokens)
            if usage.cached_tokens:
                _fb_usage.AddCachedTokens(b, usage.cached_tokens)
            if usage.reasoning_tokens:
                _fb_usage.AddReasoningTokens(b, usage.reasoning_tokens)
            if usage.cache_write_tokens:
                _fb_usage.AddCacheWriteTokens(b, usage.cache_write_tokens)
            usage_off = _fb_usage.End(b)
        error_off = 0
        if error is not None:
            code, message = _string(b, error.code), _string(b, error.message)
            _fb_error.Start(b)
            if code:
                _fb_error.AddCode(b, code)
            if message:
                _fb_error.AddMessage(b, message)
            error_off = _fb_error.End(b)
        rid, text, model_off = _string(b, request_id), _string(b, content), _string(b, model)
        thinking = _string(b, reasoning)
        matched = _string(b, stop_sequence)
        _fb_chunk.Start(b)
        if rid:
            _fb_chunk.AddRequestId(b, rid)
        if text:
            _fb_chunk.AddContent(b, text)
        if calls_off:
            _fb_chunk.AddToolCalls(b, calls_off)
        if finish_reason:
            _fb_chunk.AddFinishReason(b, int(finish_reason))
        if usage_off:
            _fb_chunk.AddUsage(b, usage_off)
        if error_off:
            _fb_chunk.AddError(b, error_off)
        if index:
            _fb_chunk.AddIndex(b, index)
        if model_off:
            _fb_chunk.AddModel(b, model_off)
        if thinking:
            _fb_chunk.AddReasoning(b, thinking)
        if matched:
            _fb_chunk.AddStopSequence(b, matched)
        root = _fb_chunk.End(b)
        if size_prefixed:
            b.FinishSizePrefixed(root, CHUNK_IDENTIFIER)
        else:
            b.Finish(root, CHUNK_IDENTIFIER)
        return finish_bytes(b)
