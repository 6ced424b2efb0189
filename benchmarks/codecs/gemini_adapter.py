"""The ``gemini`` backend adapter (``proxy.backends.gemini``): see ``adapters``.

- ``adapt-request``: ``encode.encode_gemini``, the ``generateContent`` body
  (``contents``, ``systemInstruction``, ``tools``' function declarations,
  ``toolConfig``, ``generationConfig``; no model: it is in the URL), as a
  backend with the defaults writes it; the ``x-goog-api-key`` header is the
  ``--prepare`` table's (``cloud_ratios``).
- ``adapt-chunk``: one ``streamGenerateContent?alt=sse`` event with a text
  delta, as the Gemini API sends it (a ``GenerateContentResponse`` with the
  usage so far, the model version and the response id, the event ending in
  CRLF CRLF as Google's servers end each), through a ``GeminiStream`` past
  the stream's first event.
"""

from __future__ import annotations

from benchmarks.codecs.adapters import OPS, ops
from flatgate.proxy.backends.gemini.encode import encode_gemini
from flatgate.proxy.backends.gemini.stream import GeminiStream
from flatgate.proxy.wire.request.decode import Request

__all__ = ["EVENT", "HEAD", "MODEL", "OPS", "adapt_chunk", "adapt_request", "event", "inputs"]

MODEL = "gemini-2.5-flash"


def event(text: str) -> bytes:
    """One SSE event of ``text`` as the Gemini API streams it."""
    return (
        b'data: {"candidates": [{"content": {"parts": [{"text": "'
        + text.encode()
        + b'"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 25,'
        b'"candidatesTokenCount": 2,"totalTokenCount": 27,"promptTokensDetails": '
        b'[{"modality": "TEXT","tokenCount": 25}]},"modelVersion": "gemini-2.5-flash",'
        b'"responseId": "mK8xaZ2fKpGtnvgPq4y3wQk"}\r\n\r\n'
    )


HEAD = event("The")
EVENT = event(" forecast")


def _encode(req: Request) -> bytes:
    return encode_gemini(req, [], False)


_OPS, inputs = ops(_encode, lambda: GeminiStream("r-1", MODEL), HEAD, EVENT)
adapt_request = _OPS.adapt_request
adapt_chunk = _OPS.adapt_chunk
