"""The errors a client API's request is refused with, below the edge and the
backends: the edge's root, ``EdgeError``, and its 400, ``InvalidRequest``.

The vendor APIs' models (``proxy.apis``) raise these, so they are defined
here, below every layer that decodes a vendor API's request; the edge's
tree (``edge_translator.errors``) names them with its other errors. Every
failure carries a registered ``errors.codes.ErrorCode`` (its HTTP status and
OpenAI ``type``), a message, the ``param`` it concerns, the seconds to wait
before a retry (``Retry-After``) and any more headers. ``body()`` renders
OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``. A
message quotes what the caller sent (a model or tool name) through
``shown``, at most ``ECHO_CHARS`` of it. A 400 with Anthropic's ``details``
object is a ``DetailedRequestError``. No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.codes import ErrorCode

__all__ = ["ECHO_CHARS", "DetailedRequestError", "EdgeError", "InvalidRequest", "shown"]


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


class DetailedRequestError(InvalidRequest):
    """A 400 whose Anthropic error carries ``details`` (its ``error_code``
    and what else Anthropic documents for it)."""

    def __init__(self, message: str, *, param: str | None, details: dict[str, object]) -> None:
        super().__init__(message, param=param)
        self.details = details
