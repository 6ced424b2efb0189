"""``MemoryStore``: the limits' state in this worker process's dicts.

The embedded default: each granian worker (a process) counts on its own, so
with ``W`` workers a tenant gets up to ``W`` times its limits; a Redis store
shares one count. The arithmetic is ``algorithms``' (the Lua scripts'
twin, operation for operation). Bounded: every ``SWEEP_SECONDS`` a pass drops
the keys whose state is spent (a rate back to full, a concurrency set with
no live lease, a day counter two days old), so the dicts hold only what
limits requests now. The limiter keeps its store across config reloads, and
keys are named by rule, so counts survive a reload.

Blobs (stored responses) are bounded in count and in bytes (``max_blobs``,
``max_blob_bytes``: ``[state] memory_max_responses`` and
``memory_max_response_bytes_total``); past either bound the least recently
used (put or read) go first. A blob's TTL is honoured on read; expired ones
go as later puts pass them. Per process, like the counts: another worker
does not see them.

Synchronous under its ``async`` face (``acquire_now``); one event loop thread.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final

from flatgate.proxy.limits.algorithms import (
    CONCURRENT,
    CONCURRENT_RETRY,
    DAY_KEY_SECONDS,
    PERIOD,
    REQUESTS,
    TOKENS,
    TOLERANCE,
)
from flatgate.proxy.limits.decision import Lease
from flatgate.proxy.limits.rules import Plan
from flatgate.proxy.limits.store import Raw, Store

__all__ = ["DEFAULT_MAX_BLOBS", "DEFAULT_MAX_BLOB_BYTES", "SWEEP_SECONDS", "MemoryStore"]

SWEEP_SECONDS: Final = 10.0
# The blob bounds of a store made without any ([state]'s defaults).
DEFAULT_MAX_BLOBS: Final = 2000
DEFAULT_MAX_BLOB_BYTES: Final = 64 * 1024 * 1024
_WINDOW: Final = PERIOD + TOLERANCE


class _Leases:
    """One concurrency key: live lease ids to their expiry, and a heap of
    ``(expiry, id)`` to find the expired ones without a scan (stale entries,
    released or renewed, are skipped, and the heap is rebuilt when they
    outnumber the live ones)."""

    __slots__ = ("heap", "live")

    def __init__(self) -> None:
        self.live: dict[str, float] = {}
        self.heap: list[tuple[float, str]] = []

    def purge(self, now: float) -> None:
        heap, live = self.heap, self.live
        while heap and heap[0][0] <= now:
            expiry, lease = heapq.heappop(heap)
            if live.get(lease) == expiry:
                del live[lease]

    def add(self, lease: str, expiry: float) -> None:
        self.live[lease] = expiry
        heapq.heappush(self.heap, (expiry, lease))

    def remove(self, lease: str) -> None:
        if self.live.pop(lease, None) is not None and len(self.heap) > 2 * len(self.live) + 16:
            self.heap = [(e, k) for k, e in self.live.items()]
            heapq.heapify(self.heap)


class _Blobs:
    """Blobs in the order of their last use (the least recent first), their
    bytes counted, and a heap of ``(expiry, key)`` to find the expired ones
    without a scan (stale entries, replaced or gone, are skipped, and the heap
    is rebuilt when they outnumber the live ones)."""

    __slots__ = ("evicted", "heap", "items", "max_bytes", "max_count", "size")

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.items: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self.heap: list[tuple[float, str]] = []
        self.size = 0
        self.max_count = max_count
        self.max_bytes = max_bytes
        # Blobs let go before their TTL, to keep within the bounds.
        self.evicted = 0

    def put(self, key: str, data: bytes, expiry: float, now: float) -> bool:
        if len(data) > self.max_bytes or self.max_count < 1:
            return False
        self.purge(now)
        self.pop(key)
        self.items[key] = (expiry, data)
        self.size += len(data)
        heapq.heappush(self.heap, (expiry, key))
        if len(self.heap) > 2 * len(self.items) + 16:
            self.heap = [(e, k) for k, (e, _) in self.items.items()]
            heapq.heapify(self.heap)
        self.shrink()
        return True

    def get(self, key: str, now: float) -> bytes | None:
        found = self.items.get(key)
        if found is None:
            return None
        if found[0] <= now:
            self.pop(key)
            return None
        self.items.move_to_end(key)
        return found[1]

    def pop(self, key: str) -> bool:
        found = self.items.pop(key, None)
        if found is None:
            return False
        self.size -= len(found[1])
        return True

    def purge(self, now: float) -> None:
        heap, items = self.heap, self.items
        while heap and heap[0][0] <= now:
            expiry, key = heapq.heappop(heap)
            found = items.get(key)
            if found is not None and found[0] == expiry:
                self.pop(key)

    def shrink(self) -> None:
        items = self.items
        while items and (len(items) > self.max_count or self.size > self.max_bytes):
            _, (_, data) = items.popitem(last=False)
            self.size -= len(data)
            self.evicted += 1


class MemoryStore(Store):
    """See the module docstring. ``clock``: the blobs' (monotonic) seconds."""

    local = True
    name = "memory"

    def __init__(
        self,
        *,
        max_blobs: int = DEFAULT_MAX_BLOBS,
        max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # GCRA: key -> theoretical arrival time.
        self.rates: dict[str, float] = {}
        self.leases: dict[str, _Leases] = {}
        # Day counters: key -> tokens used; key -> when the key goes.
        self.days: dict[str, int] = {}
        self._day_expiry: dict[str, float] = {}
        self.backends: dict[str, _Leases] = {}
        self.cooling: dict[str, float] = {}
        # One day's usage at a time (this process's): field -> amount.
        self.usage_date = ""
        self.usage_fields: dict[str, int] = {}
        self._next_sweep = 0.0
        self.blobs = _Blobs(max_blobs, max_blob_bytes)
        self._clock = clock

    def __len__(self) -> int:
        """Limits' keys held (every kind; the blobs are ``blobs.items``)."""
        return len(self.rates) + len(self.leases) + len(self.days) + len(self.backends)

    def acquire_now(
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
        """``acquire``, synchronously."""
        if now >= self._next_sweep:
            self.sweep(now)
        rates = self.rates
        refused = -1
        retry = 0.0
        levels: list[float] = []
        charge: list[tuple[int, str, float]] = []
        i = -1
        for kind, limit, interval in plan.specs:
            i += 1
            key = keys[i]
            if kind <= TOKENS:
                tat = rates.get(key, now)
                if tat < now:  # noqa: PLR1730  # a branch is cheaper than max()
                    tat = now
                new = tat + (1 if kind == REQUESTS else min(estimate, limit)) * interval
                if new - now > _WINDOW:
                    wait = new - now - PERIOD
                    if refused < 0 or wait > retry:
                        refused, retry = i, wait
                    levels.append(tat - now)
                else:
                    levels.append(new - now)
                    charge.append((kind, key, new))
            elif kind == CONCURRENT:
                slots = self.leases.get(key)
                if slots is None:
                    slots = self.leases[key] = _Leases()
                else:
                    slots.purge(now)
                held = len(slots.live)
                if held >= limit:
                    if refused < 0 or retry < CONCURRENT_RETRY:
                        refused, retry = i, CONCURRENT_RETRY
                    levels.append(float(held))
                else:
                    levels.append(float(held + 1))
                    charge.append((kind, key, now + ttl))
            else:
                cost = min(estimate, limit)
                used = self.days.get(key, 0)
                if used >= limit or used + cost > limit:
                    if refused < 0 or day_left > retry:
                        refused, retry = i, day_left
                    levels.append(float(used))
                else:
                    levels.append(float(used + cost))
                    charge.append((kind, key, cost))
        if refused >= 0:
            return refused, retry, self._levels(plan, keys, now)
        for kind, key, value in charge:
            if kind <= TOKENS:
                rates[key] = value
            elif kind == CONCURRENT:
                self.leases[key].add(lease_id, value)
            else:
                self._add_day(key, int(value), now)
        return -1, 0.0, levels

    def _levels(self, plan: Plan, keys: Sequence[str], now: float) -> list[float]:
        """Every check's level as it stands (a refusal charges nothing)."""
        levels = []
        for (kind, _, _), key in zip(plan.specs, keys, strict=True):
            if kind <= TOKENS:
                tat = self.rates.get(key, now)
                levels.append(tat - now if tat > now else 0.0)
            elif kind == CONCURRENT:
                levels.append(float(len(self.leases[key].live)))
            else:
                levels.append(float(self.days.get(key, 0)))
        return levels

    def _add_day(self, key: str, tokens: int, now: float) -> None:
        self.days[key] = self.days.get(key, 0) + tokens
        self._day_expiry.setdefault(key, now + DAY_KEY_SECONDS)

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
        return self.acquire_now(
            plan, keys, now, estimate=estimate, lease_id=lease_id, ttl=ttl, day_left=day_left
        )

    def settle_now(self, lease: Lease, actual: int, now: float) -> None:
        """``settle``, synchronously."""
        plan = lease.plan
        estimate = lease.estimate
        for i in plan.tokens_at:
            kind, limit, interval = plan.specs[i]
            delta = actual - min(estimate, limit)
            if not delta:
                continue
            key = lease.keys[i]
            if kind == TOKENS:
                tat = self.rates.get(key)
                if tat is None and delta <= 0:
                    continue
                if tat is None or tat < now:
                    tat = now
                new = tat + delta * interval
                if new - now <= 0:
                    self.rates.pop(key, None)
                else:
                    self.rates[key] = new
            else:
                self._add_day(key, delta, now)
        for i in plan.conc_at:
            slots = self.leases.get(lease.keys[i])
            if slots is not None:
                slots.remove(lease.id)

    async def settle(self, lease: Lease, actual: int, now: float) -> None:
        self.settle_now(lease, actual, now)

    async def renew(self, lease: Lease, ttl: float, now: float) -> bool:
        found = True
        for i in lease.plan.conc_at:
            slots = self.leases.get(lease.keys[i])
            if slots is None or slots.live.get(lease.id, now) <= now:
                found = False
            else:
                slots.add(lease.id, now + ttl)
        return found

    async def backend_acquire(
        self, backend: str, lease_id: str, ttl: float, limit: int, now: float
    ) -> int:
        slots = self.backends.get(backend)
        if slots is None:
            slots = self.backends[backend] = _Leases()
        slots.purge(now)
        if limit and len(slots.live) >= limit:
            return -1
        slots.add(lease_id, now + ttl)
        return len(slots.live)

    async def backend_release(self, backend: str, lease_id: str) -> None:
        slots = self.backends.get(backend)
        if slots is not None:
            slots.remove(lease_id)

    async def backend_counts(self, backends: Sequence[str], now: float) -> list[int]:
        counts = []
        for name in backends:
            slots = self.backends.get(name)
            if slots is not None:
                slots.purge(now)
            counts.append(0 if slots is None else len(slots.live))
        return counts

    async def set_cooldown(self, backend: str, until: float, now: float) -> None:
        for name in [n for n, t in self.cooling.items() if t <= now]:
            del self.cooling[name]
        current = self.cooling.get(backend)
        if current is None or current < until:
            self.cooling[backend] = until

    async def cooldowns(self, now: float) -> dict[str, float]:
        return {name: until for name, until in self.cooling.items() if until > now}

    async def add_usage(self, date: str, fields: Sequence[tuple[str, int]]) -> None:
        self.add_usage_now(date, fields)

    def add_usage_now(self, date: str, fields: Sequence[tuple[str, int]]) -> None:
        """``add_usage``, without an await (the day before is let go)."""
        if date != self.usage_date:
            self.usage_date, self.usage_fields = date, {}
        got = self.usage_fields
        for field, amount in fields:
            got[field] = got.get(field, 0) + amount

    async def usage(self, date: str) -> dict[str, int]:
        return dict(self.usage_fields) if date == self.usage_date else {}

    async def put_blob(self, key: str, data: bytes, ttl: float) -> bool:
        now = self._clock()
        return self.blobs.put(key, data, now + ttl, now)

    async def get_blob(self, key: str) -> bytes | None:
        return self.blobs.get(key, self._clock())

    async def delete_blob(self, key: str) -> bool:
        blobs = self.blobs
        found = blobs.get(key, self._clock()) is not None
        blobs.pop(key)
        return found

    def bound_blobs(self, max_blobs: int, max_blob_bytes: int) -> None:
        """New blob bounds (a reload), evicting what is past them now."""
        self.blobs.max_count = max_blobs
        self.blobs.max_bytes = max_blob_bytes
        self.blobs.shrink()

    def sweep(self, now: float) -> None:
        """Drop every key whose state is spent (see the module docstring)."""
        self._next_sweep = now + SWEEP_SECONDS
        self.rates = {k: tat for k, tat in self.rates.items() if tat > now}
        for table in (self.leases, self.backends):
            for key in list(table):
                table[key].purge(now)
                if not table[key].live:
                    del table[key]
        for key in [k for k, t in self._day_expiry.items() if t <= now]:
            del self._day_expiry[key]
            self.days.pop(key, None)
