"""The stub's Vertex AI: Claude through the Anthropic publisher, Google's
models through Gemini's, below ``/v1/projects/{project}/locations/{location}`` (or ``/v1beta1/``,
which google-genai's Vertex AI mode asks).

Endpoints, a ``Wire`` each (``VertexWire.endpoints``; the stub's server
matches each ``{name}`` segment and gives the wire the path, decoded, as the
``:path`` pseudo-header):

- ``.../publishers/anthropic/models/{model}:rawPredict`` and
  ``:streamRawPredict``: the Messages body as Vertex takes it: it must carry
  ``anthropic_version`` ``vertex-2023-10-16`` (or a dated Messages API
  version, which the anthropic SDK's ``AnthropicVertex`` sends) and must not
  carry ``model``
  (it is the URL's); the rest is read by the ``anthropic`` stub's own parsing
  (``stub_request.decode_messages_request``, ``to_stub_request``, with the
  ``anthropic-beta`` header) and answered by its rendering
  (``AnthropicWire``: a ``message``, or its server-sent events when the body
  says ``stream``), thinking and its signatures included;
- ``.../publishers/google/models/{model}:generateContent`` and
  ``:streamGenerateContent`` (``?alt=sse``): the ``gemini`` stub's
  (``gemini.stub``), with the URL's model.

Errors are Google's (``{"error": {"code", "message", "status"}}``,
``apis.gemini.answer.ErrorBody``), but for Claude's own overload (its
``overloaded_error``, a 529, which Vertex passes on). The faults:
``rate_limit`` a 429 ``RESOURCE_EXHAUSTED`` with a ``RetryInfo`` delay of
2 s (no ``Retry-After`` header, as Google's), ``overloaded`` Claude's 529
or Gemini's 503 ``UNAVAILABLE``, ``auth`` a 403 ``PERMISSION_DENIED``,
``reject`` a 400 ``INVALID_ARGUMENT``, ``fail`` and a whole answer's
``error`` a 500 ``INTERNAL``; a stream's ``error`` the publisher's own.

Authorization, with ``[stub] api_key`` set: ``Authorization: Bearer
<token>``, the token the key itself or ``<key>.<anything>`` (the tokens a
test's token endpoint hands out, each refresh a new one); none is a 401
``UNAUTHENTICATED``, another a 401 too. No I/O.
"""

from __future__ import annotations

import dataclasses
import hmac
import re

import msgspec

from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.anthropic.stub_request import (
    Invalid,
    decode_messages_request,
    to_stub_request,
)
from flatgate.proxy.backends.dialect import HeaderFn, Rejected, Reply, StubRequest
from flatgate.proxy.backends.gemini.stub import (
    GenerateWire,
    google_error,
    google_fault,
    sse_only,
)
from flatgate.proxy.backends.gemini.stub_wire import parse_gemini
from flatgate.proxy.backends.vertex.config import ANTHROPIC_VERSION

__all__ = ["PREFIX", "VertexWire"]

# Every endpoint's path below the API's version.
PREFIX = "/{version}/projects/{project}/locations/{location}/publishers/"
_TARGET = re.compile(
    r"/v1(?:beta1)?/projects/[^/]+/locations/[^/]+/publishers/([^/]+)/models/(.+):(\w+)"
)
# A dated Messages API version (what the anthropic SDK's AnthropicVertex
# sends: its own API version) is taken too.
_DATED = re.compile(r"\d{4}-\d{2}-\d{2}")
_enc = msgspec.json.encode
_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def _invalid(message: str) -> Rejected:
    return Rejected(google_error(400, message))


def target(header: HeaderFn) -> tuple[str, str, str]:
    """The URL's publisher, model (with any fault suffix) and method."""
    m = _TARGET.fullmatch(header(":path") or "")
    return (m.group(1), m.group(2), m.group(3)) if m else ("", "", "")


def _route(method: str, path: str) -> Reply:
    if _TARGET.fullmatch(path):
        return google_error(404, f"Method {method} on {path} is not found")
    return google_error(404, f"The requested URL {path} was not found on this server.")


def authorize(header: HeaderFn, api_key: str) -> Reply | None:
    """A bearer token that is the key, or begins ``<key>.`` (see the module docstring)."""
    scheme, _, token = (header("authorization") or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and (
        hmac.compare_digest(token, api_key) or token.startswith(api_key + ".")
    ):
        return None
    if not scheme:
        return google_error(
            401,
            "Request is missing required authentication credential. Expected OAuth 2 access "
            "token, login cookie or other valid authentication credential.",
        )
    return google_error(
        401, "Request had invalid authentication credentials. Expected OAuth 2 access token."
    )


def fault_reply(fault: str, *, claude: bool) -> Reply:
    """A ``BEFORE_HEAD`` fault's answer: Google's (``gemini.stub.google_fault``),
    but Claude's own overload."""
    if fault == "overloaded" and claude:
        return AnthropicWire().fault("overloaded", _NONE)
    return google_fault(fault)


_NONE = StubRequest("", "", (), 0, "", False)


class ClaudeWire(AnthropicWire):
    """``.../publishers/anthropic/models/{model}:rawPredict``."""

    path = PREFIX + "anthropic/models/{model}:rawPredict"

    def route(self, method: str, path: str) -> Reply:
        return _route(method, path)

    def authorize(self, header: HeaderFn, api_key: str) -> Reply | None:
        return authorize(header, api_key)

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        _, model, _ = target(header)
        try:
            fields = _members(body)
        except msgspec.DecodeError:
            raise _invalid("Invalid JSON payload received.") from None
        if "model" in fields:
            raise _invalid("model: Extra inputs are not permitted (the model is the URL's)")
        version = fields.pop("anthropic_version", None)
        try:
            named = "" if version is None else msgspec.json.decode(version, type=str)
        except msgspec.ValidationError:
            named = ""
        if named != ANTHROPIC_VERSION and not _DATED.fullmatch(named):
            said = "missing" if version is None else bytes(version).decode(errors="replace")
            raise _invalid(f"anthropic_version: expected {ANTHROPIC_VERSION!r}, got {said}")
        try:
            parsed = decode_messages_request(_enc({"model": model, **fields}))
            req = to_stub_request(
                parsed, header("x-request-id") or "", header("anthropic-beta") or ""
            )
        except Invalid as exc:
            raise _invalid(str(exc)) from None
        if self.always_streams and not req.stream:
            req = dataclasses.replace(req, stream=True)
        return req

    def fault(self, fault: str, req: StubRequest) -> Reply:
        return fault_reply(fault, claude=True)

    def failed(self, req: StubRequest, header: HeaderFn) -> Reply:
        return google_error(500, "Internal error encountered. (stub fault: error)")


class ClaudeStreamWire(ClaudeWire):
    """``.../publishers/anthropic/models/{model}:streamRawPredict``."""

    path = PREFIX + "anthropic/models/{model}:streamRawPredict"
    always_streams = True


class GoogleWire(GenerateWire):
    """``.../publishers/google/models/{model}:generateContent``: the
    ``gemini`` stub's, below Vertex's path, with its bearer token."""

    path = PREFIX + "google/models/{model}:generateContent"

    def route(self, method: str, path: str) -> Reply:
        return _route(method, path)

    def authorize(self, header: HeaderFn, api_key: str) -> Reply | None:
        return authorize(header, api_key)

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        _, model, _ = target(header)
        return parse_gemini(body, model=model, request_id=header("x-request-id") or "",
                            stream=self.always_streams)  # fmt: skip


class GoogleStreamWire(GoogleWire):
    """``.../publishers/google/models/{model}:streamGenerateContent?alt=sse``."""

    path = PREFIX + "google/models/{model}:streamGenerateContent"
    always_streams = True

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        sse_only(header)
        return super().parse(body, header)


class VertexWire(ClaudeWire):
    """The ``vertex`` protocol's stub: its endpoints (the first is also
    what the server asks of the protocol's wire itself)."""

    def __init__(self) -> None:
        self.endpoints: tuple[AnthropicWire | GenerateWire, ...] = (
            ClaudeWire(),
            ClaudeStreamWire(),
            GoogleWire(),
            GoogleStreamWire(),
        )
