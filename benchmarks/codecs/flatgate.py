"""flatgate's own code on the same FlatBuffers bytes.

- ``route``: ``wire.request.route.read_route``, the bounds-checked zero-copy reader
  (the model comes back as a memoryview of the body).
- ``verify``: ``wire.request.verify.verify_request`` alone, the full verifier every
  decoding backend runs first.
- ``decode``: the verifier, then the generated accessors (into the shape every
  codec's decode returns): the FlatBuffers row plus the price of decoding
  untrusted bytes safely. The adapters read with ``wire.request.decode.read_request``
  instead: their ``adapt-request`` rows.
- ``encode``: the edge's schema-specific writer
  (``edge_translator.openai.translate.write_request``, through
  ``wire.request.writer``).
- ``chunk``: ``benchmarks.codecs.stock_chunk.build_chunk`` with a pooled builder
  (the product writes chunks with ``wire.chunk.writer``: the
  ``flatgate-writer`` row).
- ``translate``: the edge's whole op, ``translate_json`` here: the edge's own
  steps (decode and validate, resolve the model, write) in one call;
  ``translate_messages_json`` is the same op for the Anthropic Messages API,
  ``translate_gemini_json`` for the Gemini API
  (``benchmarks/bench_translate.py`` puts them side by side).

No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from benchmarks.codecs.common import MODELS, REQUEST_ID, Decoded, Delta
from benchmarks.codecs.fbs_generated import inputs, read
from benchmarks.codecs.stock_chunk import build_chunk
from flatgate.edge_translator.anthropic.endpoint import new_message_id
from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.catalog import resolve_model
from flatgate.edge_translator.gemini.endpoint import for_path
from flatgate.edge_translator.openai.mapping import new_request_id
from flatgate.edge_translator.openai.translate import write_request
from flatgate.edge_translator.responses.echo import new_id
from flatgate.edge_translator.responses.translate import write_request as write_responses
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.apis.openai_chat.request import ChatCompletionRequest, decode_request
from flatgate.proxy.apis.openai_responses.request import decode_request as decode_responses
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import verify_request

__all__ = [
    "OPS",
    "POOL",
    "chunk",
    "decode",
    "encode",
    "inputs",
    "route",
    "translate",
    "translate_gemini_json",
    "translate_json",
    "translate_messages_json",
    "verify",
]

OPS = ("route", "verify", "decode", "encode", "chunk", "translate")

POOL = BuilderPool()

# ``inputs`` is the FlatBuffers codec's: the same bytes and objects, so that only
# the code under test differs between the two rows.

route = read_route


def verify(data: bytes) -> None:
    verify_request(data)


def decode(data: bytes) -> Decoded:
    verify_request(data)
    return read(data)


def encode(request: ChatCompletionRequest) -> bytes:
    return write_request(request, provider=0, model_name=request.model)


def chunk(delta: Delta) -> bytes:
    return build_chunk(
        POOL,
        request_id=delta.request_id,
        content=delta.content,
        index=delta.index,
        model=delta.model,
    )


def translate_json(
    body: bytes,
    *,
    models: Mapping[str, ModelConfig],
    tenant: str = "",
    request_id: str | None = None,
) -> bytes:
    """The edge's whole translate op: OpenAI JSON bytes in, FlatBuffer bytes out."""
    req = decode_request(body)
    model = resolve_model(models, req.model)
    return write_request(
        req,
        provider=model.provider_id,
        model_name=model.name,
        tenant=tenant,
        request_id=new_request_id() if request_id is None else request_id,
    )


def translate_messages_json(
    body: bytes,
    *,
    models: Mapping[str, ModelConfig],
    tenant: str = "",
    request_id: str | None = None,
) -> bytes:
    """The Messages edge's translate op: Anthropic JSON bytes in, FlatBuffer bytes out
    (``anthropic.endpoint.MessagesApi`` in ``flow.Flow``, up to the proxy call)."""
    req = decode_messages(body)
    model = resolve_model(models, req.model)
    return write_messages(
        req,
        provider=model.provider_id,
        model_name=model.name,
        tenant=tenant,
        request_id=new_message_id() if request_id is None else request_id,
    )


def translate_responses_json(
    body: bytes,
    *,
    models: Mapping[str, ModelConfig],
    tenant: str = "",
    request_id: str | None = None,
) -> bytes:
    """The Responses edge's translate op: Responses JSON bytes in, FlatBuffer
    bytes out (``responses.endpoint.ResponsesApi`` in ``flow.Flow``, up to the
    proxy call; nothing stored, as ``store: false``)."""
    req = decode_responses(body)
    model = resolve_model(models, req.req.model)
    return write_responses(
        req,
        provider=model.provider_id,
        model_name=model.name,
        tenant=tenant,
        request_id=new_id("resp") if request_id is None else request_id,
    )


def translate_gemini_json(
    body: bytes,
    *,
    model: str,
    models: Mapping[str, ModelConfig],
    tenant: str = "",
    request_id: str | None = None,
) -> bytes:
    """The Gemini edge's translate op: Gemini JSON bytes in (the model the
    path's, ``:streamGenerateContent?alt=sse``), FlatBuffer bytes out
    (``gemini.endpoint.GeminiApi`` in ``flow.Flow``, up to the proxy call)."""
    api = for_path(model, "streamGenerateContent", "alt=sse")
    req = api.decode(body)
    found = resolve_model(models, req.model)
    return api.write(
        req, found, tenant=tenant, request_id=api.new_id() if request_id is None else request_id
    )


def translate(body: bytes) -> bytes:
    return translate_json(body, models=MODELS, request_id=REQUEST_ID)
