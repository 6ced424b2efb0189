"""FlatBuffers through the stock runtime: generated accessors and builders.

The baseline flatgate's own code is measured against. ``route`` and
``decode`` use the ``flatc --python`` accessors (a ``Table`` object per table
reached, a ``bytes`` copy per string read); ``encode`` and ``translate`` use
the stock ``flatbuffers.Builder`` with the generated ``Start``/``Add``/``End``
functions (``benchmarks.codecs.stock_writer.write_request_stock``, pooled
builder); ``chunk`` is ``benchmarks.codecs.stock_chunk.build_chunk`` given a
fresh builder each time (a
pool that keeps none), the same code as flatgate's pooled row otherwise.

The accessors do not verify: on untrusted bytes they may raise anything or
read garbage. flatgate's ``decode`` row adds the verifier that makes them safe.
No I/O.
"""

from __future__ import annotations

from typing import Any

from benchmarks.codecs.common import (
    DELTA,
    MODELS,
    REQUEST_ID,
    Decoded,
    Delta,
    MessageView,
    ToolView,
    edge_request,
    json_body,
)
from benchmarks.codecs.stock_chunk import build_chunk
from benchmarks.codecs.stock_writer import write_request_stock
from benchmarks.payloads import to_flatbuffer
from flatgate.edge_translator.catalog import resolve_model
from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequest
from flatgate.proxy.apis.openai_chat.request import ChatCompletionRequest, decode_request
from flatgate.proxy.wire.builders import BuilderPool

__all__ = ["OPS", "chunk", "decode", "encode", "inputs", "read", "route", "translate"]

OPS = ("route", "decode", "encode", "chunk", "translate")

# Keeps no builder: every chunk gets a new ``flatbuffers.Builder``.
FRESH = BuilderPool(size=0)
# encode/translate lease from a pool, as the edge does, so that only the
# writer differs from flatgate's rows.
POOL = BuilderPool()


def inputs(request: dict[str, Any]) -> dict[str, object]:
    wire = to_flatbuffer(request)
    return {
        "route": wire,
        "verify": wire,
        "decode": wire,
        "encode": edge_request(request),
        "chunk": DELTA,
        "translate": json_body(request),
    }


def route(data: bytes) -> tuple[int, bytes]:
    req = CompletionRequest.GetRootAs(data, 0)
    return req.Provider(), req.ModelName()


def read(data: bytes) -> Decoded:
    """Every field a backend needs, through the generated accessors."""
    req = CompletionRequest.GetRootAs(data, 0)
    messages: list[MessageView] = []
    for i in range(req.MessagesLength()):
        m = req.Messages(i)
        calls = []
        for j in range(m.ToolCallsLength()):
            c = m.ToolCalls(j)
            calls.append((c.Id(), c.Name(), c.Arguments()))
        messages.append((m.Role(), m.Content(), tuple(calls), m.ToolCallId()))
    tools: list[ToolView] = []
    for i in range(req.ToolsLength()):
        t = req.Tools(i)
        tools.append((t.Name(), t.Description(), t.Parameters(), t.Strict()))
    sampling = (
        req.Temperature(),
        req.TopP(),
        req.MaxTokens(),
        [req.Stop(i) for i in range(req.StopLength())],
        req.Seed(),
        req.N(),
        req.PresencePenalty(),
        req.FrequencyPenalty(),
        req.Stream(),
        req.User(),
        req.ToolChoice(),
    )
    return req.ModelName(), messages, tools, sampling


decode = read


def encode(request: ChatCompletionRequest) -> bytes:
    return write_request_stock(POOL, request, provider=0, model_name=request.model)


def chunk(delta: Delta) -> bytes:
    return build_chunk(
        FRESH,
        request_id=delta.request_id,
        content=delta.content,
        index=delta.index,
        model=delta.model,
    )


def translate(body: bytes) -> bytes:
    req = decode_request(body)
    model = resolve_model(MODELS, req.model)
    return write_request_stock(
        POOL, req, provider=model.provider_id, model_name=model.name, request_id=REQUEST_ID
    )
