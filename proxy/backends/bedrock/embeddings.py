"""Embeddings on Bedrock's InvokeModel: Titan Text Embeddings and Cohere Embed.

Which body a model takes is its family's (``family``, from the model id,
an inference profile's or an ARN's: ``amazon.titan-embed-*`` or
``cohere.embed-*``); any other model has no embeddings flatgate can ask of
it, and the request is refused naming ``model``.

- Titan (``amazon.titan-embed-text-v2:0``, and v1 / G1): one input per
  call, ``{"inputText", "dimensions", "normalize"}``; a request with more
  than one input is refused naming ``input`` (one call per input would
  multiply the bill and the latency behind the caller's back). Its answer,
  ``{"embedding": [...], "inputTextTokenCount": n}``, is one vector and its
  prompt tokens.
- Cohere (``cohere.embed-english-v3``, ``-multilingual-v3``, ``embed-v4:0``):
  a batch, ``{"texts": [...], "input_type", "output_dimension"}``;
  ``input_type`` is ``search_document`` unless the client's extras say
  (Cohere requires one). Its answer's ``embeddings`` is a list of vectors
  (``embeddings_floats``) or ``{"float": [...]}`` (``embeddings_by_type``);
  Bedrock counts its tokens in a header, not the body: the usage is 0.

Token-id inputs are refused naming ``input`` (both take text). The request's
``dimensions`` is Titan V2's ``dimensions`` and Cohere v4's
``output_dimension``; ``user`` is left out and named. The client's extras
(Chat Completions' dialect, as the edge tags an embeddings request's) are
taken where the family documents the field (Titan: ``normalize``,
``embeddingTypes``; Cohere: ``input_type``, ``truncate``, ``embedding_types``),
as sent; any other is refused naming it unless ``drop_unsupported``, and so
is every field of another dialect (``report_all``).

The answer is read into an ``EmbeddingResponse`` buffer: the numbers packed
as little-endian float32 (``struct``: a number past float32's range is an
error, not an infinity), every vector of one length, within ``max_bytes``.

No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.bedrock.config import model_part
from flatgate.proxy.backends.embeddings import vectors_answer
from flatgate.proxy.backends.extras import read_extras, report_all, splice, unsupported
from flatgate.proxy.wire.embeddings import EmbeddingInput
from flatgate.proxy.wire.schema import ApiDialect

__all__ = ["COHERE", "TITAN", "encode_embeddings", "family", "read_embeddings"]

TITAN = "titan"
COHERE = "cohere"
_CHAT = int(ApiDialect.OPENAI_CHAT)
# The client's extras each family takes as its own fields.
_TAKES = {
    TITAN: frozenset({"normalize", "embeddingTypes"}),
    COHERE: frozenset({"input_type", "truncate", "embedding_types"}),
}
_encode = msgspec.json.Encoder().encode


def family(model: str) -> str:
    """``TITAN``, ``COHERE``, or ``""``: a model with no embeddings flatgate asks."""
    part = model_part(model)
    if part.startswith("amazon.titan-embed"):
        return TITAN
    if part.startswith("cohere.embed"):
        return COHERE
    return ""


def encode_embeddings(
    req: EmbeddingInput, *, model: str, omitted: list[str], drop_unsupported: bool
) -> bytes:
    """InvokeModel's body for ``req`` at ``model`` (see the module
    docstring); ``Untranslatable`` naming what cannot be sent."""
    kind = family(model)
    if not kind:
        raise Untranslatable(
            f"model: {model!r} is not a Bedrock embeddings model flatgate can ask "
            "(Titan Text Embeddings, amazon.titan-embed-*, or Cohere Embed, cohere.embed-*)"
        )
    if req.tokens:
        raise Untranslatable("input: Bedrock's embeddings models take text, not token ids")
    if req.user:
        omitted.append("user")
    body: dict[str, object]
    if kind == TITAN:
        if len(req.texts) != 1:
            raise Untranslatable(
                f"input: Titan Text Embeddings embeds one input per call, got {len(req.texts)}"
            )
        body = {"inputText": req.texts[0]}
        if req.dimensions:
            body["dimensions"] = req.dimensions
    else:
        body = {"texts": list(req.texts), "input_type": "search_document"}
        if req.dimensions:
            body["output_dimension"] = req.dimensions
    fields = read_extras(req.extras)
    if fields and req.extras_dialect != _CHAT:
        report_all(fields, req.extras_dialect, omitted, drop_unsupported)
        fields = {}
    taken: list[tuple[str, bytes]] = []
    for name, raw in fields.items():
        if name in _TAKES[kind]:
            body.pop(name, None)  # the client's own value wins
            taken.append((name, bytes(raw)))
        else:
            unsupported(name, omitted, drop_unsupported)
    return splice(_encode(body), taken)


class _Titan(msgspec.Struct, gc=False):
    embedding: list[float] | None = None
    inputTextTokenCount: int = 0


class _ByType(msgspec.Struct, gc=False):
    floats: list[list[float]] | None = msgspec.field(default=None, name="float")


class _Cohere(msgspec.Struct, gc=False):
    embeddings: list[list[float]] | _ByType | None = None


_decode_titan = msgspec.json.Decoder(_Titan).decode
_decode_cohere = msgspec.json.Decoder(_Cohere).decode


def _vectors(body: bytes, kind: str) -> tuple[list[list[float]], int]:
    if kind == TITAN:
        titan = _decode_titan(body)
        if titan.embedding is None:
            raise ValueError("a Titan answer with no embedding")
        return [titan.embedding], titan.inputTextTokenCount
    cohere = _decode_cohere(body)
    found = cohere.embeddings
    if isinstance(found, _ByType):
        found = found.floats
    if found is None:
        raise ValueError("a Cohere answer with no float embeddings")
    return found, 0


def read_embeddings(
    body: bytes, *, kind: str, request_id: str, model: str, max_bytes: int | None = None
) -> bytes:
    """The answer's vectors as one ``EmbeddingResponse`` buffer (see the
    module docstring); ``ValueError`` naming what is wrong."""
    if max_bytes is not None and len(body) > max_bytes:
        raise ValueError(f"an embeddings answer of {len(body)} bytes, over {max_bytes}")
    try:
        vectors, tokens = _vectors(body, kind)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not a {kind} embeddings answer: {exc}") from None
    return vectors_answer(vectors, request_id=request_id, model=model, tokens=tokens)
