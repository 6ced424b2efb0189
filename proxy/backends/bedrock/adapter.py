"""The ``bedrock`` backend: AWS Bedrock Runtime, through Converse or InvokeModel.

Request: ``POST {url}/model/{modelId}/{operation}``, the model id
(``model``, or the name the request was routed by: a model id, a
cross-region inference profile's id such as ``us.anthropic.claude-...``, or
an ARN) escaped as one path segment (``:`` and ``/`` too, as botocore
escapes it). The operation is the API the backend's ``api`` picks for the
model (``config.api_for``), whole or streamed as every JSON backend's
(``whole_answers``; an InvokeModel answer that may run past ten minutes is
streamed, as the ``anthropic`` backend's):

- Converse: ``/converse`` (``accept: application/json``; the answer:
  ``ConverseWhole``) or ``/converse-stream`` (AWS's event stream:
  ``ConverseStream``), the body ``converse.encode_converse``'s;
- InvokeModel: ``/invoke`` (the answer a Messages ``message``:
  ``AnthropicWhole``) or ``/invoke-with-response-stream``
  (``x-amzn-bedrock-accept: application/json``; ``invoke.InvokeStream``),
  the body ``invoke.encode_invoke``'s; the configured ``anthropic-beta``
  header goes into the body's ``anthropic_beta``, not out as a header (to
  Converse it goes as configured, a header);
- embeddings: ``/invoke`` with ``embeddings.encode_embeddings``'s body
  (Titan Text Embeddings, Cohere Embed), read by ``read_embeddings``.

Every request is signed (``auth.sign``: SigV4 by awscrt's signer, over the
headers above, the request id and the static ``headers``) with the
credentials ``credentials`` holds (a ``Refreshing`` over botocore's chain,
``transport.aws``, refreshed off the request's path: ``prepare`` reads them
without I/O, and raises ``CredentialsUnavailable`` when there are none, so
the dispatcher tries the next backend), or carries the Bedrock API key
(``config.bearer_of``: ``api_key``, ``api_key_env``, else
``AWS_BEARER_TOKEN_BEDROCK``).

Refusals: the error's kind is AWS's ``x-amzn-errortype`` header (its name,
before any ``:``) where it says one (``_KINDS``: throttling a 429 to cool
down for; validation the caller's 400; a credential or permission the
gateway's; a model not ready or a service unavailable another backend's
turn), else the status's class (``base.classify``); the message is the
body's ``message`` with the type's name before it; ``Retry-After`` when
given.

Readiness: a TLS or TCP connect to the url's host (AWS has no unauthenticated
health endpoint), or ``GET`` ``health_path`` when configured.

No I/O.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import msgspec

from flatgate.proxy.apis.anthropic_messages.extras import split_betas
from flatgate.proxy.backends.anthropic.adapter import LONGEST_WHOLE_TOKENS
from flatgate.proxy.backends.anthropic.whole import AnthropicWhole
from flatgate.proxy.backends.base import (
    Inbound,
    Outbound,
    Probe,
    Refusal,
    RefusalKind,
    Translator,
    classify,
)
from flatgate.proxy.backends.bedrock.auth import bearer, sign
from flatgate.proxy.backends.bedrock.config import (
    INVOKE,
    BedrockConfig,
    api_for,
    bearer_of,
    region_of,
)
from flatgate.proxy.backends.bedrock.converse import encode_converse
from flatgate.proxy.backends.bedrock.converse_stream import ConverseStream
from flatgate.proxy.backends.bedrock.converse_whole import ConverseWhole
from flatgate.proxy.backends.bedrock.embeddings import (
    encode_embeddings,
    family,
    read_embeddings,
)
from flatgate.proxy.backends.bedrock.eventstream import CONTENT_TYPE as EVENT_STREAM
from flatgate.proxy.backends.bedrock.invoke import InvokeStream, encode_invoke
from flatgate.proxy.transport.aws import AwsCredentials, aws_credentials
from flatgate.proxy.transport.base import retry_after
from flatgate.proxy.transport.credentials import Refreshing
from flatgate.proxy.wire.embeddings import EmbeddingInput
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import BETA_HEADER, JSON

__all__ = ["BedrockAdapter", "model_path"]

# AWS's error types (x-amzn-errortype) whose class the status alone misses
# or that say more than it: what the gateway does about each.
_KINDS = {
    "ThrottlingException": RefusalKind.RATE_LIMITED,
    "ServiceQuotaExceededException": RefusalKind.RATE_LIMITED,
    "TooManyRequestsException": RefusalKind.RATE_LIMITED,
    "ValidationException": RefusalKind.REJECTED,
    "AccessDeniedException": RefusalKind.AUTH,
    "UnrecognizedClientException": RefusalKind.AUTH,
    "InvalidSignatureException": RefusalKind.AUTH,
    "IncompleteSignatureException": RefusalKind.AUTH,
    "MissingAuthenticationTokenException": RefusalKind.AUTH,
    "ExpiredTokenException": RefusalKind.AUTH,
    "ServiceUnavailableException": RefusalKind.UNAVAILABLE,
    "ModelNotReadyException": RefusalKind.UNAVAILABLE,
    "ModelTimeoutException": RefusalKind.UNAVAILABLE,
    "ModelErrorException": RefusalKind.UNAVAILABLE,
    "InternalServerException": RefusalKind.UNAVAILABLE,
}


class _Error(msgspec.Struct, gc=False):
    message: str = ""
    Message: str = ""


_decode_error = msgspec.json.Decoder(_Error).decode


def _message(body: bytes) -> str:
    try:
        said = _decode_error(body)
        text = said.message or said.Message
    except msgspec.DecodeError:
        text = ""
    return text or body[:512].decode("utf-8", "replace").strip() or "no message"


def _without_default_port(url: str) -> str:
    """``url`` without a port its scheme implies: botocore signs ``host`` so
    (``bedrock-runtime...com``), and the transport sends the url's."""
    parts = urlsplit(url)
    if (parts.scheme, parts.port) in (("https", 443), ("http", 80)):
        return parts._replace(netloc=parts.netloc.rsplit(":", 1)[0]).geturl()
    return url


def model_path(base: str, model: str, operation: str) -> str:
    """The url of ``operation`` on ``model`` (escaped as one path segment)."""
    return f"{base}/model/{quote(model, safe='')}/{operation}"


class BedrockAdapter:
    """One ``bedrock`` backend (see the module docstring)."""

    protocol = "bedrock"
    translated = True
    embeddings = True

    def __init__(self, config: BedrockConfig, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.base = _without_default_port(config.url.rstrip("/"))
        self.model = config.model
        self.api = config.api
        self.region = region_of(config)
        self.whole = config.whole_answers
        self._drop = config.drop_unsupported
        self._version = config.anthropic_version
        self._default_max = config.default_max_tokens
        self.health = config.health_url()
        parts = urlsplit(config.url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        key = bearer_of(config, env)
        self._bearer = bearer(key) if key else []
        self.credentials: Refreshing[Any] | None = None
        self._aws: Refreshing[AwsCredentials] | None = None
        if not key:
            self._aws = Refreshing(
                f"backend {config.name} (AWS credentials)", aws_credentials(config.aws_profile)
            )
            self.credentials = self._aws
        # The configured headers; on InvokeModel, anthropic-beta goes into
        # the body instead (Converse and embeddings are sent it as configured).
        self.extra = list(config.headers.items())
        self._invoke_extra = [(k, v) for k, v in self.extra if k.lower() != BETA_HEADER]
        self._betas: list[str] = []
        for name, value in self.extra:
            if name.lower() == BETA_HEADER:
                self._betas += split_betas(value)

    def _send(self, url: str, headers: list[tuple[str, str]], body: bytes) -> list[tuple[str, str]]:
        """``headers`` with the request's credential: the key, or SigV4's."""
        if self._aws is None:
            return headers + self._bearer
        return sign("POST", url, headers, body, creds=self._aws.current(), region=self.region)

    def _invokes(self, model: str) -> bool:
        return api_for(self.api, model) == INVOKE

    def prepare(self, call: Inbound[Request]) -> Outbound:
        req = call.request()
        model = self.model or req.model_name
        omitted: list[str] = []
        headers = [("content-type", JSON)]
        extra = self.extra
        if self._invokes(model):
            extra = self._invoke_extra
            budget = req.max_tokens or self._default_max
            whole = self.whole and not req.stream and budget <= LONGEST_WHOLE_TOKENS
            body = encode_invoke(
                req,
                anthropic_version=self._version,
                default_max_tokens=self._default_max,
                betas=self._betas,
                omitted=omitted,
                drop_unsupported=self._drop,
            )
            if whole:
                operation = "invoke"
                headers.append(("accept", JSON))
            else:
                operation = "invoke-with-response-stream"
                headers += [("accept", EVENT_STREAM), ("x-amzn-bedrock-accept", JSON)]
        else:
            whole = self.whole and not req.stream
            body = encode_converse(req, omitted, self._drop, max_tokens_default=None)
            operation = "converse" if whole else "converse-stream"
            headers.append(("accept", JSON if whole else EVENT_STREAM))
        url = model_path(self.base, model, operation)
        headers.append(("x-request-id", call.request_id))
        headers += extra
        sent = self._send(url, headers, body)
        return Outbound(url, sent, body, tuple(dict.fromkeys(omitted)), whole)

    def translator(self, request_id: str, model: str, whole: bool = False) -> Translator:
        model = self.model or model
        if self._invokes(model):
            if whole:
                return AnthropicWhole(request_id, model)
            return InvokeStream(request_id, model)
        if whole:
            return ConverseWhole(request_id, model)
        return ConverseStream(request_id, model)

    def prepare_embeddings(self, call: Inbound[EmbeddingInput]) -> Outbound:
        req = call.request()
        model = self.model or req.model_name
        omitted: list[str] = []
        body = encode_embeddings(req, model=model, omitted=omitted, drop_unsupported=self._drop)
        url = model_path(self.base, model, "invoke")
        headers = [("content-type", JSON), ("accept", JSON), ("x-request-id", call.request_id)]
        headers += self.extra
        sent = self._send(url, headers, body)
        return Outbound(url, sent, body, tuple(dict.fromkeys(omitted)))

    def embeddings_answer(
        self, body: bytes, request_id: str, model: str, max_bytes: int | None = None
    ) -> bytes:
        model = self.model or model
        return read_embeddings(
            body, kind=family(model), request_id=request_id, model=model, max_bytes=max_bytes
        )

    def refusal(self, status: int, headers: Mapping[str, str], body: bytes) -> Refusal:
        name = headers.get("x-amzn-errortype", "").partition(":")[0].strip()
        kind = _KINDS.get(name) or classify(status)
        text = _message(body)
        return Refusal(kind, status, f"{name}: {text}" if name else text, retry_after(headers))

    def probe(self) -> Probe:
        """A connect, or ``GET health_path``; ``CredentialsUnavailable``
        (not ready, said without asking) before SigV4's credentials are
        fetched: a request would find none either."""
        if self._aws is not None:
            self._aws.current()
        if self.health:
            return Probe(self.health, [*self.extra, *self._bearer])
        return Probe(self._origin, [], connect_only=True)
