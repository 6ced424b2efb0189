"""``EmbeddingRequest`` and ``EmbeddingResponse`` (``schema/embeddings.fbs``),
the roots of ``POST /v1/embeddings``: the values they read as and the
verifier's bounds (``values``), the writers (``writer``), the verifiers
(``verify``) and the readers (``reader``), re-exported here. No I/O."""

from __future__ import annotations

from flatgate.proxy.wire.embeddings.reader import (
    is_embedding_request,
    prompt_tokens_of,
    read_embedding_request,
    read_embedding_response,
)
from flatgate.proxy.wire.embeddings.values import (
    MAX_DIMENSIONS,
    MAX_INPUTS,
    EmbeddingInput,
    Embeddings,
)
from flatgate.proxy.wire.embeddings.verify import (
    verify_embedding_request,
    verify_embedding_response,
)
from flatgate.proxy.wire.embeddings.writer import (
    write_embedding_request,
    write_embedding_response,
)

__all__ = [
    "MAX_DIMENSIONS",
    "MAX_INPUTS",
    "EmbeddingInput",
    "Embeddings",
    "is_embedding_request",
    "prompt_tokens_of",
    "read_embedding_request",
    "read_embedding_response",
    "verify_embedding_request",
    "verify_embedding_response",
    "write_embedding_request",
    "write_embedding_response",
]
