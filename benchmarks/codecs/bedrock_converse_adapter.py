"""The ``bedrock`` backend's Converse side (``proxy.backends.bedrock``): see ``adapters``.

- ``adapt-request``: ``converse.encode_converse``, the Converse JSON body
  (without its SigV4 signature: that is ``cost_checks``' ``sigv4`` table, a
  cost per request on its own line). The shared payload carries ``seed``,
  which Converse has no field for: the backend is one with
  ``drop_unsupported`` (it is left out and named), as a bench of a refusal
  would measure the refusal.
- ``adapt-chunk``: one ConverseStream ``contentBlockDelta`` text message, as
  AWS frames it (its three string headers, the JSON payload with AWS's ``p``
  padding member, both CRCs), through a ``ConverseStream`` past the stream's
  ``messageStart``.
"""

from __future__ import annotations

from benchmarks.codecs.adapters import OPS, ops
from flatgate.proxy.backends.bedrock.converse import encode_converse
from flatgate.proxy.backends.bedrock.converse_stream import ConverseStream
from flatgate.proxy.backends.bedrock.eventstream import encode_message
from flatgate.proxy.wire.request.decode import Request

__all__ = ["EVENT", "HEAD", "OPS", "adapt_chunk", "adapt_request", "inputs"]

MODEL = "amazon.nova-pro-v1:0"


def _frame(event: str, payload: bytes) -> bytes:
    headers = [(":event-type", event), (":content-type", "application/json")]
    return encode_message([*headers, (":message-type", "event")], payload)


HEAD = _frame(
    "messageStart", b'{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS","role":"assistant"}'
)
EVENT = _frame(
    "contentBlockDelta",
    b'{"contentBlockIndex":0,"delta":{"text":" forecast"},"p":"abcdefghijklm"}',
)


def _encode(req: Request) -> bytes:
    return encode_converse(req, [], True, max_tokens_default=None)


_OPS, inputs = ops(_encode, lambda: ConverseStream("r-1", MODEL), HEAD, EVENT)
adapt_request = _OPS.adapt_request
adapt_chunk = _OPS.adapt_chunk
