"""The ``anthropic`` backend adapter (``proxy.backends.anthropic``): see ``adapters``."""

from __future__ import annotations

from benchmarks.codecs.adapters import OPS, ops
from flatgate.proxy.backends.anthropic.adapter import AnthropicStream, encode_request

__all__ = ["OPS", "adapt_chunk", "adapt_request", "inputs"]

_HEAD = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    b'"role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,'
    b'"usage":{"input_tokens":25,"output_tokens":1}}}\n\n'
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
)
_EVENT = (
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":" forecast"}}\n\n'
)
_OPS, inputs = ops(
    lambda req: encode_request(req, model="claude-sonnet-4-5"),
    lambda: AnthropicStream("r-1", "claude-sonnet-4-5"),
    _HEAD,
    _EVENT,
)
adapt_request = _OPS.adapt_request
adapt_chunk = _OPS.adapt_chunk
