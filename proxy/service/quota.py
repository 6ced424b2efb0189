"""Tenants' limits at the proxy, for its internal ``.fbs`` callers.

Owns ``ProxyLimits``. A request that names a ``tenant`` (which only a caller
holding the proxy's bearer token may, when ``auth_token_sha256`` is set) is
held to that tenant's ``[[limits]]`` as at the edge: one request, a
concurrency slot and its tokens (``wire.request.estimate.reservation``: the prompt's
estimate plus ``max_tokens``, or ``[state] default_max_tokens``) are reserved
before any backend is contacted; a spent limit is a 429
``tenant_rate_limited`` with Retry-After, the store down with
``on_store_error = "closed"`` a 503 ``limits_unavailable``.

A request the edge has admitted already carries ``x-flatgate-admitted``
(``wire.schema.ADMITTED_HEADER``) and is not counted twice; only a caller the
proxy trusts with tenants can send it. The one-process gateway's router
keeps no limits of its own (its edge does).

When the request ends, its reservation is settled to the prompt estimate
plus the completion tokens of the final chunk (read from the last frame
relayed), kept as reserved when the backend reported none, and dropped when
no answer came.

An embeddings request (``admit_embeddings``) is held to the same limits: one
request, a concurrency slot, and its prompt's tokens, estimated from its
inputs (``embedding_estimate``: the same bytes-per-token rule as a chat
prompt, without the per-message template; token ids count themselves). It
is settled to the answer's ``prompt_tokens`` (``settle`` with no completion
of its own), kept as reserved when the backend reported none.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from flatgate.proxy.errors import codes
from flatgate.proxy.limits import DEFAULT_LEASE_TTL, Lease, Limiter, LimitsConfig
from flatgate.proxy.limits.decision import Outcome
from flatgate.proxy.service.errors import ProxyError
from flatgate.proxy.wire.embeddings import EmbeddingInput
from flatgate.proxy.wire.request.estimate import estimate_request, estimate_tokens, reservation

__all__ = ["ProxyLimits", "embedding_estimate"]


def embedding_estimate(request: EmbeddingInput) -> int:
    """The prompt tokens of an embeddings request before a backend has
    counted them: ``estimate_tokens`` of each text (no messages, so no
    template tokens), or the number of token ids given."""
    if request.tokens:
        return sum(len(ids) for ids in request.tokens)
    return sum(estimate_tokens(len(text.encode("utf-8")), 0) for text in request.texts)


class ProxyLimits:
    """See the module docstring; one per worker."""

    def __init__(self, config: LimitsConfig, limiter: Limiter | None = None) -> None:
        self.limiter = Limiter(config) if limiter is None else limiter
        self._apply(config)

    def _apply(self, config: LimitsConfig) -> None:
        self.active = bool(config.limits)
        self._default_max = config.state.default_max_tokens

    def reload(self, config: LimitsConfig) -> None:
        """A new config's limits; the store and its counts stay."""
        self.limiter.reload(config)
        self._apply(config)

    async def admit(self, body: bytes, tenant: str, model: str) -> tuple[Lease | None, int]:
        """Reserve the request ``body`` of ``tenant`` on ``model``: its lease
        and its prompt's estimate; raises the refusal as a ``ProxyError``."""
        lease = await self._acquire(tenant, model, reservation(body, self._default_max))
        return lease, estimate_request(body)

    async def admit_embeddings(
        self, request: EmbeddingInput, tenant: str, model: str
    ) -> Lease | None:
        """Reserve the embeddings ``request`` of ``tenant`` on ``model``
        (its prompt's ``embedding_estimate``): its lease, settled with
        ``settle(lease, 0, prompt_tokens, answered)``; raises the refusal as a
        ``ProxyError``."""
        return await self._acquire(tenant, model, embedding_estimate(request))

    async def _acquire(self, tenant: str, model: str, estimate: int) -> Lease | None:
        """One request and ``estimate`` tokens of ``tenant`` on ``model``;
        raises the refusal as a ``ProxyError``."""
        d = await self.limiter.acquire(tenant, model, estimate, DEFAULT_LEASE_TTL)
        if d.allowed:
            return d.lease
        if d.outcome is Outcome.STORE_UNAVAILABLE:
            raise ProxyError(
                codes.LIMITS_UNAVAILABLE,
                "the limits store is unavailable; retry shortly",
                retry_after=d.retry_after,
            )
        raise ProxyError(
            codes.TENANT_RATE_LIMITED, f"rate limit reached: {d.message}", retry_after=d.retry_after
        )

    def settle(
        self, lease: Lease | None, prompt: int, completion: int | None, answered: bool
    ) -> None:
        """The request has ended (see the module docstring)."""
        if lease is None:
            return
        if not answered:
            self.limiter.settle(lease, 0)
        elif completion is None:
            self.limiter.release(lease)
        else:
            self.limiter.settle(lease, prompt + completion)

    def collect(self) -> Iterable[Metric]:
        return self.limiter.collect("flatgate")

    async def aclose(self) -> None:
        await self.limiter.aclose()
