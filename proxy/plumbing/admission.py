"""Admission control: what one worker takes on at once, bounded by configuration.

A worker admits a request only while it has fewer than ``max_in_flight``
requests in flight and holds fewer than ``max_bytes`` of request bodies
(counted from the declared ``Content-Length`` before the body is read, so a
body is refused before it is buffered). Two shares of those bytes keep one
caller from taking them all:

- ``caller_bytes``: what one caller may hold at once (the edge names a caller
  by its tenant, the proxy by its address);
- ``connection_bytes``: what one connection may hold at once (an HTTP/2
  connection carries many requests; an HTTP/1.1 one, one at a time).

``admit`` answers which bound a request would pass (``Refusal``), or ``None``
and holds it; the services answer 503 (``errors.codes.SERVER_BUSY``) for the
worker's own bounds and 429 (``CALLER_BUSY``) for a share, both with
``Retry-After``. A body still arriving is bounded in time by the server
(``body.BodyPolicy``), so no hold outlives its timeouts. Per worker; no I/O.
"""

from __future__ import annotations

import enum
from typing import Final

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.codes import ErrorCode

__all__ = ["Admission", "Hold", "Refusal"]


class Refusal(enum.Enum):
    """The bound a request would pass."""

    IN_FLIGHT = "max_in_flight"
    BUFFERED = "max_buffered_bytes"
    CALLER = "max_buffered_bytes_per_caller"
    CONNECTION = "max_buffered_bytes_per_connection"

    @property
    def code(self) -> ErrorCode:
        """``CALLER_BUSY`` for a share, ``SERVER_BUSY`` for the worker's own bound."""
        return (
            codes.CALLER_BUSY if self in (Refusal.CALLER, Refusal.CONNECTION) else codes.SERVER_BUSY
        )

    @property
    def message(self) -> str:
        return _MESSAGES[self]


_MESSAGES: Final = {
    Refusal.IN_FLIGHT: "the server is at its limit of requests in flight (max_in_flight)",
    Refusal.BUFFERED: "the server holds its limit of request-body bytes (max_buffered_bytes)",
    Refusal.CALLER: (
        "this caller already holds its share of the server's request-body bytes "
        "(max_buffered_bytes_per_caller)"
    ),
    Refusal.CONNECTION: (
        "this connection already holds its share of the server's request-body bytes "
        "(max_buffered_bytes_per_connection)"
    ),
}


class Hold:
    """One admitted request's body bytes, and whose they are."""

    __slots__ = ("caller", "connection", "nbytes")

    def __init__(self, nbytes: int, caller: str | None, connection: str) -> None:
        self.nbytes = nbytes
        self.caller = caller
        self.connection = connection


class Admission:
    """Counters of one worker's requests in flight and body bytes held: in
    all, per caller and per connection (a caller or a connection holding
    nothing is forgotten)."""

    __slots__ = (
        "_by_caller",
        "_by_connection",
        "caller_bytes",
        "connection_bytes",
        "held",
        "in_flight",
        "max_bytes",
        "max_in_flight",
        "refused",
    )

    def __init__(
        self,
        max_in_flight: int,
        max_bytes: int,
        *,
        caller_bytes: int | None = None,
        connection_bytes: int | None = None,
    ) -> None:
        """``caller_bytes`` and ``connection_bytes``: the shares (``None``:
        all of ``max_bytes``)."""
        self.max_in_flight = max_in_flight
        self.max_bytes = max_bytes
        self.caller_bytes = max_bytes if caller_bytes is None else caller_bytes
        self.connection_bytes = max_bytes if connection_bytes is None else connection_bytes
        self.in_flight = 0
        self.held = 0
        self.refused = 0
        self._by_caller: dict[str, int] = {}
        self._by_connection: dict[str, int] = {}

    def admit(self, nbytes: int, caller: str | None = None, connection: str = "") -> Hold | Refusal:
        """Take a request whose body is ``nbytes``, of ``caller`` (``None``: a
        trusted caller, held to no share of its own) on ``connection``: its
        ``Hold``, or the ``Refusal`` (nothing held) when that would pass a
        bound."""
        refusal = (
            Refusal.IN_FLIGHT
            if self.in_flight >= self.max_in_flight
            else self._refusal(nbytes, caller, connection)
        )
        if refusal is not None:
            self.refused += 1
            return refusal
        self.in_flight += 1
        hold = Hold(0, caller, connection)
        self._add(hold, nbytes)
        return hold

    def grow(self, hold: Hold, nbytes: int) -> Refusal | None:
        """Hold ``nbytes`` more for an admitted request (what it makes of its
        body beyond the body: a stored chain it continues, copies it writes),
        until its body is dropped; the ``Refusal`` (nothing more held) when
        that would pass a byte bound."""
        refusal = self._refusal(nbytes, hold.caller, hold.connection)
        if refusal is not None:
            self.refused += 1
            return refusal
        self._add(hold, nbytes)
        return None

    def _refusal(self, nbytes: int, caller: str | None, connection: str) -> Refusal | None:
        if self.held + nbytes > self.max_bytes:
            return Refusal.BUFFERED
        if caller is not None and self._by_caller.get(caller, 0) + nbytes > self.caller_bytes:
            return Refusal.CALLER
        if self._by_connection.get(connection, 0) + nbytes > self.connection_bytes:
            return Refusal.CONNECTION
        return None

    def _add(self, hold: Hold, nbytes: int) -> None:
        if not nbytes:
            return
        hold.nbytes += nbytes
        self.held += nbytes
        if hold.caller is not None:
            self._by_caller[hold.caller] = self._by_caller.get(hold.caller, 0) + nbytes
        self._by_connection[hold.connection] = self._by_connection.get(hold.connection, 0) + nbytes

    def drop_body(self, hold: Hold) -> None:
        """The request's body is no longer held (the request goes on)."""
        nbytes = hold.nbytes
        if not nbytes:
            return
        hold.nbytes = 0
        self.held -= nbytes
        if hold.caller is not None:
            _take(self._by_caller, hold.caller, nbytes)
        _take(self._by_connection, hold.connection, nbytes)

    def done(self, hold: Hold) -> None:
        """The request has ended (its body, if still held, with it)."""
        self.drop_body(hold)
        self.in_flight -= 1

    def holding(self, caller: str) -> int:
        """Body bytes ``caller`` holds now."""
        return self._by_caller.get(caller, 0)


def _take(counts: dict[str, int], key: str, nbytes: int) -> None:
    left = counts[key] - nbytes
    if left:
        counts[key] = left
    else:
        del counts[key]
