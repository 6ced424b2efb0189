"""Calling backends: the transport interface and its one error tree.

Every upstream HTTP exchange the proxy (and the edge) makes goes through a
``Transport``. Each transport maps its client's exceptions to these, in its own
module and nowhere else::

    UpstreamError
    ├── UpstreamConnectError    nothing answered (refused, reset, DNS, connect timeout)
    ├── UpstreamTimeout         connected, but no byte within the read or total timeout
    └── UpstreamProtocolError   the peer broke HTTP or closed mid-response

Transports, by ``flatgate.proxy.transport.factory.make_transport(kind)``:

- ``"fast"`` (default): ``transport.pool``, an asyncio keep-alive pool on
  llhttp (httptools); see that module.
- ``"httpx"``: ``transport.reference``, over ``httpx.AsyncClient``.

Every transport takes the body as the caller's ``bytes`` object and sends it
as a fixed-length body (httpx sends only ``bytes``/``str`` that way).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Literal, Protocol

import msgspec

__all__ = [
    "Response",
    "Timeouts",
    "Transport",
    "TransportKind",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamProtocolError",
    "UpstreamTimeout",
]

TransportKind = Literal["fast", "httpx"]


class UpstreamError(Exception):
    """Root of every failure talking to a backend."""


class UpstreamConnectError(UpstreamError):
    """The backend could not be reached."""


class UpstreamTimeout(UpstreamError):
    """The backend was reached but did not answer in time."""


class UpstreamProtocolError(UpstreamError):
    """The backend broke HTTP or closed the connection mid-response."""


class Timeouts(msgspec.Struct, frozen=True):
    connect: float = 2.0
    # Longest wait for the response head, and between body pieces.
    read: float = 30.0
    # Longest whole exchange, head and body (None: none).
    total: float | None = None


class Response(Protocol):
    status: int

    @property
    def headers(self) -> Mapping[str, str]:
        """Lower-case header names."""
        ...

    def iter_bytes(self) -> AsyncIterator[bytes]:
        """Body pieces as they arrive."""
        ...

    async def read(self) -> bytes: ...

    def ready(self) -> bool:
        """Whether the next body read returns without waiting (a hint; may say no)."""
        ...

    async def aclose(self) -> None:
        """Release the connection (or abort it if the body was not read)."""
        ...


class Transport(Protocol):
    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes,
        headers: Sequence[tuple[str, str]],
        timeouts: Timeouts,
    ) -> Response:
        """Send a request; return once the response head arrived."""
        ...

    async def aclose(self) -> None: ...
