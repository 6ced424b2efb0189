"""The ``bedrock`` backend's InvokeModel side for Claude
(``proxy.backends.bedrock.invoke``): see ``adapters``.

- ``adapt-request``: ``invoke.encode_invoke``, the Messages body in
  Bedrock's envelope (``anthropic_version`` first, no ``model`` nor
  ``stream``), as a backend with the defaults writes it; its SigV4 signature
  is ``cost_checks``' ``sigv4`` table.
- ``adapt-chunk``: one InvokeModelWithResponseStream ``chunk`` message, as
  AWS frames it (its three string headers; the payload ``{"bytes": base64 of
  a content_block_delta event's JSON, "p": padding}``; both CRCs), through an
  ``InvokeStream`` past the stream's ``message_start`` and
  ``content_block_start`` chunks: the same token as ``anthropic-adapter``'s
  row.
"""

from __future__ import annotations

import base64

import msgspec

from benchmarks.codecs.adapters import OPS, ops
from flatgate.proxy.backends.bedrock.eventstream import encode_message
from flatgate.proxy.backends.bedrock.invoke import InvokeStream, encode_invoke
from flatgate.proxy.wire.request.decode import Request

__all__ = ["EVENT", "HEAD", "OPS", "adapt_chunk", "adapt_request", "inputs"]

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def chunk_frame(event: bytes, padding: str = "abcdefghijklmnopq") -> bytes:
    """One ``chunk`` message carrying one Messages stream event's JSON."""
    payload = msgspec.json.encode({"bytes": base64.b64encode(event).decode(), "p": padding})
    headers = [(":event-type", "chunk"), (":content-type", "application/json")]
    return encode_message([*headers, (":message-type", "event")], payload)


HEAD = chunk_frame(
    b'{"type":"message_start","message":{"id":"msg_1","type":"message",'
    b'"role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,'
    b'"usage":{"input_tokens":25,"output_tokens":1}}}'
) + chunk_frame(
    b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'
)
EVENT = chunk_frame(
    b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" forecast"}}'
)


def _encode(req: Request) -> bytes:
    return encode_invoke(
        req,
        anthropic_version="bedrock-2023-05-31",
        default_max_tokens=4096,
        betas=[],
        omitted=[],
        drop_unsupported=False,
    )


_OPS, inputs = ops(_encode, lambda: InvokeStream("r-1", MODEL), HEAD, EVENT)
adapt_request = _OPS.adapt_request
adapt_chunk = _OPS.adapt_chunk
