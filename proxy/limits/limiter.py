"""``Limiter``: the limits of one worker process, over a store.

``acquire(tenant, model, estimate, ttl)`` finds the rules that apply
(``rules``), asks the store to check and charge them all at once, and answers
a ``Decision``; an allowed request that reserved tokens or took a concurrency
slot holds a ``Lease``, which ``settle(lease, actual_tokens)`` corrects to the
tokens really used and frees (``release``: no correction). With a Redis store
the acquire is one round trip; settling is fire-and-forget (a task), off the
request's path.

The store not answering (``StoreError``) never escapes: ``on_store_error =
"open"`` allows the request without rate headers, ``"closed"`` refuses it
(``Outcome.STORE_UNAVAILABLE``, a 503); ``health`` logs the change of state
once each way and counts the errors. The next request tries the store again,
so it recovers by itself.

A config reload keeps the limiter and its store (and their counts) and swaps
the rules (``reload``); a changed ``[state]`` opens a new store.

Knows nothing of HTTP. Not thread-safe: one event loop per worker.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from prometheus_client.core import CounterMetricFamily, Metric

from flatgate.proxy.limits.algorithms import EPOCH, KINDS, utc_day
from flatgate.proxy.limits.decision import Decision, Lease, Outcome
from flatgate.proxy.limits.health import StoreHealth
from flatgate.proxy.limits.memory import MemoryStore
from flatgate.proxy.limits.rediscluster import one_slot
from flatgate.proxy.limits.redisstore import RedisStore
from flatgate.proxy.limits.redisurl import Kind
from flatgate.proxy.limits.rules import (
    DEFAULT_CACHE_SIZE,
    FULL,
    RuleSet,
    allowed,
    key_part,
)
from flatgate.proxy.limits.sections import (
    LimitsConfig,
    StateSection,
    blob_bounds,
    sentinel_password,
    store_password,
)
from flatgate.proxy.limits.store import Ask, Store, StoreError

__all__ = ["DEFAULT_LEASE_TTL", "Limiter", "open_store"]

T = TypeVar("T")

# A concurrency slot's life when the caller gives none: long enough for a
# reasoning model's first token (edge.first_byte_timeout's default) and then
# some; pass the request's own first-byte + read timeouts, or renew.
DEFAULT_LEASE_TTL: Final = 900.0

UNLIMITED: Final = Decision(True, Outcome.ALLOWED)
_OPEN: Final = Decision(True, Outcome.STORE_UNAVAILABLE)
_CLOSED: Final = Decision(
    False,
    Outcome.STORE_UNAVAILABLE,
    limit="store_unavailable",
    message="the limits store is unavailable",
    retry_after=1.0,
)


def open_store(
    state: StateSection, environ: Mapping[str, str] | None = None, *, server_time: bool = True
) -> Store:
    """The store ``[state]`` names (connections are made on first use)."""
    if state.is_memory:
        return MemoryStore(blob_bounds=blob_bounds(state))
    return RedisStore(
        state.store,
        password=store_password(state, environ),
        sentinel_password=sentinel_password(state, environ),
        timeout_ms=state.timeout_ms,
        pool_size=state.pool_size,
        key_prefix=state.key_prefix,
        server_time=server_time,
        blob_timeout_ms=state.blob_timeout_ms,
        blob_pool_size=state.blob_pool_size,
        blob_bounds=blob_bounds(state),
    )


def check_slots(store: Store, rules: RuleSet) -> None:
    """On a Redis Cluster, every key of one tenant's limits must be in one
    slot (one script per request); ``ValueError`` when one is not."""
    if not isinstance(store, RedisStore) or store.address.kind is not Kind.CLUSTER:
        return
    for tenant in (*rules.tenants(), "*"):
        keys = rules.tenant_keys(tenant)
        if not one_slot(keys):
            raise ValueError(f"the keys of tenant {tenant!r}'s limits span slots: {keys}")


class Limiter:
    """See the module docstring. ``clock`` is Unix time (tests inject one;
    a Redis store in production reads Redis' clock instead, except for the
    UTC day of the day counters, their date and a refusal's wait: this
    process's)."""

    def __init__(
        self,
        config: LimitsConfig,
        store: Store | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self._clock = clock
        self._cache_size = cache_size
        self._environ = environ
        self.config = config
        self.store = open_store(config.state, environ) if store is None else store
        self._local = self.store if isinstance(self.store, MemoryStore) else None
        self.health = StoreHealth(self.store.name, config.state.on_store_error)
        self._unavailable = _CLOSED if config.state.on_store_error == "closed" else _OPEN
        self.rules = RuleSet(config.limits, config.state.key_prefix, cache_size=cache_size)
        check_slots(self.store, self.rules)
        self.tenants = config.tenant_models()
        # Refusals by limit kind (KINDS), and by the store's absence.
        self.refused = dict.fromkeys((*KINDS, "store_unavailable"), 0)
        self._worker = os.urandom(6).hex()
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._date = ""
        self._day_end = 0.0

    def reload(self, config: LimitsConfig) -> None:
        """Swap in a new config's rules and tenants; the store (and every
        count) stays unless ``[state]`` changed (then a new store opens and
        the old one closes in the background; settles still in flight may
        land in either); a memory store kept takes the new bounds on its
        blobs."""
        if not config.state.same_store(self.config.state):
            old = self.store
            self.store = open_store(config.state, self._environ)
            self._local = self.store if isinstance(self.store, MemoryStore) else None
            self.health.name = self.store.name
            self.health.up = True
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # no loop: its connections go with it
                pass
            else:
                self._spawn(old.aclose())
        else:
            self.store.bound_blobs(blob_bounds(config.state))
        self.health.policy = config.state.on_store_error
        self._unavailable = _CLOSED if config.state.on_store_error == "closed" else _OPEN
        self.rules = RuleSet(config.limits, config.state.key_prefix, cache_size=self._cache_size)
        check_slots(self.store, self.rules)
        self.tenants = config.tenant_models()
        self.config = config

    def model_allowed(
        self, tenant: str, model: str, key_models: Sequence[str] | None = None
    ) -> bool:
        """Whether ``[[tenants]]`` (and the caller's key or token, whose
        ``models`` are ``key_models``) let ``tenant`` call ``model``."""
        return allowed(self.tenants.get(tenant), model) and allowed(key_models, model)

    async def acquire(
        self,
        tenant: str,
        model: str,
        estimate: int = 0,
        ttl: float = DEFAULT_LEASE_TTL,
        *,
        phase: int = FULL,
    ) -> Decision:
        """Check and charge every limit on ``tenant`` calling ``model``: one
        request, ``estimate`` tokens reserved (prompt plus the most the
        completion may take), a concurrency slot held for at most ``ttl``
        seconds (unless settled, released or renewed first). ``phase``: all
        of them (``FULL``), or those of one step (``rules.EARLY``, ``LATE``)."""
        plan = self.rules.plan(tenant, model, phase)
        if not plan:
            return UNLIMITED
        if estimate < 0:  # noqa: PLR1730  # a branch is cheaper than max()
            estimate = 0
        unix = self._clock()
        if unix >= self._day_end:
            self._date, left = utc_day(unix)
            self._day_end = unix + left
        keys = plan.keys_on(self._date) if plan.day_at else plan.keys
        # A day refusal waits until the end of the UTC day.
        waits = plan.waits_on(self._day_end - unix) if plan.waits_at else plan.no_waits
        lease_id = self.lease_id() if plan.conc_at else ""
        ask = Ask(plan, keys, unix - EPOCH, estimate, lease_id, ttl, waits)
        if self._local is not None:
            refused, retry, levels = self._local.acquire_now(ask)
        else:
            try:
                refused, retry, levels = await self.store.acquire(ask)
            except asyncio.CancelledError:
                self._forget(ask)
                raise
            except StoreError as exc:
                self._forget(ask)
                self.health.failed(str(exc))
                if not self._unavailable.allowed:
                    self.refused["store_unavailable"] += 1
                return self._unavailable
            self.health.answered()
        if refused < 0:
            lease = Lease(plan, keys, lease_id, estimate, self._date) if plan.leased else None
            return Decision(True, Outcome.ALLOWED, lease=lease, plan=plan, levels=levels)
        check = plan.checks[refused]
        kind = KINDS[check.kind]
        self.refused[kind] += 1
        return Decision(
            False,
            Outcome.LIMITED,
            limit=kind,
            message=check.what,
            retry_after=retry,
            plan=plan,
            levels=levels,
        )

    def _forget(self, ask: Ask) -> None:
        """An acquire whose answer was lost (a timeout, a cancellation) may
        have taken concurrency slots all the same: give them back, in the
        background (removing an absent lease id changes nothing). Tokens it
        may have charged stay charged, against the tenant."""
        if ask.lease_id and ask.plan.conc_at:
            lease = Lease(ask.plan, ask.keys, ask.lease_id, 0, self._date)
            lease.done = True
            self._spawn(self._settle(lease, 0, self._clock() - EPOCH))

    def settle(self, lease: Lease | None, actual_tokens: int) -> None:
        """The request of ``lease`` has ended having used ``actual_tokens``
        (prompt and completion): correct its reservations and free its
        slots. Once per lease; in the background with a Redis store (call
        from the event loop)."""
        if lease is None or lease.done:
            return
        lease.done = True
        now = self._clock() - EPOCH
        if self._local is not None:
            self._local.settle_now(lease, actual_tokens, now)
        else:
            self._spawn(self._settle(lease, actual_tokens, now))

    def release(self, lease: Lease | None) -> None:
        """Free the lease's slots, keeping its reservation as it was."""
        if lease is not None:
            self.settle(lease, lease.estimate)

    async def _settle(self, lease: Lease, actual: int, now: float) -> None:
        try:
            await self.store.settle(lease, actual, now)
        except StoreError as exc:
            self.health.failed(str(exc))
        else:
            self.health.answered()

    async def renew(self, lease: Lease | None, ttl: float) -> bool:
        """Hold the lease's concurrency slots ``ttl`` seconds from now (a
        long stream); ``False`` if one had already expired. A store that does
        not answer counts as renewed."""
        if lease is None or lease.done or not lease.plan.conc_at:
            return True
        try:
            found = await self.store.renew(lease, ttl, self._clock() - EPOCH)
        except StoreError as exc:
            self.health.failed(str(exc))
            return True
        self.health.answered()
        return found

    def record_usage(self, tenant: str, model: str, prompt: int, completion: int) -> None:
        """Count one request of ``tenant`` on ``model`` and its tokens in the
        store's usage of the current UTC day (hash ``<key_prefix>:usage:<date>``,
        fields ``<tenant>:<model>:{requests,prompt_tokens,completion_tokens}``,
        names escaped as in keys); in the background with a Redis store."""
        unix = self._clock()
        if unix >= self._day_end:
            self._date, left = utc_day(unix)
            self._day_end = unix + left
        at = f"{key_part(tenant)}:{key_part(model)}:"
        fields = (
            (at + "requests", 1),
            (at + "prompt_tokens", prompt),
            (at + "completion_tokens", completion),
        )
        if self._local is not None:
            self._local.add_usage_now(self._date, fields)
        else:
            self._spawn(self._add_usage(self._date, fields))

    async def _add_usage(self, date: str, fields: Sequence[tuple[str, int]]) -> None:
        try:
            await self.store.add_usage(date, fields)
        except StoreError as exc:
            self.health.failed(str(exc))

    def lease_id(self) -> str:
        """A lease id unique across workers and instances."""
        return f"{self._worker}:{next(self._ids)}"

    @property
    def clock(self) -> Callable[[], float]:
        """The limiter's Unix clock."""
        return self._clock

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coro`` in the background, tracked (``flush`` waits for it)."""
        return self._spawn(coro)

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def flush(self) -> None:
        """Wait for the settles still in flight."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Finish the settles in flight and close the store."""
        await self.flush()
        await self.store.aclose()

    def collect(self, prefix: str) -> Iterable[Metric]:
        """The limiter's metrics, for ``/metrics``: the store's health and
        ``<prefix>_limits_refused_total{limit}``."""
        yield from self.health.collect(prefix)
        c = CounterMetricFamily(
            f"{prefix}_limits_refused", "Requests refused by a limit", labels=["limit"]
        )
        for kind, count in self.refused.items():
            c.add_metric([kind], count)
        yield c
