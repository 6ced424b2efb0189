"""``SentinelConnections``: the store's commands to the primary that Redis
Sentinel names for a service (Valkey's Sentinel the same).

The sentinels are asked (``SENTINEL GET-MASTER-ADDR-BY-NAME``, the first
that answers, in the configured order) on first use, and again whenever an
operation on the primary fails: a connection error or a timeout (the
primary died), or ``READONLY`` (it was demoted to a replica). That operation
fails (the store answers ``StoreError``, the limiter applies
``on_store_error``); once the sentinels have promoted a replica, the next
operation reaches it, without a restart. Asking runs in the background, one
at a time, at most every ``REFRESH_INTERVAL``.

The primary gets ``size`` connections (``Connections``: pre-encoded
commands, a batch per turn of the event loop); each sentinel one, with its
own password (``sentinel_password``; the primary's is ``password``). TLS
(``rediss+sentinel://``) applies to both. A primary that changes has its
old connections closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import MasterDownError, ReadOnlyError, RedisError

from flatgate.proxy.limits.redisconn import Connections, Refresher, Retired, encode
from flatgate.proxy.limits.redisurl import StoreAddress

__all__ = ["REFRESH_INTERVAL", "SentinelConnections"]

# The least time between two askings of the sentinels, in seconds.
REFRESH_INTERVAL = 0.1


class SentinelConnections:
    """See the module docstring. ``options``: ``Connections``' keywords
    (``background_timeout``, and redis-py's: ``password``, timeouts)."""

    def __init__(
        self,
        address: StoreAddress,
        size: int,
        *,
        refresh_timeout: float,
        sentinel_password: str | None = None,
        **options: Any,
    ) -> None:
        self._address = address
        self._size = size
        self._options = options
        self._refresh_timeout = refresh_timeout
        asked = {**options, "password": sentinel_password}
        self._sentinels = [
            (f"{host}:{port}", Connections(address.node_url(host, port, db=0), 1, **asked))
            for host, port in address.nodes
        ]
        self._ask = encode("SENTINEL", "GET-MASTER-ADDR-BY-NAME", address.service)
        self._primary: Connections | None = None
        self.primary_address: tuple[str, int] | None = None
        self._refresher = Refresher(self._load, REFRESH_INTERVAL)
        self._retired = Retired()
        self._problem = "the sentinels have not been asked yet"

    async def _current(self) -> Connections:
        if self._primary is None:
            await self._refresher.fresh()
            if self._primary is None:
                raise MasterDownError(f"no primary for {self._address.service!r}: {self._problem}")
        return self._primary

    async def call(self, command: bytes, key: str = "") -> Any:
        return await self._send(command, batch=False)

    async def batch(self, command: bytes, key: str = "") -> Any:
        return await self._send(command, batch=True)

    async def _send(self, command: bytes, *, batch: bool) -> Any:
        try:
            primary = await self._current()
            reply = await (primary.batch(command) if batch else primary.call(command))
        except BaseException:
            # The primary down, too slow, or a caller's timeout: it may have
            # been failed over; ask the sentinels again in the background.
            self._refresher.stale()
            raise
        if isinstance(reply, (ReadOnlyError, MasterDownError)):
            self._refresher.stale()  # demoted: a replica now
        return reply

    async def _load(self) -> None:
        problems = []
        for name, sentinel in self._sentinels:
            try:
                async with asyncio.timeout(self._refresh_timeout):
                    reply = await sentinel.call(self._ask)
                if isinstance(reply, RedisError):
                    raise reply
                if not reply:
                    raise LookupError(f"does not know {self._address.service!r}")
                host, port = reply[0], reply[1]
                found = (host.decode() if isinstance(host, bytes) else str(host), int(port))
            except (RedisError, OSError, TimeoutError, LookupError, ValueError) as exc:
                problems.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            self._install(found)
            return
        self._problem = "; ".join(problems) or "no sentinel to ask"

    def _install(self, found: tuple[str, int]) -> None:
        if found == self.primary_address:
            return
        old = self._primary
        url = self._address.node_url(*found)
        self._primary = Connections(url, self._size, **self._options)
        self.primary_address = found
        if old is not None:
            self._retired.close(old)

    async def aclose(self) -> None:
        await self._refresher.cancel()
        await self._retired.aclose()
        if self._primary is not None:
            await self._primary.aclose()
        for _, sentinel in self._sentinels:
            await sentinel.aclose()
