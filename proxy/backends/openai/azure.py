"""Azure OpenAI's conventions over the ``openai`` and ``openai-responses``
adapters (``AzureConventions``), and the ``openai`` protocol's adapter
factory (``openai_adapter``: a backend with Azure's keys gets
``AzureOpenAIAdapter``, any other ``OpenAIAdapter``; the Responses API's is
``responses.adapter.responses_adapter``).

The request body, the translators and everything else are the adapter's
own; Azure changes, from its keys (``backends.azure``):

- where a request goes (``AzureTarget``): the v1 API's URLs, or the
  deployment URLs with ``api-version``, the deployment the request's model
  when ``azure_deployment`` names none (``endpoint``: made once per model);
- the credential: ``api_key`` in the ``api-key`` header, or an Entra ID token
  read per request from ``credentials`` (without I/O: the service's refresher
  fetches it off the request's path; none yet is ``CredentialsUnavailable``,
  and the dispatcher tries the next backend);
- readiness: ``GET`` Azure's models endpoint, with the token when there is
  one (without it Azure's 401 says not ready);
- a refusal: Azure's content-filter 400 names the categories filtered
  (``azure.content_filter_message``); any other as OpenAI's.

A backend without Azure's keys never meets this module: it pays nothing
per request for Azure. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from flatgate.proxy.backends.azure import AzureKeys, AzureTarget, content_filter_message, is_azure
from flatgate.proxy.backends.base import Inbound, Outbound, Probe, Refusal, RefusalKind
from flatgate.proxy.backends.embeddings import EMBEDDINGS_PATH
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter, OpenAIConventions
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.transport.base import retry_after
from flatgate.proxy.wire.embeddings import EmbeddingInput

__all__ = ["AzureConventions", "AzureOpenAIAdapter", "openai_adapter"]

# The deployment URLs kept, one per model (``AzureConventions.endpoint``).
_ENDPOINTS = 256


class AzureConventions(OpenAIConventions):
    """Azure OpenAI's URLs, credential, readiness and content-filter refusal
    over an OpenAI adapter (see the module docstring); first in the bases of
    ``AzureOpenAIAdapter`` and ``AzureResponsesAdapter``."""

    def __init__(self, config: AzureKeys) -> None:
        self._azure_auth = config.auth  # read by credential(), which __init__ calls
        super().__init__(config)
        target = self.azure = AzureTarget(config)
        self.credentials = target.credentials
        self._models = target.url("/models", "")
        # "": known per request (the deployment is the request's model).
        self._embeddings = target.fixed(EMBEDDINGS_PATH) or ""
        # "": known per request (``endpoint``).
        self.url = target.fixed(self.path) or ""
        self._endpoints: dict[str, str] = {}

    def credential(self, key: str) -> list[tuple[str, str]]:
        if self._azure_auth == "api-key":
            return [("api-key", key)]
        return super().credential(key)

    def endpoint(self, model: str) -> str:
        """The deployment URL of ``model`` (made once per model: at most
        ``_ENDPOINTS`` kept, the routed names being the callers')."""
        url = self._endpoints.get(model)
        if url is None:
            if len(self._endpoints) >= _ENDPOINTS:
                self._endpoints.clear()
            url = self._endpoints[model] = self.azure.url(self.path, model)
        return url

    def prepare_embeddings(self, call: Inbound[EmbeddingInput]) -> Outbound:
        out = super().prepare_embeddings(call)
        if self._embeddings:
            return out
        url = self.azure.url(EMBEDDINGS_PATH, self.model or call.request().model_name)
        return Outbound(url, out.headers, out.body, out.omitted, out.whole)

    def headers(self, request_id: str, authorization: str, accept: str) -> list[tuple[str, str]]:
        headers = super().headers(request_id, authorization, accept)
        if self.credentials is not None:
            headers += self.azure.token()
        return headers

    def refusal(self, status: int, headers: Mapping[str, str], body: bytes) -> Refusal:
        if status == 400:
            filtered = content_filter_message(body)
            if filtered is not None:
                return Refusal(RefusalKind.REJECTED, status, filtered, retry_after(headers))
        return super().refusal(status, headers, body)

    def probe(self) -> Probe:
        """``GET`` Azure's models endpoint (or ``health_path``), with the
        token (``CredentialsUnavailable`` before the first fetch: the
        dispatcher's probe says not ready without asking)."""
        token = self.azure.token() if self.credentials is not None else []
        return Probe(self.health or self._models, [*self.auth, *token, *self.extra])


class AzureOpenAIAdapter(AzureConventions, OpenAIAdapter):
    """The ``openai`` adapter with Azure's conventions."""


def openai_adapter(config: OpenAIConfig) -> OpenAIAdapter:
    """The ``openai`` protocol's adapter for ``config``: Azure's when its keys say Azure."""
    return AzureOpenAIAdapter(config) if is_azure(config) else OpenAIAdapter(config)
