"""The ``fbs`` backend: a model server that speaks flatgate's own wire format.

It is sent the caller's ``CompletionRequest`` bytes, untouched, as
``POST {url}/v1/completions``, asking for size-prefixed chunk frames, which
come back as they are: the translator only cuts the byte stream at frame
boundaries (``FrameCutter``), passing whole-frame pieces through uncopied.
Nothing is decoded: the only zero-copy path end to end.

Embeddings: the caller's ``EmbeddingRequest`` bytes, untouched, as
``POST {url}/v1/embeddings``, asking for ``application/x-flatbuffers``; the
answer, one ``EmbeddingResponse`` buffer, is verified
(``read_embedding_response``) and relayed as it came, the same bytes object.
No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flatgate.proxy.backends.base import (
    Inbound,
    Outbound,
    Probe,
    Refusal,
    TranslatorError,
    classify,
)
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.transport.base import retry_after
from flatgate.proxy.transport.credentials import Refreshing
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.chunk.frames import ChunkError, FrameCutter, MalformedFrame
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.embeddings import EmbeddingInput, read_embedding_response
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import (
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    FLATBUFFERS,
    FRAMES,
    FinishReason,
)

__all__ = [
    "FbsAdapter",
    "FrameRelay",
    "completions_url",
    "embeddings_url",
    "request_headers",
]

# Where an fbs server takes requests, under its root URL: the proxy's own
# paths (wire.schema).


def completions_url(url: str) -> str:
    """The completions endpoint of the fbs server whose root is ``url``."""
    return url.rstrip("/") + COMPLETIONS_PATH


def embeddings_url(url: str) -> str:
    """The embeddings endpoint of the fbs server whose root is ``url``."""
    return url.rstrip("/") + EMBEDDINGS_PATH


def request_headers(
    request_id: str, authorization: str, accept: str = FRAMES
) -> list[tuple[str, str]]:
    """What goes with the bytes: their type, what is asked for back (chunk
    frames, or one buffer), the request id, and the caller's credential when
    the backend is configured to receive it."""
    headers = [("content-type", FLATBUFFERS), ("accept", accept), ("x-request-id", request_id)]
    if authorization:
        headers.append(("authorization", authorization))
    return headers


class FrameRelay:
    """The fbs translator: frames pass through, cut at frame boundaries."""

    __slots__ = ("_cutter", "_ended", "_request_id")

    def __init__(self, request_id: str) -> None:
        self._cutter = FrameCutter()
        self._request_id = request_id
        self._ended = False

    @property
    def done(self) -> bool:
        return self._ended or self._cutter.finished()

    @property
    def last_frame_at(self) -> int | None:
        """Where the last frame ``feed`` returned starts in what it returned
        (``None`` once ``end`` wrote one of its own)."""
        return None if self._ended else self._cutter.last_at

    def feed(self, piece: bytes) -> bytes:
        try:
            return self._cutter.feed(piece)
        except MalformedFrame as exc:
            raise TranslatorError(str(exc)) from None

    def end(self) -> bytes:
        if self.done:
            return b""
        self._ended = True
        return write_chunk(
            request_id=self._request_id,
            error=ChunkError(codes.BACKEND_STREAM_TRUNCATED.code, "backend ended the stream early"),
            finish_reason=FinishReason.ERROR,
        )


class FbsAdapter:
    protocol = "fbs"
    embeddings = True
    translated = False
    credentials: Refreshing[Any] | None = None  # a static key, or none

    def __init__(self, config: BackendConfig) -> None:
        self._url = completions_url(config.url)
        self._embeddings = embeddings_url(config.url)
        self._health = config.health_url() or f"{config.url.rstrip('/')}/healthz"
        self._forward = config.forward_credentials
        self._extra = list(config.headers.items())

    def prepare(self, call: Inbound[Request]) -> Outbound:
        headers = request_headers(call.request_id, call.authorization if self._forward else "")
        if self._extra:
            headers += self._extra
        return Outbound(self._url, headers, call.body)

    def prepare_embeddings(self, call: Inbound[EmbeddingInput]) -> Outbound:
        credential = call.authorization if self._forward else ""
        headers = request_headers(call.request_id, credential, FLATBUFFERS)
        if self._extra:
            headers += self._extra
        return Outbound(self._embeddings, headers, call.body)

    def embeddings_answer(
        self, body: bytes, request_id: str, model: str, max_bytes: int | None = None
    ) -> bytes:
        """``body`` itself, once verified (``ValueError``: not an
        ``EmbeddingResponse``, or over ``max_bytes``)."""
        try:
            read_embedding_response(body, max_bytes=max_bytes)
        except MalformedBuffer as exc:
            raise ValueError(f"not an EmbeddingResponse: {exc}") from None
        return body

    def translator(self, request_id: str, model: str, whole: bool = False) -> FrameRelay:
        return FrameRelay(request_id)  # an fbs server frames whole answers too

    def refusal(self, status: int, headers: Mapping[str, str], body: bytes) -> Refusal:
        """An fbs server's error body is flatgate's own ``{"error": {"code", "message"}}``."""
        message = body[:512].decode("utf-8", "replace")
        try:
            detail = json.loads(body)["error"]
            message = str(detail.get("message") or message)
        except (ValueError, KeyError, TypeError, AttributeError):
            pass

        return Refusal(classify(status), status, message, retry_after(headers))

    def probe(self) -> Probe:
        return Probe(self._health, [])
