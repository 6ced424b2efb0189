"""Embeddings at the Gemini API (and Vertex's Gemini embedding models):
``models/{model}:embedContent`` for one input, ``:batchEmbedContents`` for
more (``encode_embed`` says which, with the body).

- one text: ``EmbedContentRequest`` (``apis.gemini.embed``):
  ``{"content": {"parts": [{"text"}]}, "outputDimensionality"}``;
- several: ``BatchEmbedContentsRequest``, one request per text, each naming
  its model (``models/<model>``, as the method requires) with the same
  settings; the answer's vectors come in the inputs' order;
- the request's ``dimensions`` -> ``outputDimensionality``; ``user`` has no
  field and is named in ``omitted``; token-id inputs are refused naming
  ``input`` (Gemini embeds text);
- the client's extras: Gemini's own (dialect Gemini) ``taskType``,
  ``title`` and ``outputDimensionality``, and the same fields in Chat
  Completions' dialect (the edge tags an embeddings request's extras with
  it), spelled ``taskType`` or ``task_type`` (a task type that Gemini does not
  name, ``apis.gemini.embed.TASK_TYPES``, is refused naming it); any other
  field refused naming it unless ``drop_unsupported``, and every field of
  another dialect judged by ``report_all``.

``read_embed`` reads either answer (``{"embedding": {"values"}}`` or
``{"embeddings": [{"values"}]}``) into an ``EmbeddingResponse`` buffer: the
numbers packed as little-endian float32 (a number past float32's range is an
error, not an infinity), every vector of one length, within ``max_bytes``.
Gemini's embedding answers carry no token counts: the usage is 0. No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.gemini.content import Content, Part
from flatgate.proxy.apis.gemini.embed import (
    TASK_TYPES,
    BatchEmbedContentsRequest,
    ContentEmbedding,
    EmbedContentRequest,
)
from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.embeddings import vectors_answer
from flatgate.proxy.backends.extras import read_extras, report_all, unsupported
from flatgate.proxy.wire.embeddings import MAX_INPUTS, EmbeddingInput
from flatgate.proxy.wire.schema import ApiDialect

__all__ = ["BATCH", "SINGLE", "encode_embed", "read_embed"]

# The methods, after ``models/{model}:``.
SINGLE = "embedContent"
BATCH = "batchEmbedContents"
_CHAT = int(ApiDialect.OPENAI_CHAT)
_GEMINI = int(ApiDialect.GEMINI)
_NAMES = {
    "taskType": "task_type",
    "task_type": "task_type",
    "title": "title",
    "outputDimensionality": "output_dimensionality",
    "output_dimensionality": "output_dimensionality",
}
_encode = msgspec.json.Encoder().encode


def _settings(req: EmbeddingInput, omitted: list[str], drop: bool) -> dict[str, object]:
    settings: dict[str, object] = {}
    if req.dimensions:
        settings["output_dimensionality"] = req.dimensions
    fields = read_extras(req.extras)
    if fields and req.extras_dialect not in (_CHAT, _GEMINI):
        report_all(fields, req.extras_dialect, omitted, drop)
        return settings
    for name, raw in fields.items():
        field = _NAMES.get(name)
        if field is None:
            unsupported(name, omitted, drop)
            continue
        kind = int if field == "output_dimensionality" else str
        try:
            value = msgspec.json.decode(raw, type=kind)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise Untranslatable(f"{name}: not a {kind.__name__}", param=name) from None
        if field == "task_type" and value not in TASK_TYPES:
            raise Untranslatable(f"{name}: {value!r} is no task type Gemini names", param=name)
        settings[field] = value  # the client's own value wins
    return settings


def encode_embed(
    req: EmbeddingInput, *, model: str, omitted: list[str], drop_unsupported: bool
) -> tuple[str, bytes]:
    """The method (``SINGLE`` or ``BATCH``) and its JSON body for ``req`` at
    ``model`` (see the module docstring); ``Untranslatable`` naming what
    cannot be sent."""
    if req.tokens:
        raise Untranslatable("input: Gemini embeds text, not token ids", param="input")
    if req.user:
        omitted.append("user")
    settings = _settings(req, omitted, drop_unsupported)
    texts = req.texts
    if len(texts) == 1:
        one = EmbedContentRequest(Content([Part(text=texts[0])]), **settings)  # type: ignore[arg-type]
        return SINGLE, _encode(one)
    name = model if model.startswith("models/") else f"models/{model}"
    requests = [
        EmbedContentRequest(Content([Part(text=t)]), model=name, **settings)  # type: ignore[arg-type]
        for t in texts
    ]
    return BATCH, _encode(BatchEmbedContentsRequest(requests))


class _Answer(msgspec.Struct, gc=False):
    embedding: ContentEmbedding | None = None
    embeddings: list[ContentEmbedding] | None = None


_decode = msgspec.json.Decoder(_Answer).decode


def read_embed(body: bytes, *, request_id: str, model: str, max_bytes: int | None = None) -> bytes:
    """The answer's vectors as one ``EmbeddingResponse`` buffer (see the
    module docstring); ``ValueError`` naming what is wrong."""
    if max_bytes is not None and len(body) > max_bytes:
        raise ValueError(f"an embeddings answer of {len(body)} bytes, over {max_bytes}")
    try:
        answer = _decode(body)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not a Gemini embeddings answer: {exc}") from None
    if answer.embeddings is not None:
        vectors = [e.values for e in answer.embeddings]
    elif answer.embedding is not None:
        vectors = [answer.embedding.values]
    else:
        raise ValueError("an answer with no embedding or embeddings")
    if len(vectors) > MAX_INPUTS:
        raise ValueError(f"the answer has {len(vectors)} embeddings, over {MAX_INPUTS}")
    return vectors_answer(vectors, request_id=request_id, model=model)
