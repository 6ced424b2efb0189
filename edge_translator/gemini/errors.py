"""flatgate's errors in Google's shape: ``{"error": {"code", "message",
"status", "details"}}``, the one model of it (``apis.gemini.answer.ErrorBody``).

``code`` is the HTTP status the error is answered with (the status the other
client APIs answer it with: one status per ``errors.codes`` code); ``status``
is Google's canonical name for that status (``STATUSES``: 400
``INVALID_ARGUMENT``, 401 ``UNAUTHENTICATED``, 403 ``PERMISSION_DENIED``,
404 ``NOT_FOUND``, 409 ``ABORTED``, 429 ``RESOURCE_EXHAUSTED``, 499
``CANCELLED``, 501 ``UNIMPLEMENTED``, 502 and 503 ``UNAVAILABLE``, 504
``DEADLINE_EXCEEDED``; any other below 500 ``FAILED_PRECONDITION``, from 500
up ``INTERNAL``). ``details`` holds what Google's own errors carry and its
clients read: a ``BadRequest`` detail naming the field of a 400 that has
a ``param``, a ``RetryInfo`` with the ``retryDelay`` of an error
that says when to retry (the ``Retry-After`` header says it too), and an
``ErrorInfo`` with flatgate's own code as its ``reason``.
``error_event`` is the ``data:`` event that ends a begun SSE stream; the
JSON array stream's last element is ``error_element``. No I/O.
"""

from __future__ import annotations

import math

import msgspec

from flatgate.proxy.apis.gemini.answer import ErrorBody, ErrorStatus
from flatgate.proxy.errors.root import FlatgateError

__all__ = ["STATUSES", "error_body", "error_element", "error_event", "status_name"]

STATUSES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_TYPE = "type.googleapis.com/google.rpc."
_encode = msgspec.json.Encoder().encode


def status_name(status: int) -> str:
    """Google's canonical status name for an HTTP status."""
    name = STATUSES.get(status)
    if name is None:
        name = "FAILED_PRECONDITION" if status < 500 else "INTERNAL"
    return name


def _details(err: FlatgateError) -> list[msgspec.Raw]:
    out = [
        msgspec.Raw(
            _encode({"@type": _TYPE + "ErrorInfo", "reason": err.code.code, "domain": "flatgate"})
        )
    ]
    if err.param and err.status == 400:
        violation = {"field": err.param, "description": err.message}
        out.append(
            msgspec.Raw(_encode({"@type": _TYPE + "BadRequest", "fieldViolations": [violation]}))
        )
    if err.retry_after is not None:
        delay = f"{max(1, math.ceil(err.retry_after))}s"
        out.append(msgspec.Raw(_encode({"@type": _TYPE + "RetryInfo", "retryDelay": delay})))
    return out


def _body(err: FlatgateError) -> bytes:
    status = err.status
    return _encode(ErrorBody(ErrorStatus(status, err.message, status_name(status), _details(err))))


def error_body(err: FlatgateError, request_id: str | None = None) -> tuple[int, bytes]:
    """The status and JSON body of an error before the first byte."""
    return err.status, _body(err)


def error_event(err: FlatgateError) -> bytes:
    """The SSE event that ends a begun ``alt=sse`` stream with ``err``."""
    return b"data: " + _body(err) + b"\r\n\r\n"


def error_element(err: FlatgateError) -> bytes:
    """The element that ends a begun JSON array stream with ``err``, with
    the array's close."""
    return b",\r\n" + _body(err) + b"]"
