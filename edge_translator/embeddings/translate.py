"""OpenAI embeddings request -> ``EmbeddingRequest`` FlatBuffer, and its
token estimate.

Owns ``write``: a decoded request (``request.Decoded``) as an
``EmbeddingRequest`` buffer through the wire's writer
(``wire.embeddings.write_embedding_request``): the inputs as texts or token
ids, ``dimensions`` (0: not given), ``user``, the tenant, the request id, and
the client's other fields as extras (dialect ``OpenAIChat``).
``encoding_format`` is the edge's own: the proxy always answers raw float32
vectors, rendered as the client asked (``render``).

Also ``estimate``, the prompt tokens a request's tenant is reserved before it
is sent (``[[limits]]`` tokens per minute): token ids count one each, text
as ``wire.request.estimate.estimate_tokens`` counts a prompt (its UTF-8
bytes over four, no per-message overhead: an embedding has no chat
template). The answer's ``prompt_tokens`` settles it. Pure: no I/O.
"""

from __future__ import annotations

from flatgate.proxy.apis.openai_embeddings.request import Decoded
from flatgate.proxy.wire.embeddings import write_embedding_request
from flatgate.proxy.wire.request.estimate import estimate_tokens
from flatgate.proxy.wire.schema import ApiDialect

__all__ = ["estimate", "write"]

_CHAT = int(ApiDialect.OPENAI_CHAT)


def write(d: Decoded, *, provider: int, model_name: str, tenant: str, request_id: str) -> bytes:
    """``d`` as an ``EmbeddingRequest`` buffer for the model ``model_name``."""
    req = d.req
    extras = d.extras
    return write_embedding_request(
        model_name,
        texts=d.texts,
        tokens=d.tokens,
        request_id=request_id,
        provider=provider,
        dimensions=req.dimensions or 0,
        user=req.user or "",
        tenant=tenant,
        extras=extras.decode() if extras else "",
        extras_dialect=_CHAT if extras else 0,
    )


def estimate(d: Decoded) -> int:
    """The prompt tokens ``d`` is reserved (see the module docstring)."""
    if d.tokens:
        return sum(len(ids) for ids in d.tokens)
    size = sum(len(t) if t.isascii() else len(t.encode()) for t in d.texts)
    return estimate_tokens(size, 0)
