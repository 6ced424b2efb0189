"""The reference transport: ``httpx.AsyncClient`` behind the ``Transport`` interface.

httpx enters flatgate here and nowhere else: its exceptions become
``transport.base`` errors in this module. Slow on the hot path (its pool costs
over a millisecond of CPU per request under concurrency), kept as the
reference the fast pool is compared against. No routing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence

import httpx

from flatgate.proxy.transport.base import (
    Response,
    Timeouts,
    UpstreamConnectError,
    UpstreamProtocolError,
    UpstreamTimeout,
)

__all__ = ["HttpxTransport"]


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
