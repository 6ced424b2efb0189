"""``MemoryStore``: the limits' state in this worker process's dicts.

The embedded default: each granian worker (a process) counts on its own, so
with ``W`` workers a tenant gets up to ``W`` times its limits; a Redis store
shares one count. The arithmetic is ``algorithms``' (the Lua scripts'
twin, operation for operation). Bounded: every ``SWEEP_SECONDS`` a pass drops
the keys whose state is spent (a rate back to full, a concurrency set with
no live lease, a day counter two days old), so the dicts hold only what
limits requests now. The limiter keeps its store across config reloads, and
keys are named by rule, so counts survive a reload.

Blobs (stored responses) are ``blobs.Blobs``: bounded in count and in bytes
in all (``[state] memory_max_responses`` and
``memory_max_response_bytes_total``) and per group, a tenant
(``max_responses_per_tenant``, ``max_response_bytes_per_tenant``), so that
no tenant evicts another's. Per process, like the counts: another worker
does not see them.

Synchronous under its ``async`` face (``acquire_now``); one event loop thread.
"""

from __future__ import annotations

import heapq
import time
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
from flatgate.proxy.limits.blobs import BlobBounds, Blobs, Pieces
from flatgate.proxy.limits.decision import Lease
from flatgate.proxy.limits.rules import Plan
from flatgate.proxy.limits.store import DEFAULT_BLOB_BOUNDS, Ask, Raw, Store

__all__ = ["SWEEP_SECONDS", "MemoryStore"]

SWEEP_SECONDS: Final = 10.0
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


class MemoryStore(Store):
    """See the module docstring. ``clock``: the blobs' (monotonic) seconds."""

    local = True
    name = "memory"

    def __init__(
        self,
        *,
        blob_bounds: BlobBounds = DEFAULT_BLOB_BOUNDS,
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
        self.blob_bounds = blob_bounds
        self.blobs = Blobs(blob_bounds)
        self._clock = clock

    def __len__(self) -> int:
        """Limits' keys held (every kind; the blobs are ``blobs.Blobs.items``)."""
        return len(self.rates) + len(self.leases) + len(self.days) + len(self.backends)

    def acquire_now(self, ask: Ask) -> Raw:
        """``acquire``, synchronously."""
        plan, keys, now, estimate = ask.plan, ask.keys, ask.now, ask.estimate
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
                    charge.append((kind, key, now + ask.ttl))
            else:  # a counter whose window its key names: its wait is given
                cost = min(estimate, limit)
                used = self.days.get(key, 0)
                if used >= limit or used + cost > limit:
                    wait = ask.waits[i]
                    if refused < 0 or wait > retry:
                        refused, retry = i, wait
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
                self.leases[key].add(ask.lease_id, value)
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

    async def acquire(self, ask: Ask) -> Raw:
        return self.acquire_now(ask)

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

    async def put_blob(self, key: str, data: bytes | Pieces, ttl: float, group: str = "") -> bool:
        now = self._clock()
        pieces = (data,) if isinstance(data, bytes) else data
        return self.blobs.put(key, pieces, now + ttl, now, group)

    async def get_blob(self, key: str) -> bytes | None:
        pieces = self.blobs.get(key, self._clock())
        if pieces is None:
            return None
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def get_pieces(self, key: str) -> Pieces | None:
        return self.blobs.get(key, self._clock())

    async def delete_blob(self, key: str, group: str = "") -> bool:
        blobs = self.blobs
        found = blobs.get(key, self._clock()) is not None
        blobs.pop(key)
        return found

    @property
    def blobs_evicted(self) -> int:
        return self.blobs.evicted

    def blob_usage(self) -> tuple[int, int] | None:
        return len(self.blobs.items), self.blobs.size

    def bound_blobs(self, bounds: BlobBounds) -> None:
        """New blob bounds (a reload), evicting what is past them now."""
        self.blob_bounds = self.blobs.bounds = bounds
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
