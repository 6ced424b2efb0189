"""The reference transport: ``httpx.AsyncClient`` behind the ``Transport`` interface.

httpx enters flatgate here and nowhere else: its exceptions become
``transport.base`` errors in this module. Slow on the hot path (its pool costs
over a millisecond of CPU per request under concurrency), kept as the
reference the fast pool is compared against. No routing.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Mapping

import httpx

from flatgate.proxy.transport.base import (
    Response,
    Upstream,
    UpstreamConnectError,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
    UpstreamTimeout,
)

__all__ = ["HttpxTransport"]


class _HttpxResponse:
    __slots__ = ("_deadline", "_later", "_read", "_resp", "headers", "status")

    def __init__(self, resp: httpx.Response, deadline: float | None, later: float) -> None:
        self._resp = resp
        self._deadline = deadline
        self._later = later
        # httpx's own read timeout is the first-byte one; once the answer has
        # begun, the (shorter) read timeout is enforced here.
        self._read: float | None = None
        self.status = resp.status_code
        self.headers: Mapping[str, str] = {k.lower(): v for k, v in resp.headers.items()}

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        pieces = self._resp.aiter_raw().__aiter__()
        try:
            while True:
                try:
                    async with asyncio.timeout(self._read):
                        piece = await anext(pieces)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise UpstreamTimeout("backend stalled mid-response") from None
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

    def begun(self) -> None:
        self._read = self._later

    async def aclose(self) -> None:
        await self._resp.aclose()


class HttpxTransport:
    """The reference transport: a shared ``httpx.AsyncClient``."""

    def __init__(self, *, limit: int = 4096, pool_timeout: float = 5.0) -> None:
        self._limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
        self._pool_timeout = pool_timeout
        self._pool_timeouts = 0
        # One client per TLS context (httpx verifies per client, not per request).
        self._clients: dict[ssl.SSLContext | None, httpx.AsyncClient] = {}

    def _client(self, tls: ssl.SSLContext | None) -> httpx.AsyncClient:
        client = self._clients.get(tls)
        if client is None:
            client = self._clients[tls] = httpx.AsyncClient(
                limits=self._limits, timeout=None, trust_env=False, verify=tls or True
            )
        return client

    async def request(self, req: Upstream) -> Response:
        url, timeouts = req.url, req.timeouts
        deadline = None if timeouts.total is None else time.monotonic() + timeouts.total
        first = timeouts.first_byte or timeouts.read
        if timeouts.total is not None:
            first = min(first, timeouts.total)
        timeout = httpx.Timeout(
            connect=timeouts.connect, read=first, write=first, pool=self._pool_timeout
        )
        client = self._client(req.tls)
        built = client.build_request(
            req.method, url, content=req.body, headers=list(req.headers), timeout=timeout
        )
        try:
            resp = await client.send(built, stream=True)
        except httpx.ConnectError as exc:
            raise UpstreamConnectError(f"cannot connect to {url}: {exc!r}") from exc
        except httpx.PoolTimeout as exc:
            self._pool_timeouts += 1
            raise UpstreamPoolTimeout(
                f"no free connection to {url} within {self._pool_timeout}s"
            ) from exc
        except httpx.ConnectTimeout as exc:
            raise UpstreamConnectError(f"connect to {url} timed out") from exc
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"{url} did not answer in time: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise UpstreamProtocolError(f"{url}: {exc!r}") from exc
        return _HttpxResponse(resp, deadline, timeouts.read)

    def stats(self) -> dict[str, int]:
        """httpx keeps its pool to itself: only the pool timeouts are known."""
        return {
            "open": 0,
            "idle": 0,
            "waiting": 0,
            "waits": 0,
            "pool_timeouts": self._pool_timeouts,
        }

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
