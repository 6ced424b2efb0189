"""Choosing backends: weights, outstanding requests, cool-downs, fallbacks.

Owns per-backend state in one worker (outstanding requests, cooled-down-until)
and the order in which a route's backends are tried. Pure apart from the clock,
which is injected; no I/O.

Order for one request: the route's primary backends, then its fallbacks; within
each group, backends not cooling down first, ordered by
``(outstanding + 1) / weight`` (least loaded per unit of weight), ties broken by
a rotating counter so equal backends share the load. Backends cooling down go
last (a cooled backend is still better than no answer). Backends at their
``max_outstanding`` are left out.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from flatgate.proxy.backends.base import Adapter
from flatgate.proxy.backends.registry import adapter_for
from flatgate.proxy.backends.section import FIRST_BYTE_TIMEOUT, BackendConfig
from flatgate.proxy.limits import SharedBackends
from flatgate.proxy.transport.base import Timeouts

__all__ = ["Backend", "Balancer", "RouteTarget"]


@dataclass(eq=False, slots=True)
class Backend:
    name: str
    url: str
    adapter: Adapter
    weight: int
    max_outstanding: int
    timeouts: Timeouts
    # The TLS context an https backend is verified with (None: the system's).
    tls: ssl.SSLContext | None = None
    outstanding: int = 0
    cooldown_until: float = 0.0
    failures: int = 0

    @property
    def protocol(self) -> str:
        return self.adapter.protocol

    @classmethod
    def from_config(cls, cfg: BackendConfig) -> Backend:
        adapter = adapter_for(cfg)
        # A translated protocol's first byte may take a reasoning model's minutes.
        first_byte = cfg.first_byte_timeout or (
            FIRST_BYTE_TIMEOUT if adapter.translated else cfg.read_timeout
        )
        return cls(
            name=cfg.name,
            url=cfg.url.rstrip("/"),
            adapter=adapter,
            weight=cfg.weight,
            max_outstanding=cfg.max_outstanding,
            timeouts=Timeouts(
                connect=cfg.connect_timeout,
                read=cfg.read_timeout,
                total=cfg.total_timeout or None,
                first_byte=first_byte,
            ),
            tls=ssl.create_default_context(cafile=cfg.ca_file) if cfg.ca_file else None,
        )


@dataclass(frozen=True, slots=True)
class RouteTarget:
    """One configured route: its label (the ``model`` pattern) and backends."""

    label: str
    backends: tuple[Backend, ...]
    fallbacks: tuple[Backend, ...] = field(default=())


class Balancer:
    def __init__(
        self,
        cooldown_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        shared: SharedBackends | None = None,
    ):
        """``shared``: cooldowns also written to, and read from, the limits
        store (every worker and instance skips a backend one of them saw fail)."""
        self.cooldown_seconds = cooldown_seconds
        self._clock = clock
        self._turn = 0
        self.shared = shared

    def plan(self, route: RouteTarget) -> list[Backend]:
        """Backends to try, in order, for one request on ``route``."""
        if len(route.backends) == 1 and not route.fallbacks:
            b = route.backends[0]
            return [b] if not b.max_outstanding or b.outstanding < b.max_outstanding else []
        now = self._clock()
        self._turn += 1
        return self._order(route.backends, now) + self._order(route.fallbacks, now)

    def _order(self, group: Sequence[Backend], now: float) -> list[Backend]:
        n = len(group)
        if not n:
            return []
        turn = self._turn
        ranked = []
        elsewhere: Mapping[str, float] = {}
        unix = 0.0
        if self.shared is not None:
            elsewhere = self.shared.cooling()
            unix = time.time()
        for i, b in enumerate(group):
            if b.max_outstanding and b.outstanding >= b.max_outstanding:
                continue
            until = b.cooldown_until
            cooling = until > now
            if not cooling and elsewhere.get(b.name, 0.0) > unix:
                cooling, until = True, now + elsewhere[b.name] - unix
            ranked.append(
                (
                    cooling,
                    until if cooling else 0.0,
                    (b.outstanding + 1) / b.weight,
                    (i - turn) % n,
                    b,
                )
            )
        ranked.sort(key=lambda r: r[:4])
        return [r[4] for r in ranked]

    def failed(self, backend: Backend, seconds: float | None = None) -> None:
        """``backend`` failed before its first byte: cool it down (for ``seconds``
        when it said how long, as a 429's Retry-After does)."""
        backend.failures += 1
        wait = self.cooldown_seconds if seconds is None else seconds
        backend.cooldown_until = max(backend.cooldown_until, self._clock() + wait)
        if self.shared is not None:
            self.shared.set_cooldown(backend.name, time.time() + wait)

    def succeeded(self, backend: Backend) -> None:
        backend.cooldown_until = 0.0
