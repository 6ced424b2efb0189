"""The edge's one error tree, and what every error answer carries.

Every failure the edge reports to a client is an ``EdgeError`` (or a subclass)
carrying a registered ``wire.codes.ErrorCode`` (its HTTP status and OpenAI
``type``), a message, the ``param`` it concerns, the seconds to wait before a
retry (``Retry-After``) and any more headers (a tenant's rate headers).
``body()`` renders OpenAI's shape, ``{"error": {"message", "type", "param",
"code"}}``; a client API with another shape renders its own
(``client_api.ClientApi.error_answer``). The headers every error answer
carries, whatever its shape, are ``error_headers``'s. The app turns errors
into responses in exactly one place. A message quotes what the caller sent
(a model or tool name) through ``shown``, at most ``ECHO_CHARS`` of it: a
megabyte of model name is not a megabyte of 404. No I/O.

The edge's upstream is the proxy: the transport's exceptions become
``ProxyFailed`` and ``ProxyTimedOut`` in ``proxy_link``, and nowhere else.

::

    EdgeError                internal_error (500), or the code it is given
    ├── InvalidRequest       invalid_request, invalid_json, unsupported_content_type (400)
    ├── AuthenticationFailed invalid_api_key, missing_api_key (401)
    │   └── InvalidToken     invalid_token (401): a JWT that does not verify
    ├── ModelNotFound        model_not_found (404)
    ├── NotFound             not_found (404)
    ├── MethodNotAllowed     method_not_allowed (405)
    ├── PayloadTooLarge      body_too_large (413)
    ├── ProxyFailed          proxy_unavailable, proxy_protocol_error, or the proxy's code (502)
    └── ProxyTimedOut        proxy_timeout, or the proxy's code (504)
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.transport.base import retry_after_value
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.codes import ErrorCode
from flatgate.proxy.wire.schema import JSON

__all__ = [
    "BUSY_RETRY_AFTER",
    "ECHO_CHARS",
    "AuthenticationFailed",
    "EdgeError",
    "InvalidRequest",
    "InvalidToken",
    "MethodNotAllowed",
    "ModelNotFound",
    "NotFound",
    "PayloadTooLarge",
    "ProxyFailed",
    "ProxyTimedOut",
    "error_headers",
    "shown",
    "shutting_down",
]


class _Detail(msgspec.Struct, omit_defaults=False):
    message: str
    type: str
    param: str | None
    code: str | None


class _Body(msgspec.Struct):
    error: _Detail


_encode = msgspec.json.Encoder().encode

# The most of a caller's text an error message quotes.
ECHO_CHARS = 256
# Seconds a client is told to wait when the edge itself is at a limit.
BUSY_RETRY_AFTER = 1.0


def shown(text: str) -> str:
    """``text`` as an error message quotes it: its first ``ECHO_CHARS``
    characters, and an ellipsis when there were more."""
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "\u2026"


class EdgeError(Exception):
    """Root of the edge's errors; each subclass has its default code."""

    default: ErrorCode = codes.INTERNAL_ERROR

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: ErrorCode | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.error_code = code or self.default
        self.status = status or self.error_code.status
        # Seconds the client should wait before trying again (Retry-After).
        self.retry_after = retry_after
        # More headers for the answer (a tenant's x-ratelimit-*).
        self.headers = headers or []

    @property
    def code(self) -> str:
        return self.error_code.code

    @property
    def type(self) -> str:
        return self.error_code.type

    @property
    def should_retry(self) -> bool:
        """False for a code a retry cannot fix (``x-should-retry: false``)."""
        return self.error_code.code not in codes.NOT_RETRYABLE

    def detail(self) -> dict[str, str | None]:
        """The inner ``error`` object (also what a mid-stream error event carries)."""
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}

    def body(self) -> bytes:
        """The JSON response body ``{"error": {...}}``."""
        return _encode(_Body(_Detail(self.message, self.type, self.param, self.code)))


class InvalidRequest(EdgeError):
    default = codes.INVALID_REQUEST


class AuthenticationFailed(EdgeError):
    default = codes.INVALID_API_KEY


class InvalidToken(AuthenticationFailed):
    default = codes.INVALID_TOKEN


class ModelNotFound(EdgeError):
    default = codes.MODEL_NOT_FOUND


class NotFound(EdgeError):
    default = codes.NOT_FOUND


class MethodNotAllowed(EdgeError):
    default = codes.METHOD_NOT_ALLOWED


class PayloadTooLarge(EdgeError):
    default = codes.BODY_TOO_LARGE


class ProxyFailed(EdgeError):
    """The proxy could not be reached, broke the protocol, or reported a
    failure (its own or a backend's)."""

    default = codes.PROXY_UNAVAILABLE


class ProxyTimedOut(EdgeError):
    """The proxy (or a backend behind it) did not answer in time."""

    default = codes.PROXY_TIMEOUT


def shutting_down() -> EdgeError:
    """What a request the drain ends is told (an HTTP 503 before the first
    event, an error event after it)."""
    return EdgeError(
        "The gateway is shutting down; retry the request.",
        code=codes.DRAINING,
        retry_after=1.0,
    )


def error_headers(
    err: EdgeError, request_id: str | None, allow: str = "POST"
) -> list[tuple[str, str]]:
    """The headers of ``err``'s answer, in every client API's shape: JSON,
    the request id when known, ``err``'s own (a tenant's rate headers),
    ``Retry-After`` (``retry_after_value``: whole seconds, rounded up),
    ``Allow`` (the path's methods) on a 405, ``x-should-retry: false`` for a
    code a retry cannot fix, and ``Connection: close`` while draining."""
    headers = [("content-type", JSON)]
    if request_id:
        headers.append(("x-request-id", request_id))
        # Anthropic's name for it, which its SDKs read (``_request_id``).
        headers.append(("request-id", request_id))
    headers += err.headers
    if err.retry_after is not None:
        headers.append(("retry-after", retry_after_value(err.retry_after)))
    if err.status == 405:
        headers.append(("allow", allow))
    if not err.should_retry:
        headers.append(("x-should-retry", "false"))
    if err.error_code is codes.DRAINING:
        headers.append(("connection", "close"))
    return headers
