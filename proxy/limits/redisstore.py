"""``RedisStore``: the limits' state in Redis (or Valkey), shared by every
worker of every instance.

One round trip per request: ``scripts.ACQUIRE`` checks and charges every
check of a request atomically. Scripts go by ``EVALSHA``; a server that does
not know one (``NOSCRIPT``: restarted, flushed) is sent it by ``EVAL``, which
also caches it. Every operation is bounded by ``timeout_ms`` as a whole
(waiting for a pooled connection, connecting, the round trip); a broken
connection is replaced and the operation tried once more, within that bound.
A store that fails answers ``StoreError`` at once, and the limiter applies
``on_store_error``. Connections are a fixed set (``pool_size`` per worker
process) used with pre-encoded commands (``redisconn``); a dead one is
disconnected and connects afresh on its next use, so the store recovers by
itself when Redis comes back. Settles and usage counts go in one pipeline
per turn of the event loop. The acquire script answers one string of
numbers: one reply to parse.

Blobs (stored responses: ``SET`` with ``PX``, ``GET``, ``DEL`` under
``<key_prefix>:blob:<key>``) go on connections of their own
(``blob_pool_size``), bounded by ``blob_timeout_ms``: a blob may be MiBs, and
a limit check, with its 50 ms, must never wait for a connection busy with
one, nor a blob fail for a bound sized for a few hundred bytes. A blob put
in a group (a tenant's stored responses) goes through ``BLOB_PUT``: the
group's index and sizes beside it, in its slot, keep it within
``blob_bounds``' group bounds, the group's oldest going first (``DEL``
through ``BLOB_DELETE`` likewise). Redis' own ``maxmemory`` bounds them in
all; a refusal (``OOM``) is a ``StoreError``.

Clock: with ``server_time`` (production) the scripts read Redis' ``TIME``,
one clock for every instance (GCRA compares times written by different
instances); without it, the ``now`` each call is given (tests drive it).

Where: ``url`` is one server (``redis://``: the pre-encoded path,
``redisconn.Connections``), a Redis Cluster (``redis+cluster://``:
``rediscluster``, each command to its key's master) or Sentinel
(``redis+sentinel://``: ``redissentinel``, the primary the sentinels name);
``redisurl`` parses them. ``pool_size`` and ``blob_pool_size`` are per
server. Every command names the key it is routed by: the first key of a
script (all of one script's keys share a slot: the tenant's, in braces, or
``{backends}``).

This module and those four are the one place ``redis`` (redis-py) enters:
its exceptions become ``StoreError`` here.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.exceptions import NoScriptError, RedisError

from flatgate.proxy.limits.blobs import BlobBounds, Pieces
from flatgate.proxy.limits.decision import Lease
from flatgate.proxy.limits.rediscluster import ClusterConnections
from flatgate.proxy.limits.redisconn import Connections, Target, encode
from flatgate.proxy.limits.redissentinel import SentinelConnections
from flatgate.proxy.limits.redisurl import Kind, StoreAddress, parse_store_url
from flatgate.proxy.limits.rules import key_part
from flatgate.proxy.limits.scripts import (
    ACQUIRE,
    BACKEND_ACQUIRE,
    BACKEND_COUNTS,
    BLOB_DELETE,
    BLOB_PUT,
    COOLDOWN,
    RENEW,
    SETTLE,
    USAGE,
    Script,
)
from flatgate.proxy.limits.store import (
    DEFAULT_BLOB_BOUNDS,
    USAGE_DAYS,
    Ask,
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


def _pairs(reply: Any) -> dict[Any, Any]:
    """A hash's fields and values, from ``HGETALL``'s flat reply."""
    if isinstance(reply, dict):
        return reply
    items = list(reply or ())
    return dict(zip(items[::2], items[1::2], strict=True))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def connect(
    address: StoreAddress,
    url: str,
    size: int,
    *,
    background_timeout: float,
    refresh_timeout: float,
    sentinel_password: str | None = None,
    **options: Any,
) -> Target:
    """``size`` connections per server to the store ``url`` names, parsed
    as ``address`` (``redisurl``; one server is reached by ``url`` itself);
    ``options``: redis-py connection keywords."""
    if address.kind is Kind.CLUSTER:
        return ClusterConnections(
            address,
            size,
            refresh_timeout=refresh_timeout,
            background_timeout=background_timeout,
            **options,
        )
    if address.kind is Kind.SENTINEL:
        return SentinelConnections(
            address,
            size,
            refresh_timeout=refresh_timeout,
            sentinel_password=sentinel_password,
            background_timeout=background_timeout,
            **options,
        )
    return Connections(url, size, background_timeout=background_timeout, **options)


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
        sentinel_password: str | None = None,
        timeout_ms: float = 50.0,
        pool_size: int = 32,
        key_prefix: str = "flatgate",
        server_time: bool = True,
        blob_timeout_ms: float = 2000.0,
        blob_pool_size: int = 4,
        blob_bounds: BlobBounds = DEFAULT_BLOB_BOUNDS,
    ) -> None:
        self.name = public_url(url)
        self.blob_bounds = blob_bounds
        self.address: StoreAddress = parse_store_url(url)
        self.server_time = server_time
        self._timeout = timeout_ms / 1000
        # A fixed set of connections, used with pre-encoded commands
        # (redisconn); every operation is bounded by its own timer, and a
        # broken connection is reconnected and the command sent once more.
        # Background batches (settles, usage) get a longer bound: they wait
        # their turn behind the requests' own commands.
        self._background = max(1.0, 4 * self._timeout)
        # A cluster's slot map, Sentinel's primary: asked within this bound.
        refresh = max(1.0, self._timeout)
        self._conns = connect(
            self.address,
            url,
            pool_size,
            background_timeout=self._background,
            refresh_timeout=refresh,
            sentinel_password=sentinel_password,
            password=password,
            socket_connect_timeout=self._timeout,
            socket_timeout=None,
        )
        # Blobs: connections of their own, and a bound of their own (see
        # the module docstring).
        self._blob_timeout = blob_timeout_ms / 1000
        self._blob_conns = connect(
            self.address,
            url,
            blob_pool_size,
            background_timeout=self._blob_timeout,
            refresh_timeout=max(refresh, self._blob_timeout),
            sentinel_password=sentinel_password,
            password=password,
            socket_connect_timeout=self._blob_timeout,
            socket_timeout=None,
        )
        self._backends = f"{key_prefix}:{{backends}}"
        self._prefix = key_prefix

    async def _call(self, *args: str) -> Any:
        """One command; its first argument after the name is its key."""
        key = args[1] if len(args) > 1 else ""
        return await _send(self._conns, self._timeout, encode(*args), key)

    async def _run(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | bytes],
        *,
        background: bool = False,
        blob: bool = False,
    ) -> Any:
        """Run ``script``; ``background``: batched with the others of this
        turn of the event loop (settles, usage: off the request's path);
        ``blob``: on the blobs' connections, within their timeout."""
        if blob:
            send, timeout = self._blob_conns.call, self._blob_timeout
        else:
            send = self._conns.batch if background else self._conns.call
            timeout = self._background if background else self._timeout
        key = keys[0] if keys else ""
        try:
            async with asyncio.timeout(timeout):
                command = encode("EVALSHA", script.sha, str(len(keys)), *keys, *args)
                reply = await send(command, key)
                if isinstance(reply, NoScriptError):
                    command = encode("EVAL", script.text, str(len(keys)), *keys, *args)
                    reply = await send(command, key)
        except (RedisError, OSError, TimeoutError) as exc:
            raise _store_error(exc) from exc
        if isinstance(reply, RedisError):
            raise _store_error(reply)
        return reply

    def _now(self, now: float) -> str:
        return "" if self.server_time else repr(now)

    async def acquire(self, ask: Ask) -> Raw:
        # ACQUIRE's ARGV: four, then per check code, amount and wait
        # (``plan.args``, the waits placeholders); check i's wait (from 0) is
        # the script's ARGV[4 + 3 * (i + 1)], args[6 + 3 * i] here.
        plan = ask.plan
        args = [self._now(ask.now), ask.lease_id, repr(ask.ttl), str(ask.estimate), *plan.args]
        for i in plan.waits_at:
            args[6 + 3 * i] = repr(ask.waits[i])
        reply = await self._run(ACQUIRE, ask.keys, args)
        try:
            parts = reply.split()
            return int(parts[0]) - 1, float(parts[1]), [float(x) for x in parts[2:]]
        except (AttributeError, TypeError, ValueError, IndexError) as exc:
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
            await self._run(SETTLE, keys, args, background=True)

    async def renew(self, lease: Lease, ttl: float, now: float) -> bool:
        keys = [lease.keys[i] for i in lease.plan.conc_at]
        if not keys:
            return True
        return bool(await self._run(RENEW, keys, (self._now(now), lease.id, repr(ttl))))

    def _outstanding(self, backend: str) -> str:
        return f"{self._backends}:out:{key_part(backend)}"

    async def backend_acquire(
        self, backend: str, lease_id: str, ttl: float, limit: int, now: float
    ) -> int:
        args = (self._now(now), lease_id, repr(ttl), str(limit))
        return int(await self._run(BACKEND_ACQUIRE, [self._outstanding(backend)], args))

    async def backend_release(self, backend: str, lease_id: str) -> None:
        await self._call("ZREM", self._outstanding(backend), lease_id)

    async def backend_counts(self, backends: Sequence[str], now: float) -> list[int]:
        if not backends:
            return []
        keys = [self._outstanding(b) for b in backends]
        return [int(n) for n in await self._run(BACKEND_COUNTS, keys, (self._now(now),))]

    async def set_cooldown(self, backend: str, until: float, now: float) -> None:
        args = (repr(now), backend, repr(until))
        await self._run(COOLDOWN, [f"{self._backends}:cooldowns"], args)

    async def cooldowns(self, now: float) -> dict[str, float]:
        raw = _pairs(await self._call("HGETALL", f"{self._backends}:cooldowns"))
        out = {}
        for name, until in raw.items():
            if float(until) > now:
                out[name.decode("utf-8", "surrogateescape")] = float(until)
        return out

    async def add_usage(self, date: str, fields: Sequence[tuple[str, int]]) -> None:
        args: list[str] = [str(USAGE_DAYS * 86400)]
        for field, amount in fields:
            args += (field, str(amount))
        await self._run(USAGE, [usage_key(self._prefix, date)], args, background=True)

    async def usage(self, date: str) -> dict[str, int]:
        reply = _pairs(await self._call("HGETALL", usage_key(self._prefix, date)))
        return {_text(k): int(v) for k, v in reply.items()}

    def _blob(self, key: str) -> str:
        return f"{self._prefix}:blob:{key}"

    def _group_keys(self, key: str, group: str) -> list[str]:
        """A grouped blob's keys for ``BLOB_PUT`` and ``BLOB_DELETE``."""
        at = f"{self._prefix}:blobs:{group}"
        return [self._blob(key), f"{at}:index", f"{at}:sizes"]

    async def put_blob(self, key: str, data: bytes | Pieces, ttl: float, group: str = "") -> bool:
        px = str(max(1, math.ceil(ttl * 1000)))
        value = data if isinstance(data, bytes) else b"".join(data)
        if not group:
            command = encode("SET", self._blob(key), value, "PX", px)
            await _send(self._blob_conns, self._blob_timeout, command, self._blob(key))
            return True
        b = self.blob_bounds
        args = (value, px, str(b.group_count), str(b.group_bytes))
        evicted = int(await self._run(BLOB_PUT, self._group_keys(key, group), args, blob=True))
        self._evicted += max(0, evicted)
        return evicted >= 0

    async def get_blob(self, key: str) -> bytes | None:
        name = self._blob(key)
        reply = await _send(self._blob_conns, self._blob_timeout, encode("GET", name), name)
        if reply is None or isinstance(reply, bytes):
            return reply
        raise StoreError(f"unexpected reply to GET: {type(reply).__name__}")

    async def delete_blob(self, key: str, group: str = "") -> bool:
        if group:
            return bool(await self._run(BLOB_DELETE, self._group_keys(key, group), (), blob=True))
        name = self._blob(key)
        reply = await _send(self._blob_conns, self._blob_timeout, encode("DEL", name), name)
        return bool(reply)

    async def ping(self) -> None:
        """A round trip (raises ``StoreError``)."""
        await self._call("PING")

    async def aclose(self) -> None:
        await self._conns.aclose()
        await self._blob_conns.aclose()


async def _send(conns: Target, timeout: float, command: bytes, key: str) -> Any:
    """One command's reply within ``timeout`` seconds; redis-py's exceptions
    and Redis' error replies as ``StoreError``."""
    try:
        async with asyncio.timeout(timeout):
            reply = await conns.call(command, key)
    except (RedisError, OSError, TimeoutError) as exc:
        raise _store_error(exc) from exc
    if isinstance(reply, RedisError):
        raise _store_error(reply)
    return reply
