"""Backends' state shared through the limiter's store, for the balancer:
requests outstanding per backend, and cooldowns.

Outstanding requests are leases with a time to live (a worker that dies
leaks nothing past it): ``acquire`` takes one unless the backend has
``limit`` already, ``release`` gives it back (in the background). A
cooldown is the Unix time until which a backend is skipped: ``set_cooldown``
writes it (in the background; the later of two wins), ``cooldowns`` reads
every one, at most once per ``cache_seconds`` (one read in flight at a time),
and ``cooling`` is the last read, without waiting (it starts a read when
stale).

A store that does not answer is counted by the limiter's ``health`` and
read as "nothing shared": ``acquire`` answers an unrecorded lease, the reads
the last figures known. The balancer's own per-worker figures still apply.

Knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from flatgate.proxy.limits.algorithms import EPOCH
from flatgate.proxy.limits.store import StoreError

if TYPE_CHECKING:
    from flatgate.proxy.limits.limiter import Limiter

__all__ = ["COOLDOWN_CACHE_SECONDS", "BackendLease", "SharedBackends"]

COOLDOWN_CACHE_SECONDS: Final = 0.1


class BackendLease:
    """One request outstanding on ``backend`` (``recorded``: the store has it)."""

    __slots__ = ("backend", "count", "id", "recorded")

    def __init__(self, backend: str, lease_id: str, count: int, recorded: bool) -> None:
        self.backend = backend
        self.id = lease_id
        # Outstanding on the backend with this one (0 when not recorded).
        self.count = count
        self.recorded = recorded


class SharedBackends:
    """See the module docstring."""

    def __init__(self, limiter: Limiter, *, cache_seconds: float = COOLDOWN_CACHE_SECONDS) -> None:
        self._limiter = limiter
        self._cache_seconds = cache_seconds
        self._cooling: dict[str, float] = {}
        self._read_at = float("-inf")
        self._reading: asyncio.Task[dict[str, float]] | None = None

    async def acquire(self, backend: str, limit: int, ttl: float) -> BackendLease | None:
        """One more request on ``backend`` for at most ``ttl`` seconds, or
        ``None`` when it has ``limit`` outstanding already (0: no limit)."""
        lim = self._limiter
        lease_id = lim.lease_id()
        try:
            count = await lim.store.backend_acquire(
                backend, lease_id, ttl, limit, lim.clock() - EPOCH
            )
        except asyncio.CancelledError:
            # Its answer is lost, not necessarily its lease: give it back.
            lim.spawn(self._release(BackendLease(backend, lease_id, 0, True)))
            raise
        except StoreError as exc:
            lim.health.failed(str(exc))
            lim.spawn(self._release(BackendLease(backend, lease_id, 0, True)))
            return BackendLease(backend, lease_id, 0, False)
        lim.health.answered()
        return None if count < 0 else BackendLease(backend, lease_id, count, True)

    def release(self, lease: BackendLease | None) -> None:
        """The request of ``lease`` has ended (in the background; once)."""
        if lease is None or not lease.recorded:
            return
        lease.recorded = False
        self._limiter.spawn(self._release(lease))

    async def _release(self, lease: BackendLease) -> None:
        lim = self._limiter
        try:
            await lim.store.backend_release(lease.backend, lease.id)
        except StoreError as exc:
            lim.health.failed(str(exc))
        else:
            lim.health.answered()

    async def counts(self, backends: Sequence[str]) -> dict[str, int]:
        """Requests outstanding on each of ``backends`` (``{}`` when the store
        does not answer)."""
        lim = self._limiter
        try:
            counts = await lim.store.backend_counts(backends, lim.clock() - EPOCH)
        except StoreError as exc:
            lim.health.failed(str(exc))
            return {}
        lim.health.answered()
        return dict(zip(backends, counts, strict=True))

    def set_cooldown(self, backend: str, until: float) -> None:
        """Skip ``backend`` until Unix time ``until``, here at once and
        everywhere once written (in the background)."""
        if until > self._cooling.get(backend, 0.0):
            self._cooling[backend] = until
        self._limiter.spawn(self._set(backend, until))

    async def _set(self, backend: str, until: float) -> None:
        lim = self._limiter
        try:
            await lim.store.set_cooldown(backend, until, lim.clock())
        except StoreError as exc:
            lim.health.failed(str(exc))
        else:
            lim.health.answered()

    def cooling(self) -> Mapping[str, float]:
        """The cooldowns last read (ended ones included: compare with the
        clock); starts a read when they are older than ``cache_seconds``."""
        if self._limiter.clock() - self._read_at >= self._cache_seconds and self._reading is None:
            self._reading = self._limiter.spawn(self._read())
        return self._cooling

    async def cooldowns(self) -> Mapping[str, float]:
        """Every cooldown in force (backend to Unix ``until``), read from the
        store at most once per ``cache_seconds``."""
        now = self._limiter.clock()
        if now - self._read_at < self._cache_seconds:
            return {k: v for k, v in self._cooling.items() if v > now}
        if self._reading is None:
            self._reading = self._limiter.spawn(self._read())
        return dict(await asyncio.shield(self._reading))

    async def _read(self) -> dict[str, float]:
        lim = self._limiter
        try:
            now = lim.clock()
            try:
                found = await lim.store.cooldowns(now)
            except StoreError as exc:
                lim.health.failed(str(exc))
                found = {k: v for k, v in self._cooling.items() if v > now}
            else:
                lim.health.answered()
            self._cooling = found
            self._read_at = now
            return found
        finally:
            self._reading = None
