"""From a routed request to an open answer: choose backends, send, fail over.

``Dispatcher.open`` takes the caller's ``CompletionRequest`` bytes and their
route target, tries the route's backends in the balancer's order (fallbacks
last) until one answers 200, and returns an ``Opened`` answer: the backend,
its response and the translator that turns its body into chunk frames. Each
backend is sent what its adapter prepares: the untouched bytes for ``fbs``,
the adapter's JSON for ``openai``/``anthropic`` (the request is verified and
decoded once, however many JSON backends are tried). A backend whose
``serves`` leaves out completions (``Dispatcher.refusing``) is skipped; a
route with no other is a 400 ``untranslatable_request`` naming it.

``Dispatcher.first`` is that loop for any kind of request, written once: the
embeddings flow (``service.embed``) runs it too, with its own ``prepare`` and
its own ``take`` of a 200 answer (which reads the whole body, and may still
fail over when that body breaks off, nothing having reached the caller).

Before the first byte, by what a backend answered (``backends.base``):

- 200: done; the backend's cooldown is cleared;
- a 4xx the caller caused: passed back at once (its status, its message and
  any ``Retry-After``), no failover;
- 401/403: flatgate's own credential is wrong: logged, the backend cooled
  down, the next tried; when none is left, 502 ``backend_auth_failed``;
- 429: the backend cooled down for its ``Retry-After``, the next tried; when
  none is left, 429 ``backend_rate_limited`` with the smallest ``Retry-After``;
- 408, 5xx, 529, refused or timed out: cooled down, the next tried;
- no free pooled connection within the pool timeout (flatgate's own limit):
  the next tried, the backend's health untouched; when none is left, 503
  ``pool_exhausted`` with ``Retry-After``.

At most ``max_attempts`` backends are tried per request (every backend sent
to, fallbacks included; 0: no bound). When every backend is at its
``max_outstanding``, 503 ``backends_busy`` with ``Retry-After``.

Every attempt counts one outstanding request on its backend until the answer
is closed (``Opened.close``) or refused. The fields a backend that answered
was not sent (``Outbound.omitted``) go with its answer (``Opened.omitted``)
and are counted in ``flatgate_proxy_dropped_fields_total`` by backend and
field. Shared by the HTTP app and the
in-process router; knows nothing of HTTP servers. It refuses with a
``service.errors.ProxyError``; a buffer that cannot be read for a JSON backend
is the wire layer's ``MalformedBuffer``, mapped where the callers map the rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from flatgate.proxy.backends.base import (
    Inbound,
    Outbound,
    Probe,
    RefusalKind,
    Translator,
    Untranslatable,
)
from flatgate.proxy.backends.extras import omitted_label
from flatgate.proxy.errors import codes
from flatgate.proxy.limits import BackendLease, SharedBackends
from flatgate.proxy.plumbing.instruments import CountFamily
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.telemetry import Span, Tracing, attempt_attributes
from flatgate.proxy.plumbing.telemetry import headers as trace_headers
from flatgate.proxy.service.balancer import Backend, Balancer, RouteTarget
from flatgate.proxy.service.errors import (
    BUSY_RETRY_AFTER,
    ProxyError,
    timed_out,
    unreachable,
    without_addresses,
)
from flatgate.proxy.transport.base import (
    Response,
    Timeouts,
    Transport,
    Upstream,
    UpstreamError,
    UpstreamPoolTimeout,
    UpstreamTimeout,
)
from flatgate.proxy.transport.credentials import CredentialsUnavailable
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.request.verify import MAX_BYTES, verify_request

__all__ = ["Attempt", "Dispatcher", "Opened"]

T = TypeVar("T")

log = logging.getLogger("flatgate.proxy")


@dataclass(frozen=True, slots=True)
class Attempt:
    """A backend's 200 answer, its head received (``Dispatcher.first``'s
    ``take`` is handed it): the backend, what it was sent, its response, when
    it was sent, and its outstanding request in the shared store (None: none)."""

    backend: Backend
    out: Outbound
    response: Response
    started: float
    lease: BackendLease | None
    # The attempt's span (telemetry on), ended by what ``take`` makes of it.
    span: Span | None = None


@dataclass(slots=True)
class Opened:
    """A backend's 200 answer, being received."""

    backend: Backend
    response: Response
    translator: Translator
    started: float
    _metrics: Metrics
    # The backend's outstanding request in the shared store (None: none).
    lease: BackendLease | None = None
    shared: SharedBackends | None = None
    # The request's fields the backend was not sent (``Outbound.omitted``):
    # the proxy's answer names them (``OMITTED_HEADER``).
    omitted: tuple[str, ...] = ()
    # The backend attempt's span (telemetry on): it ends with the answer.
    span: Span | None = None
    _closed: bool = False

    async def close(self) -> None:
        """Release the connection and the backend's outstanding count (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.response.aclose()
        finally:
            if self.span is not None:
                self.span.end()
            self.backend.outstanding -= 1
            if self.shared is not None:
                self.shared.release(self.lease)
            self._metrics.upstream_duration_of(self.backend.name).observe(
                time.perf_counter() - self.started
            )


class _Decoded:
    """The request verified and decoded, once, on first use; ``max_bytes``
    bounds what it may expand to (``verify_request``). A ``trusted`` buffer
    (the one-process gateway's edge wrote it, from a body it bounded) is
    read without the verifier's walk."""

    __slots__ = ("_body", "_max_bytes", "_request", "_trusted")

    def __init__(self, body: bytes, max_bytes: int, trusted: bool = False) -> None:
        self._body = body
        self._max_bytes = max_bytes
        self._trusted = trusted
        self._request: Request | None = None

    def __call__(self) -> Request:
        if self._request is None:
            if not self._trusted:
                verify_request(self._body, max_bytes=self._max_bytes)
            self._request = read_request(self._body)
        return self._request


@dataclass(slots=True)
class _Failures:
    """What went wrong with each backend tried, to answer when none is left."""

    rate_limited: float | None = None
    limited: bool = False
    auth: str = ""
    answered: str = ""
    timeout: str = ""
    unreachable: str = ""
    untranslatable: str = ""
    pool_full: str = ""
    busy: bool = False

    def error(self) -> ProxyError:
        if self.limited:
            return ProxyError(
                codes.BACKEND_RATE_LIMITED,
                "every backend of this route is rate limiting",
                retry_after=self.rate_limited,
            )
        if self.auth:
            return ProxyError(codes.BACKEND_AUTH_FAILED, self.auth)
        if self.answered:
            return ProxyError(codes.BACKEND_ERROR, self.answered)
        if self.timeout:
            return timed_out(self.timeout)
        if self.pool_full and not self.unreachable:
            return ProxyError(codes.POOL_EXHAUSTED, self.pool_full, retry_after=BUSY_RETRY_AFTER)
        if self.untranslatable and not self.unreachable:
            return ProxyError(codes.UNTRANSLATABLE_REQUEST, self.untranslatable)
        if self.busy and not self.unreachable:
            return _busy()
        return unreachable(self.unreachable)


# A shared outstanding request's longest life: a worker that dies leaks its
# count no longer than this.
_LEASE_TTL = 900.0
# The least a rate-limited answer asks the caller to wait, in seconds.
MIN_RETRY_AFTER = 1.0


def _busy() -> ProxyError:
    return ProxyError(
        codes.BACKENDS_BUSY,
        "every backend of this route is at its limit",
        retry_after=BUSY_RETRY_AFTER,
    )


def _failed(span: Span | None, kind: str) -> None:
    if span is not None:
        span.fail(kind)
        span.end()


def _release(shared: SharedBackends | None, lease: BackendLease | None) -> None:
    if shared is not None:
        shared.release(lease)


class Dispatcher:
    """Sends requests to a route's backends; one per worker (per event loop)."""

    def __init__(
        self,
        balancer: Balancer,
        metrics: Metrics,
        transport: Callable[[], Transport],
        max_attempts: int = 0,
        shared: SharedBackends | None = None,
        *,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        """``shared``: backends' ``max_outstanding`` counted in the limits
        store, across workers and instances (also the balancer's cooldowns).
        ``max_bytes``: what a request decoded for a JSON backend may expand
        to (the service's ``max_body_bytes``; see ``wire.request.verify``)."""
        self.balancer = balancer
        self.metrics = metrics
        self._transport = transport
        self.max_attempts = max_attempts
        self.shared = shared
        self.max_bytes = max_bytes
        # The backends that serve no completions (``BackendConfig.kinds``),
        # by name: skipped (set by the service, at each reload).
        self.refusing: frozenset[str] = frozenset()
        # OpenTelemetry (set by the service; None: off): a span per attempt.
        self.tracing: Tracing | None = None
        self._omitted = CountFamily(
            f"{metrics.prefix}_proxy_dropped_fields",
            "Request fields a backend was not sent (named in x-flatgate-dropped-fields), "
            "by backend and field.",
            ["backend", "field"],
        )
        metrics.collect_from(self._omitted.collect)

    async def open(
        self,
        target: RouteTarget,
        body: bytes,
        request_id: str,
        authorization: str = "",
        *,
        trusted: bool = False,
    ) -> Opened:
        """The first backend's 200 answer; ``ProxyError`` when none gives one,
        ``MalformedBuffer`` when the request cannot be read for one.
        ``trusted``: ``body`` was written in this process (``_Decoded``)."""
        decoded = _Decoded(body, self.max_bytes, trusted)
        call = Inbound(body, decoded, request_id, authorization)
        refusing = self.refusing
        if refusing and all(b.name in refusing for b in (*target.backends, *target.fallbacks)):
            raise ProxyError(
                codes.UNTRANSLATABLE_REQUEST,
                f"no backend of route {target.label!r} serves completions "
                "(its [[backends]] serves say embeddings only)",
            )

        def prepare(backend: Backend) -> Outbound | None:
            if refusing and backend.name in refusing:
                return None
            # A buffer the adapter cannot read raises MalformedBuffer: the
            # caller's fault, answered at once (``service.errors``).
            return backend.adapter.prepare(call)

        async def take(answer: Attempt) -> Opened:
            backend, out = answer.backend, answer.out
            adapter = backend.adapter
            model = decoded().model_name if adapter.translated else ""
            translator = adapter.translator(request_id, model, out.whole)
            for name in out.omitted:
                self._omitted.labels(backend.name, omitted_label(name)).inc()
            return Opened(
                backend,
                answer.response,
                translator,
                answer.started,
                self.metrics,
                answer.lease,
                self.shared,
                out.omitted,
                answer.span,
            )

        return await self.first(target, prepare, take)

    async def first(
        self,
        target: RouteTarget,
        prepare: Callable[[Backend], Outbound | None],
        take: Callable[[Attempt], Awaitable[T]],
    ) -> T:
        """What ``take`` makes of the first backend's 200 answer, trying the
        route's backends in the balancer's order (every kind of request goes
        this one way; see the module docstring).

        ``prepare(backend)`` is what the backend is sent (``None``: it serves
        no request of this kind, skipped; ``Untranslatable``: noted, the next
        tried). ``take`` is handed each 200 answer: what it returns owns the
        answer and the backend's outstanding count (``release`` gives them
        back); when it raises, they are given back here, and an
        ``UpstreamError`` (the answer's body broke off) counts as the
        backend's failure, the next tried: nothing has reached the caller.
        ``ProxyError`` when no backend gives an answer ``take`` accepts
        (``backends_busy`` when every one that serves the request is at its
        ``max_outstanding``)."""
        plan = self.balancer.plan(target)
        if not plan:
            raise _busy()
        shared = self.shared
        attempts = self.max_attempts or len(plan)
        failures = _Failures()
        transport = self._transport()
        prepared = False
        for backend in plan:
            if not attempts:
                break
            try:
                out = prepare(backend)
            except Untranslatable as exc:
                failures.untranslatable = f"{backend.name}: {exc}"
                prepared = True
                continue
            except CredentialsUnavailable as exc:  # the gateway's own, never the caller's
                failures.auth = f"backend {backend.name}: {exc}"
                prepared = True
                continue
            if out is None:
                continue
            prepared = True
            lease = None
            if shared is not None and backend.max_outstanding:
                lease = await shared.acquire(backend.name, backend.max_outstanding, _LEASE_TTL)
                if lease is None:  # at its limit, counted over every worker
                    failures.busy = True
                    continue
            attempts -= 1
            started = time.perf_counter()
            backend.outstanding += 1
            span, sent = self._traced(backend, out)
            try:
                resp = await transport.request(
                    Upstream(
                        "POST",
                        out.url,
                        body=out.body,
                        headers=sent,
                        timeouts=backend.timeouts,
                        tls=backend.tls,
                    )
                )
                if resp.status == 200:
                    self.balancer.succeeded(backend)
                    self.metrics.upstream_ttfb_of(backend.name).observe(
                        time.perf_counter() - started
                    )
                    taken = await take(Attempt(backend, out, resp, started, lease, span))
                    if span is not None and not isinstance(taken, Opened):
                        span.end()  # a whole answer, read (embeddings)
                    return taken
            except UpstreamPoolTimeout as exc:
                self.release(backend, lease)
                self.metrics.upstream_failure_of(backend.name, "pool_timeout").inc()
                failures.pool_full = f"{backend.name}: {without_addresses(str(exc))}"
                _failed(span, "pool_timeout")
                continue
            except UpstreamError as exc:
                self.release(backend, lease)
                self.balancer.failed(backend)
                self.metrics.upstream_failure_of(backend.name, type(exc).__name__).inc()
                if isinstance(exc, UpstreamTimeout):
                    failures.timeout = f"{backend.name}: {exc}"
                else:
                    failures.unreachable = f"{backend.name}: {exc}"
                _failed(span, type(exc).__name__)
                continue
            except BaseException as exc:
                self.release(backend, lease)
                _failed(span, type(exc).__name__)
                raise
            _failed(span, f"http_{resp.status}")
            try:
                await self._refused(backend, resp, failures)
            finally:
                self.release(backend, lease)
        if not prepared:  # every backend serving it was left out at its limit
            raise _busy()
        raise failures.error()

    def _traced(self, backend: Backend, out: Outbound) -> tuple[Span | None, list[tuple[str, str]]]:
        """The attempt's span (telemetry on) and the headers to send, with
        its ``traceparent``."""
        if self.tracing is None:
            return None, out.headers
        protocol = backend.adapter.protocol
        attributes = attempt_attributes(backend.name, protocol, out.url)
        span = self.tracing.client(f"{protocol} {backend.name}", attributes)
        return span, [*out.headers, *trace_headers(span)]

    def release(self, backend: Backend, lease: BackendLease | None) -> None:
        """Give back one outstanding request of ``backend`` (and its shared ``lease``)."""
        backend.outstanding -= 1
        _release(self.shared, lease)

    async def _refused(self, backend: Backend, resp: Response, failures: _Failures) -> None:
        """Take in a backend's non-200 answer; raise what the caller is told at once
        (a 4xx of its own), or note it and let the next backend be tried."""
        try:
            detail = await resp.read()
        except UpstreamError:
            detail = b""
        finally:
            await resp.aclose()
        refusal = backend.adapter.refusal(resp.status, resp.headers, detail[:65536])
        kind = refusal.kind
        self.metrics.upstream_failure_of(backend.name, f"http_{resp.status}").inc()
        if kind is RefusalKind.REJECTED:
            self.balancer.succeeded(backend)
            passthrough = b""
            if not backend.adapter.translated and detail.startswith(b"{"):
                passthrough = detail[:65536]
            raise ProxyError(
                codes.BACKEND_REJECTED,
                refusal.message,
                status=resp.status,
                retry_after=refusal.retry_after,
                body=passthrough,
            )
        if kind is RefusalKind.RATE_LIMITED:
            self.balancer.failed(backend, refusal.retry_after)
            failures.limited = True
            # A backend that says no wait (Bedrock's ThrottlingException says
            # none) is cooled down for cooldown_seconds: the caller is told that.
            wait = refusal.retry_after
            if wait is None:
                wait = max(self.balancer.cooldown_seconds, MIN_RETRY_AFTER)
            if failures.rate_limited is None or wait < failures.rate_limited:
                failures.rate_limited = wait
            return
        self.balancer.failed(backend)
        if kind is RefusalKind.AUTH:
            log.error(
                "backend %s refused flatgate's credential (HTTP %d): check its api_key; %s",
                backend.name,
                resp.status,
                refusal.message,
            )
            failures.auth = (
                f"backend {backend.name} refused the gateway's own credential (HTTP "
                f"{resp.status}); the gateway's configuration must be fixed"
            )
            return
        failures.answered = f"backend {backend.name} answered {resp.status}: {refusal.message}"

    async def probe(self, backend: Backend) -> bool:
        """Whether ``backend`` is ready (see ``backends.base.Probe``)."""
        try:
            probe: Probe = backend.adapter.probe()
        except CredentialsUnavailable:  # not fetched yet, or expired: not ready
            return False
        try:
            resp = await self._transport().request(
                Upstream(
                    "GET",
                    probe.url,
                    body=b"",
                    headers=probe.headers,
                    timeouts=_PROBE,
                    tls=backend.tls,
                )
            )
            await resp.read()
        except UpstreamError:
            return False
        return probe.connect_only or resp.status == 200

    async def readiness(self, targets: list[RouteTarget], backends: list[Backend]) -> bytes:
        """The readiness document; ``ready`` when every route has a ready backend."""
        results = await asyncio.gather(*(self.probe(b) for b in backends))
        healthy = {b.name: ok for b, ok in zip(backends, results, strict=True)}
        routes = {
            t.label: any(healthy[b.name] for b in (*t.backends, *t.fallbacks)) for t in targets
        }
        ok = all(routes.values())
        return json.dumps({"ready": ok, "routes": routes, "backends": healthy}).encode()


_PROBE = Timeouts(connect=0.5, read=1.0, total=1.5)
