"""The ``openai`` backend adapter configured for Azure OpenAI
(``proxy.backends.openai.azure``): see ``adapters``.

- ``adapt-request``: the adapter's whole ``prepare`` (body, deployment URL
  with ``api-version``, headers with Azure's ``api-key``), which is where
  Azure differs from OpenAI: the body is the ``openai`` adapter's own
  encoder's. (``openai-adapter``'s row is that encoder alone, so this row's
  ratio to it is Azure's whole cost per request, URL and headers included.)
- ``adapt-chunk``: the same Chat Completions SSE event as ``openai-adapter``'s
  row, through the Azure adapter's own stream translator.
"""

from __future__ import annotations

from typing import Any, cast

from benchmarks.codecs.adapters import OPS, ops
from benchmarks.codecs.openai_adapter import _EVENT, _HEAD
from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.backends.openai.azure import AzureOpenAIAdapter, openai_adapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.registry import backend_config, backend_problems
from flatgate.proxy.plumbing.config import ConfigError, Problems
from flatgate.proxy.wire.request.decode import Request

__all__ = ["CONFIG", "OPS", "adapt_chunk", "adapt_request", "adapter", "inputs"]

MODEL = "gpt-4o-mini"
# A deployment URL backend with an api-key (the older and longer of Azure's
# two URL forms: the deployment is the request's model, its URL made once).
CONFIG: dict[str, Any] = {
    "name": "azure",
    "protocol": "openai",
    "url": "https://contoso-eastus.openai.azure.com",
    "azure_api_version": "2024-10-21",
    "auth": "api-key",
    "api_key": "bench-key",
}


def adapter(entry: dict[str, Any] = CONFIG) -> AzureOpenAIAdapter:
    """The Azure adapter ``entry`` configures (checked as the config file's)."""
    problems = Problems()
    config = backend_config(entry, "backend", problems)
    if config is not None:
        problems += backend_problems(config, "backend")
    if config is None or problems:
        raise ConfigError(*problems)
    built = openai_adapter(cast(OpenAIConfig, config))
    assert isinstance(built, AzureOpenAIAdapter)
    return built


_ADAPTER = adapter()


def _prepare(req: Request) -> bytes:
    return _ADAPTER.prepare(Inbound(b"", lambda: req, "r-1", "")).body


_OPS, inputs = ops(_prepare, lambda: _ADAPTER.translator("r-1", MODEL), _HEAD, _EVENT)
adapt_request = _OPS.adapt_request
adapt_chunk = _OPS.adapt_chunk
