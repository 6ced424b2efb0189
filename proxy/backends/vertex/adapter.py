"""The ``vertex`` backend: Vertex AI, Claude through the Anthropic publisher
and Google's models through Gemini's.

Request: ``POST {url}/projects/{project}/locations/{location}/publishers/
{publisher}/models/{model}:{method}``, the model id (``model``, or the name
the request was routed by: ``claude-sonnet-4-5@20250929``,
``gemini-2.5-flash``) one path segment (``@`` kept, as Google's and
Anthropic's clients write it). The publisher is the one the backend's
``api`` picks for the model (``config.api_for``), one mapping per vendor:

- ``anthropic``: the ``anthropic`` adapter's Messages body
  (``anthropic.adapter.encode_request``: every mapping, ``cache_control``,
  thinking with its signatures, server tools, what is left out named) with
  ``anthropic_version`` (``vertex-2023-10-16``) first and no ``model`` (it
  is in the URL), as Anthropic's Vertex client writes it (``encode_claude``);
  ``stream`` stays, and the method says it too: ``:rawPredict`` whole
  (``accept: application/json``; the answer a Messages ``message``:
  ``AnthropicWhole``) or ``:streamRawPredict`` (server-sent events:
  ``AnthropicStream``), whole answers as the ``anthropic`` backend's (never
  for a ``max_tokens`` past ten minutes of output); the betas (the
  configured ``anthropic-beta``, the client's, those its parts need) as the
  ``anthropic-beta`` header;
- ``gemini``: the ``gemini`` protocol's body (``gemini.encode.encode_gemini``)
  to ``:generateContent`` (``GeminiWhole``) or
  ``:streamGenerateContent?alt=sse`` (``GeminiStream``).

Every request carries ``Authorization: Bearer`` with an access token from
Google's Application Default Credentials (``transport.google``), held by
``credentials`` (a ``Refreshing``, fetched off the request's path:
``prepare`` reads it without I/O, and raises ``CredentialsUnavailable``
before the first token, so the dispatcher tries the next backend), the
request id and the static ``headers``.

Refusals: Google's error ``status`` (``gemini.refusal``: a quota a 429 to
cool down for RetryInfo's delay, a bad argument the caller's, a credential
or permission the gateway's, an unavailable service another backend's
turn), else the status's class (Claude's own errors are Anthropic's shape).

Readiness: a TLS or TCP connect to the url's host (Vertex has no
unauthenticated health endpoint), or ``GET`` ``health_path`` when
configured; not ready before the first token.

Embeddings: none here (``embeddings`` false; Vertex's text embeddings are
``:predict``, not the Gemini API's ``embedContent``). No I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import msgspec

from flatgate.proxy.apis.anthropic_messages.extras import split_betas
from flatgate.proxy.backends.anthropic.adapter import LONGEST_WHOLE_TOKENS, encode_request
from flatgate.proxy.backends.anthropic.stream import AnthropicStream
from flatgate.proxy.backends.anthropic.whole import AnthropicWhole
from flatgate.proxy.backends.base import (
    Inbound,
    Outbound,
    Probe,
    Refusal,
    Translator,
    Untranslatable,
)
from flatgate.proxy.backends.gemini.encode import encode_gemini
from flatgate.proxy.backends.gemini.refusal import google_refusal
from flatgate.proxy.backends.gemini.stream import GeminiStream
from flatgate.proxy.backends.gemini.whole import GeminiWhole
from flatgate.proxy.backends.vertex.config import ANTHROPIC, VertexConfig, api_for
from flatgate.proxy.transport.credentials import Refreshing
from flatgate.proxy.transport.google import google_token
from flatgate.proxy.wire.embeddings import EmbeddingInput
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import BETA_HEADER, JSON, SSE

__all__ = ["NO_EMBEDDINGS", "VertexAdapter", "encode_claude", "model_url"]

NO_EMBEDDINGS = "the vertex protocol serves no embeddings (Vertex's are :predict)"
_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_encode = msgspec.json.Encoder().encode
_NO_MODEL = b'{"model":"",'


@functools.lru_cache(maxsize=8)
def _head(version: str) -> bytes:
    return b'{"anthropic_version":' + _encode(version) + b","


def encode_claude(
    req: Request,
    *,
    anthropic_version: str,
    default_max_tokens: int,
    betas: list[str],
    omitted: list[str],
    drop_unsupported: bool,
    whole: bool,
) -> bytes:
    """The Anthropic publisher's body for ``req`` (see the module docstring);
    the betas the request needs are appended to ``betas``."""
    messages = encode_request(
        req,
        model="",
        default_max_tokens=default_max_tokens,
        omitted=omitted,
        betas=betas,
        drop_unsupported=drop_unsupported,
        whole=whole,
    )
    head = _head(anthropic_version)
    # The encoder writes the model first: empty, it is these bytes, cut
    # without parsing the body again.
    if messages.startswith(_NO_MODEL):
        return head + messages[len(_NO_MODEL) :]
    members = _members(messages)  # another order: taken apart and written again
    del members["model"]
    return head + _encode(members)[1:]


def model_url(base: str, publisher: str, model: str, method: str) -> str:
    """The url of ``method`` on ``model`` of ``publisher`` below ``base``
    (``{url}/projects/{p}/locations/{l}/publishers/``)."""
    return f"{base}{publisher}/models/{quote(model, safe='@')}:{method}"


class VertexAdapter:
    """One ``vertex`` backend (see the module docstring)."""

    protocol = "vertex"
    translated = True
    embeddings = False

    def __init__(self, config: VertexConfig) -> None:
        root = config.url.rstrip("/")
        project, location = quote(config.project, safe=":"), quote(config.location, safe="")
        self.base = f"{root}/projects/{project}/locations/{location}/publishers/"
        self.model = config.model
        self.api = config.api
        self.whole = config.whole_answers
        self._drop = config.drop_unsupported
        self._version = config.anthropic_version
        self._default_max = config.default_max_tokens
        self.health = config.health_url()
        parts = urlsplit(config.url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        fetch = google_token(config.scopes, config.credentials_file)
        self._token: Refreshing[str] = Refreshing(
            f"backend {config.name} (Google credentials)", fetch
        )
        self.credentials: Refreshing[Any] | None = self._token
        self._seen = ""
        self._bearer: list[tuple[str, str]] = []
        self._routes: dict[str, tuple[bool, str, str]] = {}
        # The configured headers; anthropic-beta goes with the client's (Claude only).
        self.extra = list(config.headers.items())
        self._static = [(k, v) for k, v in self.extra if k.lower() != BETA_HEADER]
        self._betas: list[str] = []
        for name, value in self.extra:
            if name.lower() == BETA_HEADER:
                self._betas += split_betas(value)

    def _auth(self) -> list[tuple[str, str]]:
        """The token's header (``CredentialsUnavailable`` before the first);
        made once per token, not per request."""
        token = self._token.current()
        if token is not self._seen:
            self._seen = token
            self._bearer = [("authorization", "Bearer " + token)]
        return self._bearer

    def _route(self, model: str) -> tuple[bool, str, str]:
        """Whether ``model`` is Claude's, and its whole and streamed URLs:
        worked out once per model (a bounded cache), not per request."""
        found = self._routes.get(model)
        if found is None:
            if len(self._routes) > 256:
                self._routes.clear()
            if api_for(self.api, model) == ANTHROPIC:
                whole = model_url(self.base, "anthropic", model, "rawPredict")
                found = (True, whole, model_url(self.base, "anthropic", model, "streamRawPredict"))
            else:
                whole = model_url(self.base, "google", model, "generateContent")
                streamed = model_url(self.base, "google", model, "streamGenerateContent?alt=sse")
                found = (False, whole, streamed)
            self._routes[model] = found
        return found

    def _claude(self, model: str) -> bool:
        return self._route(model)[0]

    def prepare(self, call: Inbound[Request]) -> Outbound:
        req = call.request()
        model = self.model or req.model_name
        omitted: list[str] = []
        claude, whole_url, stream_url = self._route(model)
        if claude:
            budget = req.max_tokens or self._default_max
            whole = self.whole and not req.stream and budget <= LONGEST_WHOLE_TOKENS
            betas = list(self._betas)
            body = encode_claude(
                req,
                anthropic_version=self._version,
                default_max_tokens=self._default_max,
                betas=betas,
                omitted=omitted,
                drop_unsupported=self._drop,
                whole=whole,
            )
            headers = [
                ("content-type", JSON),
                ("accept", JSON if whole else SSE),
                ("x-request-id", call.request_id),
                *self._auth(),
                *self._static,
            ]
            if betas:
                headers.append((BETA_HEADER, ",".join(dict.fromkeys(betas))))
        else:
            whole = self.whole and not req.stream
            body = encode_gemini(req, omitted, self._drop)
            headers = [
                ("content-type", JSON),
                ("accept", JSON if whole else SSE),
                ("x-request-id", call.request_id),
                *self._auth(),
                *self._static,  # a configured anthropic-beta is Claude's alone
            ]
        url = whole_url if whole else stream_url
        return Outbound(url, headers, body, tuple(dict.fromkeys(omitted)), whole)

    def translator(self, request_id: str, model: str, whole: bool = False) -> Translator:
        model = self.model or model
        if self._claude(model):
            if whole:
                return AnthropicWhole(request_id, model)
            return AnthropicStream(request_id, model)
        if whole:
            return GeminiWhole(request_id, model)
        return GeminiStream(request_id, model)

    def prepare_embeddings(self, call: Inbound[EmbeddingInput]) -> Outbound:
        raise Untranslatable(NO_EMBEDDINGS)

    def embeddings_answer(
        self, body: bytes, request_id: str, model: str, max_bytes: int | None = None
    ) -> bytes:
        raise ValueError(NO_EMBEDDINGS)

    def refusal(self, status: int, headers: Mapping[str, str], body: bytes) -> Refusal:
        return google_refusal(status, headers, body)

    def probe(self) -> Probe:
        """A connect, or ``GET health_path``; ``CredentialsUnavailable``
        (not ready, said without asking) before the first token."""
        auth = self._auth()
        if self.health:
            return Probe(self.health, [*self.extra, *auth])
        return Probe(self._origin, [], connect_only=True)
