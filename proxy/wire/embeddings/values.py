"""What an embeddings buffer reads as, and the bounds every reader holds it to.

Owns ``EmbeddingInput`` (a decoded ``EmbeddingRequest``: plain values, the
buffer no longer needed), ``Embeddings`` (a read ``EmbeddingResponse``: the
vectors are views of the buffer, never copied) and the verifier's bounds
``MAX_INPUTS`` and ``MAX_DIMENSIONS``. No I/O, no reading: the readers and
the verifier are ``wire.embeddings.reader`` and ``wire.embeddings.verify``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_DIMENSIONS", "MAX_INPUTS", "EmbeddingInput", "Embeddings"]

# Inputs per request (and so vectors per response): OpenAI's own limit.
MAX_INPUTS = 2048
# Floats per vector (the largest models give 4096 to 12288).
MAX_DIMENSIONS = 16384


@dataclass(frozen=True, slots=True)
class EmbeddingInput:
    """A decoded ``EmbeddingRequest``: exactly one of ``texts`` and ``tokens``
    is non-empty (the reader refuses a buffer with both or neither)."""

    request_id: str
    provider: int
    model_name: str
    # The inputs as text; () when they are token ids.
    texts: tuple[str, ...]
    # The inputs as token ids; () when they are texts.
    tokens: tuple[tuple[int, ...], ...]
    # Floats per vector the client asks for; 0: not given.
    dimensions: int
    user: str
    tenant: str
    # The client's fields with no slot, one JSON object text in extras_dialect.
    extras: str
    extras_dialect: int

    @property
    def count(self) -> int:
        """The number of inputs."""
        return len(self.texts) or len(self.tokens)


@dataclass(frozen=True, slots=True)
class Embeddings:
    """A read ``EmbeddingResponse``. ``values`` is a format ``"B"`` view of
    the buffer's ``count * dimensions`` little-endian float32 (row-major), no
    copy: it holds the buffer alive, and
    ``numpy.frombuffer(e.values, dtype="<f4")`` reads it without one either."""

    request_id: str
    model: str
    count: int
    dimensions: int
    values: memoryview
    prompt_tokens: int
    total_tokens: int

    def vector(self, i: int) -> memoryview:
        """Vector ``i``'s ``4 * dimensions`` bytes, a view of the buffer
        (``IndexError`` unless ``0 <= i < count``)."""
        if not 0 <= i < self.count:
            raise IndexError(f"vector {i} of {self.count}")
        size = 4 * self.dimensions
        return self.values[i * size : (i + 1) * size]
