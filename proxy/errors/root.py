"""``FlatgateError``: the one error root both services raise. No I/O.

An error carries a registered ``ErrorCode`` (its HTTP status and OpenAI
``type``), a message, the ``param`` it concerns, the status it is answered
with (the code's own unless a backend's is passed through), the seconds to
wait before a retry (``Retry-After``), any more headers (a tenant's rate
headers) and, when a backend's own JSON error is passed through, its
``raw`` body. Each client API renders it in its own shape (the proxy's
``service.errors.answer_of``, the edge's renderers); a subclass only sets
the code it carries by default.

The lower layers' exceptions derive from it, each with the code it carries
by default (a store that does not answer, a body that stops arriving); only
the wire layer's ``MalformedBuffer`` and ``MalformedFrame``, below this
module, do not (docs/design.md, "Errors").
"""

from __future__ import annotations

from typing import ClassVar

from flatgate.proxy.errors.codes import INTERNAL_ERROR, NOT_RETRYABLE, ErrorCode

__all__ = ["FlatgateError"]


class FlatgateError(Exception):
    """An error flatgate answers: its code (``default`` unless given), a
    message, the ``param`` it concerns, its status, ``retry_after``
    seconds, more ``headers`` and a backend's ``raw`` JSON body."""

    default: ClassVar[ErrorCode] = INTERNAL_ERROR

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        param: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        headers: list[tuple[str, str]] | None = None,
        raw: bytes = b"",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: ErrorCode = code or self.default
        self.param = param
        self.status = status or self.code.status
        # Seconds the caller should wait before trying again (Retry-After).
        self.retry_after = retry_after
        # More headers for the answer (a tenant's x-ratelimit-*).
        self.headers = headers or []
        # A backend's own JSON error body, passed through.
        self.raw = raw

    @property
    def type(self) -> str:
        """The OpenAI error ``type`` of its code."""
        return self.code.type

    @property
    def should_retry(self) -> bool:
        """Whether trying again may help (``False``, answered as
        ``x-should-retry: false``: the gateway's own configuration is
        wrong; see ``codes.NOT_RETRYABLE``)."""
        return self.code.code not in NOT_RETRYABLE
