"""Reading ``EmbeddingRequest`` and ``EmbeddingResponse`` buffers.

Owns ``read_embedding_request`` (the proxy reads what the edge sent),
``read_embedding_response`` (the edge, and the fbs adapter, read what came
back) and ``is_embedding_request`` (which root a body to the proxy is).
Both readers verify first (``wire.embeddings.verify``) and then read the
positions the verifier found with unchecked lookups: whatever the bytes, the
only exception that leaves them is ``MalformedBuffer``. Strings are decoded
as strict UTF-8 (invalid bytes: ``MalformedBuffer``). A response's floats
are never copied: ``Embeddings.values`` and its vectors view the buffer.

Pure: no I/O, never writes to the buffer.
"""

from __future__ import annotations

import struct

from flatgate.proxy.wire.buffer import I8, I32, U32, MalformedBuffer, field_at
from flatgate.proxy.wire.embeddings.values import EmbeddingInput, Embeddings
from flatgate.proxy.wire.embeddings.verify import (
    verify_embedding_request,
    verify_embedding_response,
)
from flatgate.proxy.wire.layout import EMBEDDING_REQUEST, EMBEDDING_RESPONSE, HEADER, IDENTIFIER_AT
from flatgate.proxy.wire.schema import EMBEDDING_REQUEST_IDENTIFIER

__all__ = [
    "is_embedding_request",
    "prompt_tokens_of",
    "read_embedding_request",
    "read_embedding_response",
]

_Q = {name: EMBEDDING_REQUEST.slot(name) for name in EMBEDDING_REQUEST.fields}
_V = {name: EMBEDDING_RESPONSE.slot(name) for name in EMBEDDING_RESPONSE.fields}
if {EMBEDDING_REQUEST.spec(f).fmt for f in ("provider", "extras_dialect")} != {"b"}:
    raise ImportError("the embeddings reader's enum types no longer fit the schema")


def _string(buf: bytes | memoryview, at: int, what: str) -> str:
    """The checked string whose uoffset is at ``at`` ("" when ``at`` is 0)."""
    if not at:
        return ""
    s = at + U32(buf, at)[0]
    try:
        return str(buf[s + 4 : s + 4 + U32(buf, s)[0]], "utf-8")
    except UnicodeDecodeError:
        raise MalformedBuffer(f"{what} is not UTF-8", s) from None


def is_embedding_request(buf: bytes | memoryview) -> bool:
    """Whether ``buf`` is marked an ``EmbeddingRequest`` (bytes 4..8 are
    ``FGEQ``); says nothing of the rest (the reader verifies)."""
    return len(buf) >= HEADER and buf[IDENTIFIER_AT:HEADER] == EMBEDDING_REQUEST_IDENTIFIER


def read_embedding_request(
    buf: bytes | memoryview, *, max_bytes: int | None = None
) -> EmbeddingInput:
    """The ``EmbeddingRequest`` in ``buf``, verified then decoded.

    ``max_bytes``: the most ``buf`` may be, and expand to (a service passes
    its ``max_body_bytes``). ``MalformedBuffer`` on any bad byte, more than
    ``MAX_INPUTS`` inputs, both or neither of texts and tokens, or a
    ``dimensions`` outside ``[0, MAX_DIMENSIONS]``.
    """
    checked = verify_embedding_request(buf, max_bytes=max_bytes)
    data, fields = checked.buf, checked.fields
    texts: tuple[str, ...] = ()
    tokens: tuple[tuple[int, ...], ...] = ()
    first, length = checked.inputs
    if checked.ids:
        tokens = tuple(struct.unpack_from(f"<{k}i", data, at) if k else () for at, k in checked.ids)
    else:
        out = []
        for j in range(length):
            out.append(_string(data, first + 4 * j, f"EmbeddingRequest.texts[{j}]"))
        texts = tuple(out)
    dimensions = fields[_Q["dimensions"]]
    provider = fields[_Q["provider"]]
    dialect = fields[_Q["extras_dialect"]]
    return EmbeddingInput(
        request_id=_string(data, fields[_Q["request_id"]], "EmbeddingRequest.request_id"),
        provider=I8(data, provider)[0] if provider else 0,
        model_name=_string(data, fields[_Q["model_name"]], "EmbeddingRequest.model_name"),
        texts=texts,
        tokens=tokens,
        dimensions=I32(data, dimensions)[0] if dimensions else 0,
        user=_string(data, fields[_Q["user"]], "EmbeddingRequest.user"),
        tenant=_string(data, fields[_Q["tenant"]], "EmbeddingRequest.tenant"),
        extras=_string(data, fields[_Q["extras"]], "EmbeddingRequest.extras"),
        extras_dialect=I8(data, dialect)[0] if dialect else 0,
    )


_VT_PROMPT = EMBEDDING_RESPONSE.voffset("prompt_tokens")


def prompt_tokens_of(buf: bytes | memoryview) -> int:
    """The ``prompt_tokens`` of an ``EmbeddingResponse`` verified already
    (``read_embedding_response`` accepted it, or this process wrote it): one
    vtable entry and one scalar, read in place, with no second walk."""
    at = field_at(buf, U32(buf, 0)[0], _VT_PROMPT)
    return I32(buf, at)[0] if at else 0


def read_embedding_response(buf: bytes | memoryview, *, max_bytes: int | None = None) -> Embeddings:
    """The ``EmbeddingResponse`` in ``buf``, verified; its floats a view of
    ``buf``. ``MalformedBuffer`` on any bad byte, ``count`` over
    ``MAX_INPUTS``, ``dimensions`` over ``MAX_DIMENSIONS``, ``values`` not
    ``count * dimensions`` floats, or ``buf`` longer than ``max_bytes``."""
    checked = verify_embedding_response(buf, max_bytes=max_bytes)
    data, fields = checked.buf, checked.fields
    first, length = checked.values
    view = data if isinstance(data, memoryview) else memoryview(data)
    count, dimensions = fields[_V["count"]], fields[_V["dimensions"]]
    prompt, total = fields[_V["prompt_tokens"]], fields[_V["total_tokens"]]
    return Embeddings(
        request_id=_string(data, fields[_V["request_id"]], "EmbeddingResponse.request_id"),
        model=_string(data, fields[_V["model"]], "EmbeddingResponse.model"),
        count=U32(data, count)[0] if count else 0,
        dimensions=U32(data, dimensions)[0] if dimensions else 0,
        values=view[first : first + 4 * length] if length else view[0:0],
        prompt_tokens=I32(data, prompt)[0] if prompt else 0,
        total_tokens=I32(data, total)[0] if total else 0,
    )
