"""The ``openai-responses`` protocol: OpenAI's Responses API, the request
written (``adapter``) and the answer read (``stream``, ``whole``) at the last
hop, a compaction forwarded (``compact``), its keys (``config``) and the
stub's server of it (``stub``)."""

from flatgate.proxy.backends.protocol import BackendProtocol
from flatgate.proxy.backends.responses.adapter import ResponsesAdapter, responses_adapter
from flatgate.proxy.backends.responses.config import ResponsesConfig, responses_problems
from flatgate.proxy.backends.responses.stub import ResponsesWire

PROTOCOL = BackendProtocol(
    ResponsesAdapter.protocol,
    ResponsesConfig,
    responses_adapter,
    ResponsesWire,
    embeddings="openai",
    check=responses_problems,
)
