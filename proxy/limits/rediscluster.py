"""``ClusterConnections``: the store's commands to a Redis Cluster (or a
Valkey cluster: the same protocol).

Each command goes to the master that holds its key's slot (``key_slot``:
CRC16 of the hash tag, the text in the key's first ``{...}``). The slot map
comes from ``CLUSTER SLOTS``, asked of a known master or a seed, on first
use and again whenever the cluster says it changed:

- ``MOVED``: the slot is now the named node's; the command is sent there at
  once, within the same operation, and the whole map is asked again in the
  background (a resharding moves many slots);
- ``ASK``: the slot is being migrated; the command goes to the named node
  after ``ASKING``, and the map is left as it is;
- a connection error, a timeout, ``CLUSTERDOWN`` or ``TRYAGAIN``: that
  operation fails (the store answers ``StoreError``, the limiter applies
  ``on_store_error``) and the map is asked again, so that once a replica has
  taken over its dead master's slots, the next operation reaches it.

A refresh runs in the background, one at a time, at most every
``REFRESH_INTERVAL``. Each master gets its own ``Connections``: ``size``
connections and a batch per turn of the event loop, so settles and usage
counts are one pipeline per node. The connection count is ``size`` per
master (plus one per seed while the map is first asked): the cluster's
size times the configuration's, never the number of tenants. A node that
leaves the map has its connections closed.

Every key of one command must be in one slot (Redis refuses it otherwise:
``CROSSSLOT``); the limits' keys carry the tenant in braces, and the
limiter checks at start-up that each tenant's keys share a slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.crc import REDIS_CLUSTER_HASH_SLOTS as SLOTS
from redis.crc import key_slot as _key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    RedisError,
    TryAgainError,
)

from flatgate.proxy.limits.redisconn import Connections, Refresher, Retired, encode
from flatgate.proxy.limits.redisurl import StoreAddress

__all__ = ["REFRESH_INTERVAL", "SLOTS", "ClusterConnections", "key_slot", "one_slot"]

# The least time between two refreshes of the slot map, in seconds.
REFRESH_INTERVAL = 0.1
# Redirections followed within one operation.
MAX_REDIRECTS = 3
_ASKING = encode("ASKING")
_SLOTS = encode("CLUSTER", "SLOTS")

Address = tuple[str, int]


def key_slot(key: str) -> int:
    """The cluster slot of ``key``, the way Redis computes it."""
    return _key_slot(key.encode())


def one_slot(keys: Sequence[str]) -> bool:
    """Whether every key of ``keys`` is in one slot."""
    return len({key_slot(k) for k in keys}) <= 1


class _Node(Connections):
    """One master's connections, and its address."""

    def __init__(self, address: Address, url: str, size: int, **options: Any) -> None:
        super().__init__(url, size, **options)
        self.address = address


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ClusterConnections:
    """See the module docstring. ``options``: ``Connections``' keywords
    (``background_timeout``, and redis-py's: ``password``, timeouts)."""

    def __init__(
        self, address: StoreAddress, size: int, *, refresh_timeout: float, **options: Any
    ) -> None:
        self._address = address
        self._size = size
        self._options = options
        self._refresh_timeout = refresh_timeout
        self._nodes: dict[Address, _Node] = {}
        self._by_slot: list[_Node | None] = [None] * SLOTS
        self._refresher = Refresher(self._load, REFRESH_INTERVAL)
        self._retired = Retired()
        # Why the last refresh found no map (for the error a caller gets).
        self._problem = "the slot map has not been asked yet"

    def _node(self, host: str, port: int) -> _Node:
        node = self._nodes.get((host, port))
        if node is None:
            url = self._address.node_url(host, port, db=0)
            node = self._nodes[(host, port)] = _Node((host, port), url, self._size, **self._options)
        return node

    async def _route(self, key: str) -> _Node:
        slot = key_slot(key)
        node = self._by_slot[slot]
        if node is None:
            await self._refresher.fresh()
            node = self._by_slot[slot]
            if node is None:
                raise ClusterDownError(f"no node serves slot {slot}: {self._problem}")
        return node

    async def call(self, command: bytes, key: str = "") -> Any:
        return await self._send(command, key, batch=False)

    async def batch(self, command: bytes, key: str = "") -> Any:
        return await self._send(command, key, batch=True)

    async def _send(self, command: bytes, key: str, *, batch: bool) -> Any:
        try:
            node = await self._route(key)
            reply = await (node.batch(command) if batch else node.call(command))
            for _ in range(MAX_REDIRECTS):
                if isinstance(reply, MovedError):
                    node = self._moved(reply, node)
                    reply = await node.call(command)
                elif isinstance(reply, AskError):
                    target = self._node(reply.host or node.address[0], reply.port)
                    reply = (await target.pipeline([_ASKING, command]))[1]
                else:
                    break
        except BaseException:
            # A node down, too slow, or a caller's timeout: the map may be
            # out of date (a failover); ask it again in the background.
            self._refresher.stale()
            raise
        if isinstance(reply, (ClusterDownError, TryAgainError)):
            self._refresher.stale()
        return reply

    def _moved(self, reply: MovedError, asked: _Node) -> _Node:
        node = self._node(reply.host or asked.address[0], reply.port)
        self._by_slot[reply.slot_id] = node
        self._refresher.stale()
        return node

    def _candidates(self) -> list[Address]:
        """Whom to ask for the map: the masters of the map in hand, then the
        seeds."""
        known = list(dict.fromkeys(n.address for n in self._by_slot if n is not None))
        return known + [a for a in self._address.nodes if a not in known]

    async def _load(self) -> None:
        problems = []
        for host, port in self._candidates():
            node = self._node(host, port)
            try:
                async with asyncio.timeout(self._refresh_timeout):
                    reply = await node.call(_SLOTS)
                if isinstance(reply, RedisError):
                    raise reply
                self._install(reply, node)
            except (RedisError, OSError, TimeoutError, ValueError, TypeError) as exc:
                problems.append(f"{host}:{port}: {type(exc).__name__}: {exc}")
                continue
            return
        self._problem = "; ".join(problems) or "no node to ask"

    def _install(self, reply: Any, asked: _Node) -> None:
        """A new map from ``CLUSTER SLOTS``' ``[low, high, [host, port, id],
        replicas...]`` entries; nodes no longer in it (nor seeds) closed."""
        by_slot: list[_Node | None] = [None] * SLOTS
        for entry in reply:
            low, high, master = int(entry[0]), int(entry[1]), entry[2]
            host = _text(master[0])
            node = self._node(host if host not in ("", "?") else asked.address[0], int(master[1]))
            by_slot[low : high + 1] = [node] * (high - low + 1)
        self._by_slot = by_slot
        in_use = {n.address for n in by_slot if n is not None} | set(self._address.nodes)
        for address in [a for a in self._nodes if a not in in_use]:
            self._retired.close(self._nodes.pop(address))

    async def aclose(self) -> None:
        await self._refresher.cancel()
        await self._retired.aclose()
        for node in list(self._nodes.values()):
            await node.aclose()
