"""The ``vertex`` backend's Anthropic publisher, Claude on Vertex AI
(``proxy.backends.vertex``): see ``adapters``.

- ``adapt-request``: ``vertex.adapter.encode_claude``, the Messages body of
  the ``anthropic`` adapter's encoder with ``anthropic_version``
  (``vertex-2023-10-16``) first and no ``model`` (it is in the
  ``:streamRawPredict`` URL), as a backend with the defaults writes it; the
  bearer token is read from its ``Refreshing`` (``cost_checks``'
  ``google-token`` table: the read per request, and the fetch apart).
- ``adapt-chunk``: the Anthropic Messages SSE event of ``anthropic-adapter``'s
  row (``:streamRawPredict`` streams Anthropic's events), through the
  ``AnthropicStream`` the vertex adapter's ``translator`` gives for a Claude
  model, past the stream's head.
"""

from __future__ import annotations

from typing import Any, cast

from benchmarks.codecs.adapters import OPS, ops
from benchmarks.codecs.anthropic_adapter import _EVENT, _HEAD
from flatgate.proxy.backends.registry import adapter_for, backend_config, backend_problems
from flatgate.proxy.backends.vertex.adapter import VertexAdapter, encode_claude
from flatgate.proxy.plumbing.config import ConfigError, Problems
from flatgate.proxy.wire.request.decode import Request

__all__ = [
    "CONFIG",
    "EVENT",
    "HEAD",
    "MODEL",
    "OPS",
    "adapt_chunk",
    "adapt_request",
    "adapter",
    "inputs",
]

MODEL = "claude-sonnet-4-5@20250929"
VERSION = "vertex-2023-10-16"
HEAD, EVENT = _HEAD, _EVENT
# Claude in one region of one project (the adapter's url derived from them).
CONFIG: dict[str, Any] = {
    "name": "vertex",
    "protocol": "vertex",
    "project": "flatgate-bench",
    "location": "us-east5",
    "model": MODEL,
}


def adapter(entry: dict[str, Any] = CONFIG) -> VertexAdapter:
    """The vertex adapter ``entry`` configures (checked as the config file's;
    no token fetched: nothing here asks for one)."""
    problems = Problems()
    config = backend_config(entry, "backend", problems)
    if config is not None:
        problems += backend_problems(config, "backend")
    if config is None or problems:
        raise ConfigError(*problems)
    return cast(VertexAdapter, adapter_for(config))


def _encode(req: Request) -> bytes:
    return encode_claude(
        req,
        anthropic_version=VERSION,
        default_max_tokens=4096,
        betas=[],
        omitted=[],
        drop_unsupported=False,
        whole=False,
    )


_OPS, inputs = ops(_encode, lambda: adapter().translator("r-1", MODEL), HEAD, EVENT)
adapt_request = _OPS.adapt_request
adapt_chunk = _OPS.adapt_chunk
