"""The OpenAI embeddings answer, as msgspec Structs: ``{"object": "list",
"data": [{"object": "embedding", "index": i, "embedding": ...}], "model",
"usage"}``, as the ``openai`` and ``openai-responses`` adapters read a
server's (``backends.embeddings``).

An ``embedding`` asked for in base64 is read as ``bytes``: msgspec decodes
the base64 as it parses the JSON, one object per vector and none per
number. One given as numbers (a server that ignores ``encoding_format``) is
a list of floats. Keys of no name are ignored. The edge and the stub write
this answer from bytes and values they hold, not through these.

Pure: no I/O. The decoder is built once at import.
"""

from __future__ import annotations

import msgspec

__all__ = ["Embedding", "EmbeddingsAnswer", "EmbeddingsUsage", "decode_answer"]


class Embedding(msgspec.Struct, gc=False):
    # base64 (what was asked for: msgspec decodes it), or numbers (the slow path).
    embedding: bytes | list[float]
    index: int


class EmbeddingsUsage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    total_tokens: int | None = None


class EmbeddingsAnswer(msgspec.Struct, gc=False):
    data: list[Embedding]
    model: str | None = None
    usage: EmbeddingsUsage | None = None


decode_answer = msgspec.json.Decoder(EmbeddingsAnswer).decode
