"""The edge's one error tree, rendered in OpenAI's error shape.

Every failure the edge reports to a client is an ``EdgeError`` (or a subclass)
carrying a registered ``wire.codes.ErrorCode`` (its HTTP status and OpenAI
``type``), a message and the ``param`` it concerns; ``body()`` renders
``{"error": {"message", "type", "param", "code"}}``. The app turns these into
responses in exactly one place. A message quotes what the caller sent (a
model or tool name) through ``shown``, at most ``ECHO_CHARS`` of it: a
megabyte of model name is not a megabyte of 404. No I/O.

::

    EdgeError                internal_error (500)
    ├── InvalidRequest       invalid_request, invalid_json, unsupported_content_type (400)
    ├── AuthenticationFailed invalid_api_key, missing_api_key (401)
    │   └── InvalidToken     invalid_token (401): a JWT that does not verify
    ├── ModelNotFound        model_not_found (404)
    ├── NotFound             not_found (404)
    ├── MethodNotAllowed     method_not_allowed (405)
    ├── PayloadTooLarge      body_too_large (413)
    ├── UpstreamFailed       proxy_unavailable, proxy_protocol_error, or the proxy's code (502)
    └── UpstreamTimeout      proxy_timeout, or the proxy's code (504)
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.wire import codes
from flatgate.proxy.wire.codes import ErrorCode

__all__ = [
    "ECHO_CHARS",
    "AuthenticationFailed",
    "EdgeError",
    "InvalidRequest",
    "InvalidToken",
    "MethodNotAllowed",
    "ModelNotFound",
    "NotFound",
    "PayloadTooLarge",
    "UpstreamFailed",
    "UpstreamTimeout",
    "shown",
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


class UpstreamFailed(EdgeError):
    default = codes.PROXY_UNAVAILABLE


class UpstreamTimeout(EdgeError):
    default = codes.PROXY_TIMEOUT
