"""The ``bedrock`` protocol: AWS Bedrock Runtime, through its Converse API
(``converse``, ``converse_stream``, ``converse_whole``, over the one model of
that API, ``apis.bedrock_converse``) and, for Anthropic's models, InvokeModel
with the Messages body (``invoke``), both framed as AWS's event stream when
streamed (``eventstream``); embeddings through InvokeModel (``embeddings``);
requests signed with SigV4 or a Bedrock API key (``auth``); the adapter
(``adapter``), its keys (``config``) and the stub's server of it (``stub``,
``converse_stub``). Its embeddings are answered by the stub's ``/invoke``
endpoint, not at ``/v1/embeddings`` (``embeddings="bedrock"``: no wire of
``stub.embeddings``)."""

from flatgate.proxy.backends.bedrock.adapter import BedrockAdapter
from flatgate.proxy.backends.bedrock.config import BedrockConfig, bedrock_problems
from flatgate.proxy.backends.bedrock.stub import BedrockWire
from flatgate.proxy.backends.protocol import BackendProtocol

PROTOCOL = BackendProtocol(
    BedrockAdapter.protocol,
    BedrockConfig,
    BedrockAdapter,
    BedrockWire,
    embeddings="bedrock",
    check=bedrock_problems,
)
