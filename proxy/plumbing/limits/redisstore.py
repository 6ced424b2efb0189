"""``RedisStore``: the limits' state in Redis (or Valkey), shared by every
worker of every instance.

One round trip per request: ``scripts.ACQUIRE`` checks and charges every
check of a request atomically. Scripts go by ``EVALSHA``; a server that does
not know one (``NOSCRIPT``: restarted, flushed) is sent it by ``EVAL``, which
also caches it. Every operation is bounded by ``timeout_ms`` as a whole
(waiting for a pooled connection, connecting, the round trip); a broken
connection is replaced and the operation tried once more, within that bound.
A store that fails answers ``StoreError`` at once, and the limiter applies
``on_store_error``. Connections come from a bounded pool
(``pool_size`` per worker process); a dead one is dropped and the next
operation connects afresh, so the store recovers by itself when Redis comes
back.

Clock: with ``server_time`` (production) the scripts read Redis' ``TIME``,
one clock for every instance (GCRA compares times written by different
instances); without it, the ``now`` each call is given (tests drive it).

This module is the one place ``redis`` (redis-py) enters: its exceptions
become ``StoreError`` here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError

from flatgate.proxy.plumbing.limits import scripts
from flatgate.proxy.plumbing.limits.decision import Lease
from flatgate.proxy.plumbing.limits.rules import Plan, key_part
from flatgate.proxy.plumbing.limits.store import (
    USAGE_DAYS,
    Raw,
    Store,
    StoreError,
    settle_deltas,
    usage_key,
)

__all__ = ["RedisStore", "public_url"]


def public_url(url: str) -> str:
    """``url`` without a password, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    return urlunsplit(parts._replace(netloc=netloc))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _store_error(exc: BaseException) -> StoreError:
    text = str(exc)
    return StoreError(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


class RedisStore(Store):
    """See the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        password: str | None = None,
        timeout_ms: float = 50.0,
        pool_size: int = 32,
        key_prefix: str = "flatgate",
        server_time: bool = True,
    ) -> None:
        self.name = public_url(url)
        self.server_time = server_time
        self._timeout = timeout_ms / 1000
        self._pool = BlockingConnectionPool.from_url(
            url,
            max_connections=pool_size,
            timeout=None,  # bounded by the operation's own timeout
            password=password,
            socket_connect_timeout=self._timeout,
            socket_timeout=None,  # likewise: one timer per operation
            # One retry, at once, on a broken connection: a pooled one that
            # died with a restarted server is replaced within the operation.
            # (A reply lost after the script ran would charge twice: rare, and
            # only ever against the tenant.)
            retry=Retry(NoBackoff(), 1),
        )
        self._redis = Redis(connection_pool=self._pool)
        # redis-py leaves execute_command unannotated.
        self._execute = cast("Callable[..., Awaitable[Any]]", self._redis.execute_command)
        self._backends = f"{key_prefix}:{{backends}}"
        self._prefix = key_prefix

    async def _call(self, *args: Any) -> Any:
        try:
            async with asyncio.timeout(self._timeout):
                return await self._execute(*args)
        except (RedisError, OSError, TimeoutError) as exc:
            raise _store_error(exc) from exc

    async def _run(self, script: scripts.Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            async with asyncio.timeout(self._timeout):
                try:
                    return await self._execute("EVALSHA", script.sha, len(keys), *keys, *args)
                except NoScriptError:
                    return await self._execute("EVAL", script.text, len(keys), *keys, *args)
        except (RedisError, OSError, TimeoutError) as exc:
            raise _store_error(exc) from exc

    def _now(self, now: float) -> str:
        return "" if self.server_time else repr(now)

    async def acquire(
        self,
        plan: Plan,
        keys: Sequence[str],
        now: float,
        *,
        estimate: int,
        lease_id: str,
        ttl: float,
        day_left: float,
    ) -> Raw:
        args = (self._now(now), lease_id, repr(ttl), str(estimate), repr(day_left), *plan.args)
        reply = await self._run(scripts.ACQUIRE, keys, args)
        try:
            return int(reply[0]) - 1, float(reply[1]), [float(x) for x in reply[2:]]
        except (TypeError, ValueError, IndexError) as exc:
            raise StoreError(f"unexpected reply to the acquire script: {reply!r}") from exc

    async def settle(self, lease: Lease, actual: int, now: float) -> None:
        keys: list[str] = []
        args: list[str] = [self._now(now), lease.id]
        for i, delta in settle_deltas(lease, actual):
            check = lease.plan.checks[i]
            keys.append(lease.keys[i])
            args += (check.code, str(check.amount), str(delta))
        for i in lease.plan.conc_at:
            keys.append(lease.keys[i])
            args += ("c", "0", "0")
        if keys:
            await self._run(scripts.SETTLE, keys, args)

    async def renew(self, lease: Lease, ttl: float, now: float) -> bool:
        keys = [lease.keys[i] for i in lease.plan.conc_at]
        if not keys:
            return True
        return bool(await self._run(scripts.RENEW, keys, (self._now(now), lease.id, repr(ttl))))

    def _outstanding(self, backend: str) -> str:
        return f"{self._backends}:out:{key_part(backend)}"

    async def backend_acquire(
        self, backend: str, lease_id: str, ttl: float, limit: int, now: float
    ) -> int:
        args = (self._now(now), lease_id, repr(ttl), str(limit))
        return int(await self._run(scripts.BACKEND_ACQUIRE, [self._outstanding(backend)], args))

    async def backend_release(self, backend: str, lease_id: str) -> None:
        await self._call("ZREM", self._outstanding(backend), lease_id)

    async def backend_counts(self, backends: Sequence[str], now: float) -> list[int]:
        if not backends:
            return []
        keys = [self._outstanding(b) for b in backends]
        return [int(n) for n in await self._run(scripts.BACKEND_COUNTS, keys, (self._now(now),))]

    async def set_cooldown(self, backend: str, until: float, now: float) -> None:
        args = (repr(now), backend, repr(until))
        await self._run(scripts.COOLDOWN, [f"{self._backends}:cooldowns"], args)

    async def cooldowns(self, now: float) -> dict[str, float]:
        raw = await self._call("HGETALL", f"{self._backends}:cooldowns")
        out = {}
        for name, until in raw.items():
            if float(until) > now:
                out[name.decode("utf-8", "surrogateescape")] = float(until)
        return out

    async def add_usage(self, date: str, fields: Sequence[tuple[str, int]]) -> None:
        args: list[str] = [str(USAGE_DAYS * 86400)]
        for field, amount in fields:
            args += (field, str(amount))
        await self._run(scripts.USAGE, [usage_key(self._prefix, date)], args)

    async def usage(self, date: str) -> dict[str, int]:
        reply = await self._call("HGETALL", usage_key(self._prefix, date))
        return {_text(k): int(v) for k, v in (reply or {}).items()}

    async def ping(self) -> None:
        """A round trip (raises ``StoreError``)."""
        await self._call("PING")

    async def aclose(self) -> None:
        await self._redis.aclose()
        await self._pool.aclose()
