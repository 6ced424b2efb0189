"""The interface both stores implement, and the one error they raise.

A store keeps the limits' state and applies ``algorithms``' rules to it;
``MemoryStore`` in this worker process, ``RedisStore`` in Redis (or Valkey),
shared by every worker of every instance. Times are seconds since
``algorithms.EPOCH``; a store with ``server_time`` reads its own clock and
ignores the ``now`` it is given (``RedisStore`` in production: one clock for
every instance).

Also the shared state of backends, for the balancer: leased outstanding
counts (a worker that dies leaks nothing past the TTL) and cooldowns (the
Unix time until which a backend is skipped). And blobs: opaque bytes under a
key, for a TTL (the Responses API's stored responses), in the store's own
namespace (``<key_prefix>:blob:<key>`` in Redis).

Exceptions: ``StoreError`` (the store did not answer: unreachable, too slow,
or refused); nothing else escapes a store.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits.blobs import BlobBounds, Pieces
from flatgate.proxy.limits.decision import Lease
from flatgate.proxy.limits.rules import Plan

__all__ = ["DEFAULT_BLOB_BOUNDS", "Ask", "Raw", "Store", "StoreError", "settle_deltas"]

_MIB = 1024 * 1024
# The blob bounds of a store made without any: [state]'s defaults
# (``StateSection.blob_bounds``; a stored response is two blobs).
DEFAULT_BLOB_BOUNDS = BlobBounds(2000, 64 * _MIB, 200, 16 * _MIB)

# What an acquire found: the index of the check that refused (-1: none, the
# request is allowed and every check was charged), the seconds to wait, and
# per check its level after the request (as it stands, when refused: a
# refusal charges nothing): a rate's ``tat - now``, a concurrency's leases,
# a day's tokens used.
Raw = tuple[int, float, list[float]]


# Not frozen: a frozen dataclass sets each field through ``object.__setattr__``,
# five times the cost of this one on the limiter's path; nothing changes one.
@dataclass(slots=True)
class Ask:
    """One request's acquire, as the limiter puts it to a store: check every
    check of ``plan`` (under ``keys``, at ``now``) and, when all pass, charge
    them all (all or nothing): one request, one concurrency lease
    ``lease_id`` for ``ttl`` seconds, ``estimate`` tokens. ``waits``: per
    check, the seconds a refusal by it waits, read for the checks whose
    state does not say (``plan.waits_at``, ``algorithms.GIVEN_WAIT``) and
    for no other (``plan.waits_on`` makes them)."""

    plan: Plan
    keys: Sequence[str]
    now: float
    estimate: int
    lease_id: str
    ttl: float
    waits: Sequence[float]


class StoreError(FlatgateError):
    """The store did not answer in time, or refused the operation."""

    default = codes.LIMITS_UNAVAILABLE


# Days a day's usage is kept in the store.
USAGE_DAYS = 40


def usage_key(prefix: str, date: str) -> str:
    """The key of UTC day ``date``'s usage hash."""
    return f"{prefix}:usage:{date}"


def settle_deltas(lease: Lease, actual: int) -> list[tuple[int, int]]:
    """``(check index, token delta)`` for each token check of a lease whose
    request used ``actual`` tokens: the actual count less what was reserved
    (a negative delta gives tokens back)."""
    out = []
    for i in lease.plan.tokens_at:
        delta = actual - min(lease.estimate, lease.plan.checks[i].amount)
        if delta:
            out.append((i, delta))
    return out


class Store(abc.ABC):
    """Limits' state; see the module docstring."""

    # Reads its own clock (the ``now`` arguments are ignored).
    server_time: bool = False
    # Answers synchronously (``acquire_now``): the limiter skips the await.
    local: bool = False
    # What the log calls it (no credentials).
    name: str = ""
    # Its bounds on blobs (a Redis store applies the group's; ``bound_blobs``).
    blob_bounds: BlobBounds = DEFAULT_BLOB_BOUNDS
    _evicted: int = 0

    @abc.abstractmethod
    async def acquire(self, ask: Ask) -> Raw:
        """Answer ``ask`` (see ``Ask``): check, and charge when all pass."""

    @abc.abstractmethod
    async def settle(self, lease: Lease, actual: int, now: float) -> None:
        """Correct the lease's token reservations to ``actual`` and free its
        concurrency slots."""

    @abc.abstractmethod
    async def renew(self, lease: Lease, ttl: float, now: float) -> bool:
        """Extend the lease's concurrency slots to ``now + ttl``; ``False``
        if any had already expired (its slot may have been taken since)."""

    @abc.abstractmethod
    async def backend_acquire(
        self, backend: str, lease_id: str, ttl: float, limit: int, now: float
    ) -> int:
        """Count one more request outstanding on ``backend`` (lease
        ``lease_id``, for ``ttl`` seconds) unless it has ``limit`` already (0:
        no limit); the count after, or ``-1`` when at the limit."""

    @abc.abstractmethod
    async def backend_release(self, backend: str, lease_id: str) -> None:
        """The request of ``lease_id`` is no longer outstanding on ``backend``."""

    @abc.abstractmethod
    async def backend_counts(self, backends: Sequence[str], now: float) -> list[int]:
        """The requests outstanding on each of ``backends``."""

    @abc.abstractmethod
    async def set_cooldown(self, backend: str, until: float, now: float) -> None:
        """Skip ``backend`` until Unix time ``until`` (an earlier ``until``
        than one already set changes nothing); ``now``: Unix time."""

    @abc.abstractmethod
    async def cooldowns(self, now: float) -> dict[str, float]:
        """Every backend cooling down at Unix time ``now``, to its ``until``."""

    @abc.abstractmethod
    async def add_usage(self, date: str, fields: Sequence[tuple[str, int]]) -> None:
        """Add each ``(field, amount)`` to the usage of UTC day ``date``
        (``YYYYMMDD``, as ``algorithms.utc_day``), kept ``USAGE_DAYS`` days."""

    @abc.abstractmethod
    async def usage(self, date: str) -> dict[str, int]:
        """Every field of the usage of UTC day ``date``."""

    @abc.abstractmethod
    async def put_blob(self, key: str, data: bytes | Pieces, ttl: float, group: str = "") -> bool:
        """Keep ``data`` (bytes, or pieces whose concatenation they are)
        under ``key`` for ``ttl`` seconds (replacing what ``key`` held), in
        ``group`` (a tenant: ``BlobBounds``' group bounds hold for each);
        ``False`` when the store's bounds refuse it (a blob larger than a
        group may hold). A memory store keeps the pieces by reference (one
        shared with another blob is held and counted once per group); Redis
        stores their bytes. A key of a group must hold the group's name in
        braces (``{...}``): Redis Cluster keeps the group's keys in its slot."""

    @abc.abstractmethod
    async def get_blob(self, key: str) -> bytes | None:
        """The bytes under ``key`` (``None``: never put, expired, evicted or
        deleted)."""

    def bound_blobs(self, bounds: BlobBounds) -> None:
        """New blob bounds (a reload)."""
        self.blob_bounds = bounds

    @property
    def blobs_evicted(self) -> int:
        """Blobs this process let go before their TTL to keep within the
        bounds (a Redis store: those its puts let go)."""
        return self._evicted

    def blob_usage(self) -> tuple[int, int] | None:
        """(blobs, bytes) held, where this process holds them (a memory
        store); ``None`` for a store elsewhere."""
        return None

    async def get_pieces(self, key: str) -> Pieces | None:
        """The pieces under ``key`` as they were put (a store that keeps
        bytes: one piece), to make another blob of them."""
        data = await self.get_blob(key)
        return None if data is None else (data,)

    @abc.abstractmethod
    async def delete_blob(self, key: str, group: str = "") -> bool:
        """Let go of the bytes under ``key`` (put in ``group``); whether it held any."""

    async def aclose(self) -> None:  # noqa: B027  # optional
        """Let go of connections."""
