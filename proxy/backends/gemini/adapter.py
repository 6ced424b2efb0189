"""The ``gemini`` backend: Google's Gemini API.

Request: ``POST {url}/models/{model}:generateContent`` (``accept:
application/json``; the answer: ``GeminiWhole``) when the answer is asked
for whole (the client did not stream, ``whole_answers``), else
``:streamGenerateContent?alt=sse`` (``GeminiStream``); the model
(``model``, or the name the request was routed by) as the URL names it:
``gemini-2.5-flash`` is ``models/gemini-2.5-flash``, a name that begins
``models/`` or ``tunedModels/`` is taken as it is. The body is
``encode.encode_gemini``'s (every mapping, thought signatures back on their
parts, what is left out named). Headers: ``x-goog-api-key`` (the backend's
key), the request id, the caller's ``Authorization`` when the backend
forwards it, and the static ``headers``.

Embeddings: ``:embedContent`` for one input, ``:batchEmbedContents`` for
more (``embeddings.encode_embed``), the answer read by
``embeddings.read_embed``.

Refusals: Google's error ``status`` (``refusal.google_refusal``: a quota a
429 to cool down for RetryInfo's delay, a key the API does not take the
gateway's, a bad argument the caller's, an unavailable model another
backend's turn). Readiness: ``GET {url}/models?pageSize=1`` with the key
(the API's model list), or ``health_path``.

``countTokens`` is the API's too, but no client API the gateway serves asks
for it. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from flatgate.proxy.backends.base import Inbound, Outbound, Probe, Refusal, Translator
from flatgate.proxy.backends.gemini.config import GeminiConfig
from flatgate.proxy.backends.gemini.embeddings import encode_embed, read_embed
from flatgate.proxy.backends.gemini.encode import encode_gemini
from flatgate.proxy.backends.gemini.refusal import google_refusal
from flatgate.proxy.backends.gemini.stream import GeminiStream
from flatgate.proxy.backends.gemini.whole import GeminiWhole
from flatgate.proxy.backends.json_api import JsonAdapter
from flatgate.proxy.wire.embeddings import EmbeddingInput
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import JSON, SSE

__all__ = ["GeminiAdapter", "model_name"]

KEY_HEADER = "x-goog-api-key"
_STREAM = "streamGenerateContent?alt=sse"


def model_name(model: str) -> str:
    """The model as the Gemini API's URL names it (see the module docstring)."""
    if model.startswith(("models/", "tunedModels/")):
        return quote(model, safe="/@")
    return "models/" + quote(model, safe="@")


class GeminiAdapter(JsonAdapter):
    """One ``gemini`` backend (see the module docstring)."""

    protocol = "gemini"
    embeddings = True

    def __init__(self, config: GeminiConfig) -> None:
        super().__init__(config)
        self._names: dict[str, str] = {}

    def credential(self, key: str) -> list[tuple[str, str]]:
        return [(KEY_HEADER, key)]

    def _url(self, model: str, method: str) -> str:
        name = self._names.get(model)
        if name is None:
            if len(self._names) > 256:
                self._names.clear()
            name = self._names[model] = model_name(model)
        return f"{self.base}/{name}:{method}"

    def prepare(self, call: Inbound[Request]) -> Outbound:
        req = call.request()
        omitted: list[str] = []
        whole = self.whole_for(req)
        model = self.model or req.model_name
        body = encode_gemini(req, omitted, self._drop)
        url = self._url(model, "generateContent" if whole else _STREAM)
        headers = self.headers(call.request_id, call.authorization, JSON if whole else SSE)
        return Outbound(url, headers, body, tuple(dict.fromkeys(omitted)), whole)

    def translator(self, request_id: str, model: str, whole: bool = False) -> Translator:
        if whole:
            return GeminiWhole(request_id, self.model or model)
        return GeminiStream(request_id, self.model or model)

    def prepare_embeddings(self, call: Inbound[EmbeddingInput]) -> Outbound:
        req = call.request()
        omitted: list[str] = []
        model = self.model or req.model_name
        method, body = encode_embed(req, model=model, omitted=omitted, drop_unsupported=self._drop)
        headers = self.headers(call.request_id, call.authorization, JSON)
        return Outbound(self._url(model, method), headers, body, tuple(dict.fromkeys(omitted)))

    def embeddings_answer(
        self, body: bytes, request_id: str, model: str, max_bytes: int | None = None
    ) -> bytes:
        return read_embed(body, request_id=request_id, model=self.model or model,
                          max_bytes=max_bytes)  # fmt: skip

    def refusal(self, status: int, headers: Mapping[str, str], body: bytes) -> Refusal:
        return google_refusal(status, headers, body)

    def probe(self) -> Probe:
        if self.health:
            return super().probe()
        return Probe(f"{self.base}/models?pageSize=1", [*self.auth, *self.extra])
