"""The ``fbs`` protocol: a server of ``CompletionRequest`` FlatBuffers, sent the
caller's bytes untouched (``adapter``), its keys (``config``) and the stub's
server of it (``stub``)."""

from flatgate.proxy.backends.fbs.adapter import FbsAdapter
from flatgate.proxy.backends.fbs.config import FbsConfig, fbs_problems
from flatgate.proxy.backends.fbs.stub import FbsWire
from flatgate.proxy.backends.protocol import BackendProtocol

PROTOCOL = BackendProtocol(
    FbsAdapter.protocol, FbsConfig, FbsAdapter, FbsWire, embeddings="fbs", check=fbs_problems
)
