"""Gemini's embeddings, as msgspec Structs: ``embedContent`` (one input,
``EmbedContentRequest`` -> ``EmbedContentResponse``) and
``batchEmbedContents`` (many: ``BatchEmbedContentsRequest``, each request
naming its model, -> ``BatchEmbedContentsResponse``).

The ``gemini`` backend writes and reads them (``backends.gemini.embeddings``);
the stub answers them. Task types: ``TASK_TYPES``. Conventions as
``content``'s. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.gemini.content import Content

__all__ = [
    "TASK_TYPES",
    "BatchEmbedContentsRequest",
    "BatchEmbedContentsResponse",
    "ContentEmbedding",
    "EmbedContentRequest",
    "EmbedContentResponse",
]

TASK_TYPES = frozenset(
    {
        "TASK_TYPE_UNSPECIFIED",
        "RETRIEVAL_QUERY",
        "RETRIEVAL_DOCUMENT",
        "SEMANTIC_SIMILARITY",
        "CLASSIFICATION",
        "CLUSTERING",
        "QUESTION_ANSWERING",
        "FACT_VERIFICATION",
        "CODE_RETRIEVAL_QUERY",
    }
)


class _Shape(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    pass


class EmbedContentRequest(_Shape):
    content: Content
    # "models/{model}": required in a batch's requests, optional alone.
    model: str | None = None
    task_type: str | None = None
    title: str | None = None
    output_dimensionality: int | None = None


class BatchEmbedContentsRequest(_Shape):
    requests: list[EmbedContentRequest]


class ContentEmbedding(_Shape):
    values: list[float] = msgspec.field(default_factory=list)


class EmbedContentResponse(_Shape):
    embedding: ContentEmbedding = msgspec.field(default_factory=ContentEmbedding)


class BatchEmbedContentsResponse(_Shape):
    embeddings: list[ContentEmbedding] = msgspec.field(default_factory=list)
