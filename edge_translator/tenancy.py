"""What a tenant may do at the edge: which models it may call, and its limits.

Owns ``Tenancy``, one per worker, over a ``limits.Limiter``:

- **Models.** A caller may use a model when every allow-list that applies lets
  it through: its ``[[tenants]]`` entry's ``models``, and its credential's
  (``[[keys]] models``, or the JWT's ``models_claim``). The requested name or
  the model's own name may match (an alias of an allowed model is allowed).
  Any other model is ``model_not_found``, as if it did not exist, and the
  model endpoints (``listed``, ``visible``; ``model_endpoints`` renders
  them) show only what the caller may use.
- **Limits.** In two steps (``limits.rules``' phases). As soon as the caller
  is known, before its body is read, ``admit_caller`` charges the limits no
  model changes (the ``model = "*"`` rules' requests per minute and streams
  in flight), so that a tenant over them holds no body bytes at all; a
  request whose body then fails keeps its request charge and gives its slot
  back (``release_caller``). Before the request goes to the proxy, ``admit``
  reserves the rest against the tenant's ``[[limits]]``: one request, a
  concurrency slot, and its tokens (``wire.request.estimate.reservation``: the prompt's estimate
  plus ``max_tokens``, or ``[state] default_max_tokens``; an embeddings
  request's, the estimate of its inputs). A spent limit is a
  429 ``tenant_rate_limited`` (Retry-After; the message names the limit)
  before any backend is contacted; the store not answering with
  ``on_store_error = "closed"`` a 503 ``limits_unavailable``. ``settle``
  corrects the reservation to the usage the backend reported (the estimate
  stays when it reported none; nothing is charged when no answer came).
- **Usage.** Each answered request's tokens, per tenant and model: in
  ``/metrics`` (``flatgate_edge_tenant_*``; tenants beyond the configured ones
  share the label ``"other"`` past ``MAX_TENANT_LABELS``) and per UTC day in
  the store (``Limiter.record_usage``).

``reload`` swaps in a new config's models, allow-lists and limits, keeping
the limiter's store and its counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client.core import CounterMetricFamily, Metric

from flatgate.edge_translator.errors import ModelNotFound, shown
from flatgate.edge_translator.keys import Identity
from flatgate.edge_translator.model_endpoints import Listed, openai_list
from flatgate.edge_translator.settings import EdgeSettings, ModelConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits import DEFAULT_LEASE_TTL, Decision, Lease, Limiter, allowed
from flatgate.proxy.limits.decision import Outcome
from flatgate.proxy.limits.rules import EARLY, FULL, LATE
from flatgate.proxy.transport.base import retry_after_value
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.request.estimate import reservation

__all__ = ["FREE", "MAX_TENANT_LABELS", "Admitted", "Tenancy", "with_headers"]

# Distinct tenant labels in /metrics beyond the configured tenants.
MAX_TENANT_LABELS: Final = 100
_OTHER: Final = "other"
_PREFIX: Final = "flatgate_edge"


class Admitted:
    """One admitted request: its lease (``None``: nothing to settle) and the
    rate headers its answer carries."""

    __slots__ = ("headers", "lease", "reserved")

    def __init__(self, lease: Lease | None, headers: list[tuple[str, str]], reserved: int) -> None:
        self.lease = lease
        self.headers = headers
        self.reserved = reserved


# An admission with nothing held (no limit applies).
FREE: Final = Admitted(None, [], 0)


def with_headers(
    headers: list[tuple[str, str]], more: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """``headers`` and those of ``more`` it does not name (an answer's rate
    headers from both of its admissions, the later one's first)."""
    if not more:
        return headers
    names = {name for name, _ in headers}
    return headers + [h for h in more if h[0] not in names]


def _refusal(d: Decision) -> FlatgateError:
    headers = [h for h in d.headers() if h[0] != "retry-after"]
    if d.outcome is Outcome.STORE_UNAVAILABLE:
        code = codes.LIMITS_UNAVAILABLE
        message = "The limits store is unavailable; retry shortly."
    else:
        code = codes.TENANT_RATE_LIMITED
        wait = retry_after_value(d.retry_after)  # as Retry-After says it
        message = f"Rate limit reached: {d.message}. Retry after {wait} s."
    return FlatgateError(message, code=code, retry_after=d.retry_after, headers=headers)


class Tenancy:
    """See the module docstring. ``limiter``: one made from the settings when
    not given (tests share one)."""

    def __init__(self, settings: EdgeSettings, limiter: Limiter | None = None) -> None:
        self.limiter = Limiter(settings.limits_config()) if limiter is None else limiter
        self._apply(settings)
        # (tenant label, model) -> [requests, prompt tokens, completion tokens]
        self._usage: dict[tuple[str, str], list[int]] = {}
        # Leases holding concurrency slots, renewed while their requests run.
        self._held: set[Lease] = set()
        self._renewal: asyncio.TimerHandle | None = None
        self._labels: set[str] = set()

    def _apply(self, settings: EdgeSettings) -> None:
        limits = settings.limits_config()
        self._models: tuple[ModelConfig, ...] = settings.models
        self._default_max = limits.state.default_max_tokens
        self._ttl = settings.edge.total_timeout or DEFAULT_LEASE_TTL
        self._tenant_models = limits.tenant_models()
        # Whether any request needs admit(): limits, or [[tenants]] lists.
        self.active = bool(limits.limits) or any(t.models is not None for t in limits.tenants)
        self._listed: dict[tuple[str, tuple[str, ...] | None], tuple[Listed, ...]] = {}
        self._listings: dict[tuple[str, tuple[str, ...] | None], bytes] = {}
        self._by_id = {name: Listed(name, m) for m in self._models for name in (m.name, *m.aliases)}
        self._configured = (
            {k.tenant for k in settings.keys}
            | {t.name for t in limits.tenants}
            | {r.tenant for r in limits.limits if r.tenant != "*"}
        )

    def reload(self, settings: EdgeSettings) -> None:
        """A new config's models, allow-lists and limits (counts kept)."""
        self.limiter.reload(settings.limits_config())
        self._apply(settings)

    # -- models ---------------------------------------------------------------

    def may_use(self, identity: Identity, requested: str, model: str) -> bool:
        """Whether ``identity`` may call ``model`` (asked for as ``requested``)."""
        for globs in (self._tenant_models.get(identity.tenant), identity.models):
            if globs is not None and not (allowed(globs, model) or allowed(globs, requested)):
                return False
        return True

    def check(self, identity: Identity, requested: str, model: str) -> None:
        """Raise ``model_not_found`` unless ``identity`` may call ``model``."""
        if not self.may_use(identity, requested, model):
            raise ModelNotFound(
                f"The model '{shown(requested)}' does not exist or you do not have access to it.",
                param="model",
            )

    def listed(self, identity: Identity) -> tuple[Listed, ...]:
        """The models ``identity`` may use, each name and alias in
        configuration order."""
        key = (identity.tenant, identity.models)
        found = self._listed.get(key)
        if found is None:
            found = tuple(
                item
                for item in self._by_id.values()
                if self.may_use(identity, item.id, item.model.name)
            )
            if len(self._listed) < 4096:  # bounded by configuration in practice
                self._listed[key] = found
        return found

    def visible(self, identity: Identity, model_id: str) -> Listed | None:
        """The model ``model_id`` names (a name or an alias), when
        ``identity`` may use it; ``None`` otherwise, as for no such model."""
        item = self._by_id.get(model_id)
        if item is None or not self.may_use(identity, model_id, item.model.name):
            return None
        return item

    def listing(self, identity: Identity) -> bytes:
        """``GET /v1/models``'s body for ``identity`` in OpenAI's shape."""
        key = (identity.tenant, identity.models)
        body = self._listings.get(key)
        if body is None:
            body = openai_list(self.listed(identity))
            if len(self._listings) < 4096:  # bounded by configuration in practice
                self._listings[key] = body
        return body

    # -- limits ---------------------------------------------------------------

    async def admit_caller(self, tenant: str) -> Admitted:
        """Charge ``tenant``'s limits that no model changes, before its body is
        read (``FREE`` when none apply); raises the refusal as an ``FlatgateError``."""
        if not self.active or not self.limiter.rules.plan(tenant, "", EARLY):
            return FREE
        return self._held_for(await self.limiter.acquire(tenant, "", 0, self._ttl, phase=EARLY), 0)

    def release_caller(self, admitted: Admitted) -> None:
        """The request of ``admit_caller`` has ended: its slot goes back, its
        request charge stays."""
        lease = admitted.lease
        if lease is not None:
            self._held.discard(lease)
            self.limiter.settle(lease, 0)

    async def admit(
        self,
        tenant: str,
        model: str,
        frame: bytes,
        *,
        after_caller: bool = False,
        tokens: Callable[[], int] | None = None,
    ) -> Admitted:
        """Reserve a request of ``tenant`` on ``model`` (its FlatBuffer
        ``frame``) against the limits (``after_caller``: those
        ``admit_caller`` did not charge); raises the refusal as an ``FlatgateError``.
        ``tokens``: what it reserves of the token limits, when its frame is no
        ``CompletionRequest`` (an embeddings request's prompt estimate)."""
        if not self.active:
            return FREE
        phase = LATE if after_caller else FULL
        plan = self.limiter.rules.plan(tenant, model, phase)  # cached
        # The estimate reads the whole buffer: only when tokens are counted.
        estimate = 0
        if plan and plan.tokens_at:
            estimate = reservation(frame, self._default_max) if tokens is None else tokens()
        d = await self.limiter.acquire(tenant, model, estimate, self._ttl, phase=phase)
        return self._held_for(d, estimate)

    def _held_for(self, d: Decision, estimate: int) -> Admitted:
        """An allowed decision's admission, its slots renewed while held; a
        refusal raised."""
        if not d.allowed:
            raise _refusal(d)
        lease = d.lease
        if lease is not None and lease.plan.conc_at:
            self._held.add(lease)
            if self._renewal is None:
                loop = asyncio.get_running_loop()
                self._renewal = loop.call_later(self._ttl / 2, self._renew)
        return Admitted(lease, d.headers(), estimate)

    def _renew(self) -> None:
        """Every half TTL, while requests hold concurrency slots: renew each
        one's lease, so that a stream longer than the lease keeps its slot
        (one timer per worker, not one per request)."""
        held = self._held
        for lease in list(held):
            if lease.done:
                held.discard(lease)
            else:
                self.limiter.spawn(self.limiter.renew(lease, self._ttl))
        self._renewal = (
            asyncio.get_running_loop().call_later(self._ttl / 2, self._renew) if held else None
        )

    def settle(
        self, tenant: str, model: str, admitted: Admitted, usage: Usage | None, answered: bool
    ) -> None:
        """The request has ended: correct its reservation to ``usage`` (kept
        when the backend reported none; dropped when no answer came), and
        count its usage."""
        lease = admitted.lease
        if lease is not None:
            self._held.discard(lease)
        if usage is not None:
            total = usage.prompt_tokens + usage.completion_tokens
            self.limiter.settle(lease, total)
        elif answered:
            self.limiter.release(lease)
        else:
            self.limiter.settle(lease, 0)
        if not answered:
            return
        prompt = usage.prompt_tokens if usage is not None else 0
        completion = usage.completion_tokens if usage is not None else 0
        label = tenant if tenant in self._configured or tenant in self._labels else None
        if label is None:
            if len(self._labels) < MAX_TENANT_LABELS:
                self._labels.add(tenant)
                label = tenant
            else:
                label = _OTHER
        counts = self._usage.get((label, model))
        if counts is None:
            counts = self._usage[label, model] = [0, 0, 0]
        counts[0] += 1
        counts[1] += prompt
        counts[2] += completion
        if not self.limiter.store.local:  # a memory store's day: /metrics has it
            self.limiter.record_usage(tenant, model, prompt, completion)

    def collect(self) -> Iterable[Metric]:
        """``flatgate_edge_tenant_{requests,tokens}_total`` and the limiter's."""
        requests = CounterMetricFamily(
            f"{_PREFIX}_tenant_requests",
            "Requests answered, by tenant and model",
            labels=["tenant", "model"],
        )
        tokens = CounterMetricFamily(
            f"{_PREFIX}_tenant_tokens",
            "Tokens the backends reported, by tenant, model and kind",
            labels=["tenant", "model", "kind"],
        )
        for (tenant, model), (n, prompt, completion) in self._usage.items():
            requests.add_metric([tenant, model], n)
            tokens.add_metric([tenant, model, "prompt"], prompt)
            tokens.add_metric([tenant, model, "completion"], completion)
        yield requests
        yield tokens
        yield from self.limiter.collect(_PREFIX)

    async def aclose(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        await self.limiter.aclose()
