"""flatgate's errors in Anthropic's shape: ``{"type": "error", "error": {"type",
"message"}}``, with Anthropic's status and type for each.

Owns the one mapping from an ``FlatgateError`` (a registered ``errors.codes`` code
and the status it is answered with) to what an Anthropic client expects: the
documented status/type pairs (``TYPES``), keyed by status, so that every code
the registry holds, today's and tomorrow's, has its Anthropic type; and the
codes answered with another status than their own (``OVERLOADED``: a gateway
or backends at capacity is Anthropic's ``overloaded_error``, 529, which its
SDKs retry). A status without a pair of its own is ``invalid_request_error``
below 500 (as Anthropic does for "other 4XX status codes") and ``api_error``
from 500 up. ``error_event`` is what a failure after the stream began
becomes. An error with Anthropic's ``details`` object (``error.details.error_code``,
which the SDKs map to their own exception classes: ``thread_unsupported_request``)
is a ``DetailedRequestError``. The body is the Messages API's own
``events.ErrorBody`` (the one the ``anthropic`` backend reads). No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.anthropic_messages.events import ErrorBody, ErrorDetail
from flatgate.proxy.apis.errors import DetailedRequestError
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError

__all__ = [
    "OVERLOADED",
    "TYPES",
    "DetailedRequestError",
    "anthropic_error",
    "error_body",
    "error_event",
]

# Anthropic's documented statuses and error types.
TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
# Codes that mean "at capacity, retry shortly": 529 overloaded_error (their
# own status, 503, is what the OpenAI API and load balancers are told).
OVERLOADED = frozenset(
    {codes.BACKENDS_BUSY.code, codes.SERVER_BUSY.code, codes.POOL_EXHAUSTED.code}
)


_encode = msgspec.json.Encoder().encode


def anthropic_error(err: FlatgateError) -> tuple[int, str]:
    """The status and Anthropic error type ``err`` is answered with."""
    status = 529 if err.code.code in OVERLOADED else err.status
    kind = TYPES.get(status)
    if kind is None:
        kind = "invalid_request_error" if status < 500 else "api_error"
    return status, kind


def error_body(err: FlatgateError, request_id: str | None = None) -> tuple[int, bytes]:
    """The status and JSON body of an error before the first byte."""
    status, kind = anthropic_error(err)
    details = err.details if isinstance(err, DetailedRequestError) else None
    return status, _encode(ErrorBody(ErrorDetail(kind, err.message, details), request_id))


def error_event(err: FlatgateError) -> bytes:
    """The SSE event that ends a stream with ``err`` (the SDKs raise it)."""
    _, kind = anthropic_error(err)
    return b"event: error\ndata: " + _encode(ErrorBody(ErrorDetail(kind, err.message))) + b"\n\n"
