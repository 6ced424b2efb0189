"""The backend adapters' two per-request and per-token operations, for
``make bench``'s adapt-request and adapt-chunk rows.

- ``adapt-request``: a verified ``CompletionRequest`` (the edge's bytes for the
  shared payload) read with ``wire.request.decode.read_request`` and written as the
  backend's JSON with msgspec: what an adapter does per request after
  verification (``verify`` is flatgate's own row).
- ``adapt-chunk``: one SSE event of a token delta, as the backend sends it,
  through a stream translator already past the stream's head: SSE parse, JSON
  decode, one chunk frame (``ChunkWriter``).

One module per protocol (``openai_adapter``, ``anthropic_adapter``) over these.
No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.codecs.common import edge_request
from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.backends.base import Translator
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.request.verify import verify_request

__all__ = ["OPS", "Ops", "ops"]

OPS = ("adapt-request", "adapt-chunk")


class Ops:
    """An adapter's two ops, bound to its request encoder and a live translator."""

    def __init__(
        self,
        encode: Callable[[Request], bytes],
        translator: Callable[[], Translator],
        head: bytes,
    ) -> None:
        self._encode = encode
        self._stream = translator()
        self._stream.feed(head)

    def adapt_request(self, data: bytes) -> bytes:
        return self._encode(read_request(data))

    def adapt_chunk(self, event: bytes) -> bytes:
        return self._stream.feed(event)


def ops(
    encode: Callable[[Request], bytes],
    translator: Callable[[], Translator],
    head: bytes,
    event: bytes,
) -> tuple[Ops, Callable[[dict[str, Any]], dict[str, object]]]:
    """The bound ops and the ``inputs`` function of one adapter's codec module."""
    bound = Ops(encode, translator, head)

    def inputs(request: dict[str, Any]) -> dict[str, object]:
        req = edge_request(request)
        wire = write_request(req, provider=0, model_name=req.model, request_id="r-1")
        verify_request(wire)
        return {"adapt-request": wire, "adapt-chunk": event}

    return bound, inputs
