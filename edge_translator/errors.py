"""The edge's errors, and what every error answer carries.

Every failure the edge reports to a client is a ``FlatgateError``
(``proxy.errors.root``, flatgate's one root) or one of the subclasses here,
each with the registered code it carries by default (``errors.codes``: its
HTTP status and OpenAI ``type``), a message, the ``param`` it concerns, the
seconds to wait before a retry (``Retry-After``) and any more headers (a
tenant's rate headers). Each client API renders it in its own shape
(``client_api.ClientApi.error_answer``); the headers every error answer
carries, whatever its shape, are ``error_headers``'s. The app turns errors
into responses in exactly one place. A message quotes what the caller sent
(a model or tool name) through ``shown``, at most ``ECHO_CHARS`` of it: a
megabyte of model name is not a megabyte of 404. No I/O.

The 400 (``InvalidRequest``) and ``shown`` are defined below the edge, in
``proxy.apis.errors``, so that the vendor APIs' models (``proxy.apis``)
raise them; this module names them with the rest.

The edge's upstream is the proxy: the transport's exceptions become
``ProxyFailed`` and ``ProxyTimedOut`` in ``proxy_link``, and nowhere else;
an error chunk in the proxy's answer becomes one in ``chunk_error``, the one
step every client API's renderer takes before it renders the error in its
own shape (an SSE event, a whole answer's error).

::

    FlatgateError            internal_error (500), or the code it is given
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

from flatgate.proxy.apis.errors import ECHO_CHARS, InvalidRequest, shown
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.transport.base import retry_after_value
from flatgate.proxy.wire.chunk.frames import ChunkError
from flatgate.proxy.wire.schema import JSON

__all__ = [
    "BUSY_RETRY_AFTER",
    "ECHO_CHARS",
    "AuthenticationFailed",
    "InvalidRequest",
    "InvalidToken",
    "MethodNotAllowed",
    "ModelNotFound",
    "NotFound",
    "PayloadTooLarge",
    "ProxyFailed",
    "ProxyTimedOut",
    "chunk_error",
    "error_headers",
    "shown",
    "shutting_down",
]


# Seconds a client is told to wait when the edge itself is at a limit.
BUSY_RETRY_AFTER = 1.0


class AuthenticationFailed(FlatgateError):
    default = codes.INVALID_API_KEY


class InvalidToken(AuthenticationFailed):
    default = codes.INVALID_TOKEN


class ModelNotFound(FlatgateError):
    default = codes.MODEL_NOT_FOUND


class NotFound(FlatgateError):
    default = codes.NOT_FOUND


class MethodNotAllowed(FlatgateError):
    default = codes.METHOD_NOT_ALLOWED


class PayloadTooLarge(FlatgateError):
    default = codes.BODY_TOO_LARGE


class ProxyFailed(FlatgateError):
    """The proxy could not be reached, broke the protocol, or reported a
    failure (its own or a backend's)."""

    default = codes.PROXY_UNAVAILABLE


class ProxyTimedOut(FlatgateError):
    """The proxy (or a backend behind it) did not answer in time."""

    default = codes.PROXY_TIMEOUT


def chunk_error(error: ChunkError | None, default: str = "upstream failed") -> FlatgateError:
    """The ``FlatgateError`` for an error chunk: its code's status (504 for a
    timeout), 502 for a code this flatgate does not know."""
    code = codes.peer_code(error.code, 502) if error and error.code else codes.PROXY_PROTOCOL_ERROR
    message = error.message if error and error.message else default
    if code.status == 504:
        return ProxyTimedOut(message, code=code)
    return ProxyFailed(message, code=code, status=502)


def shutting_down() -> FlatgateError:
    """What a request the drain ends is told (an HTTP 503 before the first
    event, an error event after it)."""
    return FlatgateError(
        "The gateway is shutting down; retry the request.",
        code=codes.DRAINING,
        retry_after=1.0,
    )


def error_headers(
    err: FlatgateError, request_id: str | None, allow: str = "POST"
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
    if err.code is codes.DRAINING:
        headers.append(("connection", "close"))
    return headers
