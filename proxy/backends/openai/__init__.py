"""The ``openai`` protocol: OpenAI's Chat Completions API, the request written
(``adapter``) and the answer read (``stream``, ``whole``) at the last hop, its
keys (``config``), Azure OpenAI's conventions over it (``azure``) and the
stub's server of it (``stub``)."""

from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.azure import openai_adapter
from flatgate.proxy.backends.openai.config import OpenAIConfig, openai_problems
from flatgate.proxy.backends.openai.stub import OpenAIWire
from flatgate.proxy.backends.protocol import BackendProtocol

PROTOCOL = BackendProtocol(
    OpenAIAdapter.protocol,
    OpenAIConfig,
    openai_adapter,
    OpenAIWire,
    embeddings="openai",
    check=openai_problems,
)
