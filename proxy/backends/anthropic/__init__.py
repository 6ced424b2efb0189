"""The ``anthropic`` protocol: Anthropic's Messages API, the request written
(``adapter``, ``placing``) and the answer read (``stream``, ``whole``) at the
last hop, with the one model of that API (``apis.anthropic_messages``), its
keys (``config``) and the stub's server of it (``stub``, ``stub_request``).
Its API has no embeddings."""

from flatgate.proxy.backends.anthropic.adapter import AnthropicAdapter
from flatgate.proxy.backends.anthropic.config import AnthropicConfig, anthropic_problems
from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.protocol import BackendProtocol

PROTOCOL = BackendProtocol(
    AnthropicAdapter.protocol,
    AnthropicConfig,
    AnthropicAdapter,
    AnthropicWire,
    embeddings=None,
    check=anthropic_problems,
)
