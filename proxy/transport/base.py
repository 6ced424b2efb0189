"""Calling backends: the transport interface and its one error tree.

Every upstream HTTP exchange the proxy (and the edge) makes goes through a
``Transport``: ``await transport.request(Upstream(method, url, body=...,
headers=..., timeouts=..., tls=...))`` returns a ``Response`` once its head
arrived. The caller builds the ``Upstream`` once per attempt (the dispatcher
per backend tried, the edge per request to the proxy). Each transport maps
its client's exceptions to these, in its own module and nowhere else::

    UpstreamError
    ├── UpstreamConnectError    nothing answered (refused, reset, DNS, connect timeout)
    ├── UpstreamPoolTimeout     no free pooled connection within the pool timeout
    │                           (the backend was never asked: not its failure)
    ├── UpstreamTimeout         connected, but no byte within the read or total timeout
    └── UpstreamProtocolError   the peer broke HTTP or closed mid-response

Transports, by ``flatgate.proxy.transport.factory.make_transport(kind)``:

- ``"fast"`` (default): ``transport.fast``, an asyncio keep-alive pool on
  llhttp (httptools); see that module.
- ``"httpx"``: ``transport.reference``, over ``httpx.AsyncClient``.

Every transport takes the body as the caller's ``bytes`` object and sends it
as a fixed-length body (httpx sends only ``bytes``/``str`` that way).

``Retry-After`` has one rule both ways: ``retry_after`` reads a backend's,
``retry_after_value`` writes flatgate's own.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Literal, Protocol

import msgspec

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.digits import read_decimal

__all__ = [
    "MAX_RETRY_AFTER",
    "Response",
    "ResponseTooLarge",
    "Timeouts",
    "Transport",
    "TransportKind",
    "Upstream",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamPoolTimeout",
    "UpstreamProtocolError",
    "UpstreamTimeout",
    "read_whole",
    "retry_after",
    "retry_after_value",
]

TransportKind = Literal["fast", "httpx"]


class UpstreamError(FlatgateError):
    """Root of every failure talking to a backend."""

    default = codes.BACKEND_UNAVAILABLE


class UpstreamConnectError(UpstreamError):
    """The backend could not be reached."""


class UpstreamPoolTimeout(UpstreamError):
    """Every pooled connection to the backend's host stayed in use for the
    transport's pool timeout: flatgate's own limit, not the backend's failure."""

    default = codes.POOL_EXHAUSTED


class UpstreamTimeout(UpstreamError):
    """The backend was reached but did not answer in time."""

    default = codes.BACKEND_TIMEOUT


class UpstreamProtocolError(UpstreamError):
    """The backend broke HTTP or closed the connection mid-response."""


class Timeouts(msgspec.Struct, frozen=True):
    connect: float = 2.0
    # Longest wait between body pieces once the answer has begun.
    read: float = 30.0
    # Longest whole exchange, head and body (None: none).
    total: float | None = None
    # Longest wait for the response head, and for body pieces until the
    # consumer calls ``Response.begun`` (None: ``read``). A reasoning model
    # may think for minutes before its first token.
    first_byte: float | None = None


class Upstream(msgspec.Struct, frozen=True):
    """One request to send upstream, what ``Transport.request`` takes: an
    ``https`` ``url`` is verified against ``tls`` (``None``: the system's CA
    store); ``body`` is sent as is, as a fixed-length body.

    One is built per upstream attempt, so it is a Struct (slotted, built in
    C: about 55 ns, frozen or not) rather than a dataclass (a frozen one costs
    several times a slotted class's 130 ns)."""

    method: str
    url: str
    body: bytes
    headers: Sequence[tuple[str, str]]
    timeouts: Timeouts
    tls: ssl.SSLContext | None = None


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

    def begun(self) -> None:
        """The answer has begun: later waits use the read timeout, not first_byte."""
        ...

    async def aclose(self) -> None:
        """Release the connection (or abort it if the body was not read)."""
        ...


class Transport(Protocol):
    async def request(self, req: Upstream) -> Response:
        """Send ``req``; return once the response head arrived."""
        ...

    def stats(self) -> dict[str, int]:
        """Pool figures summed over hosts: ``open`` and ``idle`` connections,
        callers ``waiting`` now, and counters of ``waits`` and ``pool_timeouts``."""
        ...

    async def aclose(self) -> None: ...


# A Retry-After longer than this is taken as this (seconds).
MAX_RETRY_AFTER = 3600.0


class ResponseTooLarge(FlatgateError):
    """A whole answer longer than its reader's bound (``read_whole``); its
    text says how long: ``"N bytes"`` (its ``Content-Length``) or ``"over N
    bytes"``."""

    default = codes.BACKEND_RESPONSE_TOO_LARGE


async def read_whole(resp: Response, max_bytes: int) -> bytes:
    """``resp``'s whole body, at most ``max_bytes`` of it: ``ResponseTooLarge``
    when its ``Content-Length`` says more (nothing read) or as soon as the
    bytes go past; ``UpstreamError`` when it breaks off. The edge reads the
    proxy's embeddings answer so, and the proxy a backend's."""
    length = resp.headers.get("content-length", "")
    declared = read_decimal(length)
    if declared is not None and declared > max_bytes:
        raise ResponseTooLarge(f"{length} bytes")
    # A transport that can hand its pieces over uncopied (``transport.fast``'s
    # views of what it read) does: they are joined once, here.
    raw: Callable[[], AsyncIterator[bytes | memoryview]] | None = getattr(resp, "uncopied", None)
    pieces: list[bytes | memoryview] = []
    size = 0
    async for piece in resp.iter_bytes() if raw is None else raw():
        if not pieces:
            resp.begun()
        size += len(piece)
        if size > max_bytes:
            raise ResponseTooLarge(f"over {max_bytes} bytes")
        pieces.append(piece)
    if len(pieces) == 1 and type(pieces[0]) is bytes:
        return pieces[0]
    return b"".join(pieces)


def retry_after_value(seconds: float) -> str:
    """The ``Retry-After`` flatgate answers with: whole seconds, rounded up,
    at least 1 (a caller told 0 would retry at once). The one rounding rule."""
    return str(max(1, math.ceil(seconds)))


def retry_after(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds, or an
    HTTP date); ``None`` when neither says. Clamped to [0, MAX_RETRY_AFTER]."""
    raw = headers.get("retry-after-ms")
    if raw is not None:
        try:
            ms = float(raw)
        except ValueError:
            ms = math.nan
        if not math.isnan(ms):
            return min(max(ms / 1000, 0.0), MAX_RETRY_AFTER)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            date = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if date.tzinfo is None:  # asctime dates carry no zone: HTTP dates are GMT
            date = date.replace(tzinfo=datetime.UTC)
        seconds = date.timestamp() - now()
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
