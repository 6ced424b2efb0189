"""Calling backends: one small transport interface, its errors, two transports.

Owns every upstream HTTP exchange the proxy (and the edge) makes. Foreign
client exceptions are mapped to ``UpstreamError`` here and nowhere else::

    UpstreamError
    ├── UpstreamConnectError    nothing answered (refused, reset, DNS, connect timeout)
    ├── UpstreamTimeout         connected, but no byte within the read or total timeout
    └── UpstreamProtocolError   the peer broke HTTP or closed mid-response

Transports, by ``make_transport(kind)``:

- ``"fast"`` (default): ``proxy.httpclient``, an asyncio keep-alive pool on
  llhttp (httptools); see that module.
- ``"httpx"``: ``httpx.AsyncClient``, the reference.

Every transport takes the body as the caller's ``bytes`` object and sends it
as a fixed-length body (httpx sends only ``bytes``/``str`` that way).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Literal, Protocol

import httpx
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
    "make_transport",
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


class _HttpxResponse:
    __slots__ = ("_deadline", "_resp", "headers", "status")

    def __init__(self, resp: httpx.Response, deadline: float | None) -> None:
        self._resp = resp
        self._deadline = deadline
        self.status = resp.status_code
        self.headers: Mapping[str, str] = {k.lower(): v for k, v in resp.headers.items()}

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._resp.aiter_raw():
                if self._deadline is not None and time.monotonic() > self._deadline:
                    raise UpstreamTimeout("total timeout exceeded while streaming")
                yield piece
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"backend read timed out: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise UpstreamProtocolError(f"backend response broke off: {exc!r}") from exc

    async def read(self) -> bytes:
        return b"".join([p async for p in self.iter_bytes()])

    def ready(self) -> bool:
        return False

    async def aclose(self) -> None:
        await self._resp.aclose()


class HttpxTransport:
    """The reference transport: a shared ``httpx.AsyncClient``."""

    def __init__(self, *, limit: int = 256) -> None:
        limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
        self._client = httpx.AsyncClient(limits=limits, timeout=None, trust_env=False)

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes,
        headers: Sequence[tuple[str, str]],
        timeouts: Timeouts,
    ) -> Response:
        deadline = None if timeouts.total is None else time.monotonic() + timeouts.total
        read = timeouts.read if timeouts.total is None else min(timeouts.read, timeouts.total)
        timeout = httpx.Timeout(connect=timeouts.connect, read=read, write=read, pool=read)
        req = self._client.build_request(
            method, url, content=body, headers=list(headers), timeout=timeout
        )
        try:
            resp = await self._client.send(req, stream=True)
        except httpx.ConnectError as exc:
            raise UpstreamConnectError(f"cannot connect to {url}: {exc!r}") from exc
        except httpx.ConnectTimeout as exc:
            raise UpstreamConnectError(f"connect to {url} timed out") from exc
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"{url} did not answer in time: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise UpstreamProtocolError(f"{url}: {exc!r}") from exc
        return _HttpxResponse(resp, deadline)

    async def aclose(self) -> None:
        await self._client.aclose()


def make_transport(kind: str = "fast", *, limit: int = 256) -> Transport:
    """A new transport of ``kind`` ("fast" or "httpx"); make one per event loop."""
    if kind == "httpx":
        return HttpxTransport(limit=limit)
    if kind == "fast":
        from proxy.httpclient import PoolTransport

        return PoolTransport(limit=limit)
    raise ValueError(f"unknown transport {kind!r}: expected 'fast' or 'httpx'")
