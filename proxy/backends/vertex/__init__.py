"""The ``vertex`` protocol: Vertex AI, Claude through the Anthropic
publisher (the ``anthropic`` protocol's mapping) and Google's models through
Gemini's (the ``gemini`` protocol's mapping): one mapping per vendor, the
transport Vertex's (``adapter``), tokens from Google's Application Default
Credentials (``transport.google``); its keys (``config``) and the stub's
server of it (``stub``). Its embeddings are not served (``embeddings=None``)."""

from flatgate.proxy.backends.protocol import BackendProtocol
from flatgate.proxy.backends.vertex.adapter import VertexAdapter
from flatgate.proxy.backends.vertex.config import VertexConfig, vertex_problems
from flatgate.proxy.backends.vertex.stub import VertexWire

PROTOCOL = BackendProtocol(
    VertexAdapter.protocol,
    VertexConfig,
    VertexAdapter,
    VertexWire,
    embeddings=None,
    check=vertex_problems,
)
