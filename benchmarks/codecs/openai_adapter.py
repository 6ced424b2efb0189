"""The ``openai`` backend adapter (``proxy.backends.openai``): see ``adapters``."""

from __future__ import annotations

from benchmarks.codecs.adapters import OPS, ops
from flatgate.proxy.backends.openai.adapter import OpenAIStream, encode_request

__all__ = ["OPS", "adapt_chunk", "adapt_request", "inputs"]

_HEAD = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,'
    b'"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":""},"finish_reason":null}]}\n\n'
)
_EVENT = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,'
    b'"model":"gpt-4o-mini","system_fingerprint":"fp_1","choices":[{"index":0,'
    b'"delta":{"content":" forecast"},"logprobs":null,"finish_reason":null}],'
    b'"usage":null}\n\n'
)
_OPS, inputs = ops(
    lambda req: encode_request(req, model="gpt-4o-mini"),
    lambda: OpenAIStream("r-1", "gpt-4o-mini"),
    _HEAD,
    _EVENT,
)
adapt_request = _OPS.adapt_request
adapt_chunk = _OPS.adapt_chunk
