"""Admission control: what one worker takes on at once, bounded by configuration.

A worker admits a request only while it has fewer than ``max_in_flight``
requests in flight and holds fewer than ``max_buffered_bytes`` of request
bodies (counted from the declared ``Content-Length`` before the body is read,
so a body is refused before it is buffered). Above either bound the service
answers 503 with ``Retry-After`` (``wire.codes.SERVER_BUSY``): memory stays
bounded by configuration, never by what callers send. Per worker; no I/O.
"""

from __future__ import annotations

__all__ = ["Admission"]


class Admission:
    """Counters of one worker's requests in flight and body bytes held."""

    __slots__ = ("held", "in_flight", "max_bytes", "max_in_flight", "refused")

    def __init__(self, max_in_flight: int, max_bytes: int) -> None:
        self.max_in_flight = max_in_flight
        self.max_bytes = max_bytes
        self.in_flight = 0
        self.held = 0
        self.refused = 0

    def admit(self, nbytes: int) -> bool:
        """Take a request whose body is ``nbytes``; ``False`` (and nothing held)
        when that would pass a bound."""
        if self.in_flight >= self.max_in_flight or self.held + nbytes > self.max_bytes:
            self.refused += 1
            return False
        self.in_flight += 1
        self.held += nbytes
        return True

    def drop_body(self, nbytes: int) -> None:
        """The request's body is no longer held (the request goes on)."""
        self.held -= nbytes

    def done(self) -> None:
        """The request has ended."""
        self.in_flight -= 1
