"""Google's error answers as refusals: the Gemini API's and Vertex AI's.

Google's APIs answer an error as ``{"error": {"code", "message", "status",
"details"}}`` (``apis.gemini.answer.ErrorBody``; Vertex's streaming methods
as a one-element list of it),
``status`` the name of Google's canonical error code. What the gateway
does about it (``refusal``) is read from ``status``, where it says more than
the HTTP status:

- ``RESOURCE_EXHAUSTED``: a quota or rate limit: ``RATE_LIMITED``, to cool
  down for the ``RetryInfo`` detail's ``retryDelay`` (``"30s"``,
  ``"1.5s"``) when given, else ``Retry-After``;
- ``INVALID_ARGUMENT``, ``FAILED_PRECONDITION``, ``OUT_OF_RANGE``:
  ``REJECTED``, the caller's (a ``ErrorInfo`` detail whose reason is
  ``API_KEY_INVALID`` or ``API_KEY_SERVICE_BLOCKED``, a 400 from the Gemini API, is
  the gateway's key: ``AUTH``);
- ``UNAUTHENTICATED``, ``PERMISSION_DENIED``: ``AUTH``, the gateway's credential;
- ``UNAVAILABLE``, ``INTERNAL``, ``DEADLINE_EXCEEDED``, ``ABORTED``:
  ``UNAVAILABLE``, another backend's turn;
- any other (or no Google error: Claude's own errors on Vertex are
  Anthropic's shape): the HTTP status's class (``base.classify``).

The message is Google's, after its status (``RESOURCE_EXHAUSTED: Quota
exceeded ...``), or the body's ``error.message`` whatever its shape
(``json_api.error_message``). No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from flatgate.proxy.apis.gemini.answer import ErrorBody, ErrorStatus
from flatgate.proxy.backends.base import Refusal, RefusalKind, classify
from flatgate.proxy.backends.json_api import error_message
from flatgate.proxy.transport.base import MAX_RETRY_AFTER, retry_after

__all__ = ["RETRY_INFO", "google_refusal", "retry_delay"]

RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_KEY_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED", "API_KEY_EXPIRED"})
_KINDS = {
    "RESOURCE_EXHAUSTED": RefusalKind.RATE_LIMITED,
    "INVALID_ARGUMENT": RefusalKind.REJECTED,
    "FAILED_PRECONDITION": RefusalKind.REJECTED,
    "OUT_OF_RANGE": RefusalKind.REJECTED,
    "UNAUTHENTICATED": RefusalKind.AUTH,
    "PERMISSION_DENIED": RefusalKind.AUTH,
    "UNAVAILABLE": RefusalKind.UNAVAILABLE,
    "INTERNAL": RefusalKind.UNAVAILABLE,
    "DEADLINE_EXCEEDED": RefusalKind.UNAVAILABLE,
    "ABORTED": RefusalKind.UNAVAILABLE,
}


class _Detail(msgspec.Struct, gc=False):
    type: str = msgspec.field(default="", name="@type")
    retryDelay: str = ""
    reason: str = ""


_decode = msgspec.json.Decoder(ErrorBody | list[ErrorBody]).decode
_detail = msgspec.json.Decoder(_Detail).decode


def _status(body: bytes) -> ErrorStatus | None:
    try:
        said = _decode(body)
    except msgspec.DecodeError:  # not Google's shape (or not JSON)
        return None
    if isinstance(said, list):
        said = said[0] if said else ErrorBody()
    status: ErrorStatus = said.error
    return status


def _details(err: ErrorStatus) -> list[_Detail]:
    out = []
    for raw in err.details or ():
        try:
            out.append(_detail(raw))
        except msgspec.DecodeError:
            continue
    return out


def retry_delay(value: str) -> float | None:
    """A protobuf ``Duration``'s JSON (``"30s"``, ``"0.5s"``) in seconds."""
    if not value.endswith("s"):
        return None
    try:
        seconds = float(value[:-1])
    except ValueError:
        return None
    return min(seconds, MAX_RETRY_AFTER) if seconds >= 0 else None


def google_refusal(status: int, headers: Mapping[str, str], body: bytes) -> Refusal:
    """What a Google API's error answer means (see the module docstring)."""
    err = _status(body)
    if err is None or not err.status:
        return Refusal(classify(status), status, error_message(body), retry_after(headers))
    kind = _KINDS.get(err.status) or classify(status)
    wait = retry_after(headers)
    for detail in _details(err):
        if detail.type == RETRY_INFO and detail.retryDelay:
            wait = retry_delay(detail.retryDelay) or wait
        elif detail.type == _ERROR_INFO and detail.reason in _KEY_REASONS:
            kind = RefusalKind.AUTH
    text = err.message or "no message"
    return Refusal(kind, status, f"{err.status}: {text}", wait)
