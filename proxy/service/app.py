"""The proxy's HTTP surface: route from the buffer, dispatch, relay frames.

``POST /v1/completions`` takes a ``CompletionRequest`` FlatBuffer, reads
``(provider, model)`` with ``wire.request.route.read_route`` (a memoryview
into the body, nothing decoded), finds the route, and has the dispatcher
(``service.dispatch``) open an answer from one of its backends: an ``fbs``
backend is sent the very ``bytes`` object the server handed over, a JSON
backend its adapter's translation. The answer's chunk frames stream back
through ``service.relay``: size-prefixed frames relayed as they arrive
(``Accept: application/x-flatbuffers-stream``), or re-framed as SSE.

A request's steps, in order (``completions``): its head (method, type,
length), its caller (``service.caller``: token, admission), its body, its
route (``admit``), its tenant's limits (``_reserve``), a backend's answer
(``Dispatcher.open``), the relay (``_answer``); each returns what the next
needs, and whatever one took is given back in ``completions``' ``finally``.

Errors before the first byte are a ``service.errors.ProxyError``, answered
by ``errors.answer_of`` (status, ``{"error": {"code", "message"}}``,
``Retry-After`` and the other common headers); after it, one error chunk with
``finish_reason`` error ends the stream.

``POST /v1/embeddings`` takes an ``EmbeddingRequest`` (routed by the same
read) and answers one ``EmbeddingResponse`` buffer: its steps are
``service.embed_route``'s, its dispatch ``service.embed``'s, over the same
routes, balancer, limits, admission, metrics and access log.

Also ``/healthz``, ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from typing import Literal

import msgspec

from flatgate.proxy.backends.extras import omitted_header
from flatgate.proxy.backends.registry import kinds
from flatgate.proxy.backends.section import COMPLETIONS, EMBEDDINGS, BackendConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.limits import Lease, Limiter, SharedBackends
from flatgate.proxy.plumbing.accesslog import AccessLog, Entry
from flatgate.proxy.plumbing.admission import Hold
from flatgate.proxy.plumbing.auth import TokenCheck
from flatgate.proxy.plumbing.config import ENV_CONFIG
from flatgate.proxy.plumbing.drain import Drain, Ending
from flatgate.proxy.plumbing.gctune import tune
from flatgate.proxy.plumbing.intake import admission, body_policy
from flatgate.proxy.plumbing.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.reload import ConfigWatch
from flatgate.proxy.plumbing.serve import (
    CallerWatch,
    Exchange,
    ServerApp,
    Watchlist,
    valid_request_id,
)
from flatgate.proxy.plumbing.telemetry import Tracing, open_tracing
from flatgate.proxy.service.balancer import Backend, Balancer, RouteTarget
from flatgate.proxy.service.caller import caller_of, hold_of
from flatgate.proxy.service.dispatch import Dispatcher
from flatgate.proxy.service.embed import Embedder
from flatgate.proxy.service.embed_route import EmbeddingsRoute
from flatgate.proxy.service.errors import (
    ANSWERABLE,
    CLIENT_CLOSED,
    DRAINING_ANSWER,
    ProxyError,
    answer_of,
    cancelled,
    proxy_error,
)
from flatgate.proxy.service.quota import ProxyLimits
from flatgate.proxy.service.relay import Relay
from flatgate.proxy.service.routes import Route, RouteTable
from flatgate.proxy.service.settings import ProxySettings, load_config
from flatgate.proxy.transport.base import Transport
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.digits import read_decimal
from flatgate.proxy.wire.layout import IDENTIFIER_AT
from flatgate.proxy.wire.request.route import read_route, read_tenant, tenant_present
from flatgate.proxy.wire.schema import (
    ADMITTED_HEADER,
    BACKEND_HEADER,
    COMPLETIONS_PATH,
    EMBEDDING_REQUEST_IDENTIFIER,
    EMBEDDINGS_PATH,
    FLATBUFFERS,
    FRAMES,
    JSON,
    OMITTED_HEADER,
    PROVIDERS,
    REQUEST_IDENTIFIER,
    SSE,
)

__all__ = ["CLIENT_CLOSED", "ProxyServer", "create_app"]

_JSON = [("content-type", JSON)]
_PROVIDER_NAMES = {v: k for k, v in PROVIDERS.items()}
# A request's caller is watched for leaving from 50-100 ms in (Watchlist): an
# answer sooner than that costs a list append, not a task.
_WATCH_TICK = 0.05
_DRAINED = "the proxy is shutting down: this answer was ended early"
_NOT_A_COMPLETION = (
    f"file identifier: expected {REQUEST_IDENTIFIER!r} (a CompletionRequest) on "
    f"{COMPLETIONS_PATH}; an EmbeddingRequest goes to {EMBEDDINGS_PATH}"
)

log = logging.getLogger("flatgate.proxy")


def _entry() -> Entry:
    """A log entry for ``POST /v1/completions``, the ``.fbs`` API."""
    entry = Entry()
    entry.api = "fbs"
    entry.path = COMPLETIONS_PATH
    return entry


class ProxyServer:
    """The proxy's request handler; one per granian worker."""

    def __init__(
        self,
        config: ProxySettings,
        *,
        worker: str = "",
        drain: Drain | None = None,
        limits: bool = True,
        limiter: Limiter | None = None,
        tracing: Tracing | Literal["settings"] | None = "settings",
    ) -> None:
        """``limits`` false: tenants' limits are someone else's (the
        one-process gateway's edge, whose ``limiter`` it may share: with a
        shared store, backends' ``max_outstanding`` and cooldowns are counted
        there)."""
        self.config = config
        p = config.proxy
        self.max_body = p.max_body_bytes
        self.pool = BuilderPool()
        self.metrics = Metrics("flatgate", self.pool)
        self.balancer = Balancer(p.cooldown_seconds)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.backends: dict[str, Backend] = {}
        self._backend_configs: dict[str, BackendConfig] = {}
        self._transport: Transport | None = None
        self.dispatcher = Dispatcher(
            self.balancer,
            self.metrics,
            lambda: self.transport,
            max_attempts=p.max_attempts,
            max_bytes=p.max_body_bytes,
        )
        self.embedder = Embedder(self.dispatcher, p.max_response_bytes)
        # OpenTelemetry ("settings": [telemetry]'s; the one-process gateway
        # passes the one its edge shares): spans per request and attempt.
        if tracing == "settings":
            tracing = open_tracing(config.telemetry, "flatgate-proxy")
            if tracing is not None:  # its own (a shared one is shown by its owner)
                self.metrics.collect_from(lambda: tracing.collect("flatgate"))
        self.tracing = self.dispatcher.tracing = tracing
        self._route(config)
        self.max_model = p.max_model_bytes
        self.admission = admission(p)
        self.body_policy = body_policy(p)
        self.token = TokenCheck(p.auth_token_sha256) if p.auth_token_sha256 else None
        self.require_auth = p.require_auth and self.token is not None
        self.access = AccessLog("proxy", p.log_format, enabled=p.access_log)
        self.watchlist = Watchlist(_WATCH_TICK)
        self.drain = drain or Drain(p.drain_grace_seconds, p.drain_seconds)
        self.embeddings = EmbeddingsRoute(self)
        self.metrics.watch_transport(lambda: self._transport)
        self.metrics.watch_admission(self.admission)
        self.quota = ProxyLimits(config.limits_config(), limiter) if limits else None
        if self.quota is not None:
            self.metrics.collect_from(self.quota.collect)
            limiter = self.quota.limiter
        if limiter is not None and not config.state.is_memory:
            shared = SharedBackends(limiter)
            self.balancer.shared = shared
            self.dispatcher.shared = shared
        self._ids = itertools.count(1)
        self._id_prefix = f"fg-{worker or os.getpid()}-"
        self._ready_at = 0.0
        self._ready: tuple[int, bytes] = (503, b"")

    def _route(self, config: ProxySettings) -> None:
        """Build the backends and the route table of ``config``; a backend
        whose config is unchanged is kept (its outstanding count and
        cooldown with it)."""
        kept = {name: b for name, b in self.backends.items() if name in self._backend_configs}
        configs = {b.name: b for b in config.backends}
        backends = {
            name: kept[name] if self._backend_configs.get(name) == cfg else Backend.from_config(cfg)
            for name, cfg in configs.items()
        }
        entries = []
        targets: list[RouteTarget] = []
        for r in config.routes:
            target = RouteTarget(
                label=r.model,
                backends=tuple(backends[n] for n in r.backends),
                fallbacks=tuple(backends[n] for n in r.fallbacks),
            )
            targets.append(target)
            provider = None if r.provider is None else PROVIDERS[r.provider]
            entries.append(Route(model=r.model, target=target, provider=provider))
        self.routes: RouteTable[RouteTarget] = RouteTable(entries)
        self.targets = targets
        for name, b in self.backends.items():
            if backends.get(name) is not b and b.adapter.credentials is not None:
                b.adapter.credentials.stop()
        self.backends = backends
        if self._loop is not None:
            self.start(self._loop)
        self._backend_configs = configs
        # Which kind of request each backend is sent (backends.registry.kinds).
        self.dispatcher.refusing = frozenset(
            name for name, cfg in configs.items() if COMPLETIONS not in kinds(cfg)
        )
        self.embedder.serving = frozenset(
            name
            for name, cfg in configs.items()
            if EMBEDDINGS in kinds(cfg) and backends[name].adapter.embeddings
        )

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Begin, on the worker's ``loop``, refreshing the credentials that
        expire (``transport.credentials``: AWS's, Entra ID's), for these
        backends and those a reload adds."""
        self._loop = loop
        for b in self.backends.values():
            if b.adapter.credentials is not None:
                b.adapter.credentials.start(loop)

    def reload(self, config: ProxySettings) -> None:
        """A new config's ``[[backends]]`` and ``[[routes]]``, from the next
        request on (requests in flight finish on the backends they have).
        ``[proxy]`` stays as started (logged when it differs)."""
        if config.proxy != self.config.proxy:
            log.warning("proxy: [proxy] changes take effect on restart; the rest is reloaded")
            config = msgspec.structs.replace(config, proxy=self.config.proxy)
        self._route(config)
        if self.quota is not None:
            self.quota.reload(config.limits_config())
        self.config = config

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            p = self.config.proxy
            self._transport = make_transport(
                p.transport, limit=p.pool_limit, pool_timeout=p.pool_timeout
            )
        return self._transport

    async def __call__(self, ex: Exchange) -> None:
        path = ex.path
        if path == "/healthz":
            await ex.respond(200, [("content-type", "text/plain")], b"ok\n")
        elif self.drain.draining:
            await self._refuse_draining(ex)
        elif path == COMPLETIONS_PATH:
            await self.completions(ex)
        elif path == EMBEDDINGS_PATH:
            await self.embeddings(ex)
        elif path == "/readyz":
            status, body = await self.readiness()
            await ex.respond(status, _JSON, body)
        elif path == "/metrics":
            if self.token is not None and not self.token.valid(ex.header("authorization")):
                err = ProxyError(codes.UNAUTHORIZED, "/metrics needs the proxy's bearer token")
                await ex.respond(*answer_of(err))
                return
            await ex.respond(200, [("content-type", METRICS_CONTENT_TYPE)], self.metrics.render())
        else:
            await ex.respond(*answer_of(ProxyError(codes.NOT_FOUND, f"no such path: {path}")))

    async def _refuse_draining(self, ex: Exchange) -> None:
        """503 ``draining``; logged on ``/v1/completions`` and
        ``/v1/embeddings``, as every answer there is."""
        if ex.path == COMPLETIONS_PATH:
            entry = _entry()
        elif ex.path == EMBEDDINGS_PATH:
            entry = self.embeddings.entry()
        else:
            await ex.respond(*DRAINING_ANSWER)
            return
        entry.method = ex.method
        entry.request_id = self.request_id(ex)
        entry.status, entry.error = codes.DRAINING.status, codes.DRAINING.code
        try:
            await ex.respond(*DRAINING_ANSWER)
        finally:
            self.access.write(entry)

    def request_id(self, ex: Exchange) -> str:
        """The caller's ``x-request-id`` if it is valid, else one of ours."""
        rid = ex.header("x-request-id")
        if rid is None or not valid_request_id(rid):
            rid = f"{self._id_prefix}{next(self._ids)}"
        return rid

    # POST /v1/completions
    async def completions(self, ex: Exchange) -> None:
        """One request, step by step (see the module docstring); however it
        ends, it is logged and counted once and what it held is given back."""
        entry = _entry()
        entry.method = ex.method
        rid = entry.request_id = self.request_id(ex)
        span = None
        if self.tracing is not None:
            span = self.tracing.server(ex.header, "chat")
            if self.access.enabled:  # the trace id is the access log's
                entry.trace_id = span.trace_id
        label = "-"
        hold: Hold | None = None  # the body bytes admitted
        watch: CallerWatch | None = None
        lease: Lease | None = None
        prompt = 0
        relay: Relay | None = None  # the answer, once a backend gave one
        ending = Ending()
        untrack = self.drain.track(ending)
        try:
            try:
                size, binary = self.head(ex)
                authorization, trusted = caller_of(ex, self.token, self.require_auth)
                hold = hold_of(self.admission, ex, size, trusted)
                body = await ex.body(self.body_policy)
                entry.bytes_in = len(body)
                if body.startswith(EMBEDDING_REQUEST_IDENTIFIER, IDENTIFIER_AT):
                    raise MalformedBuffer(_NOT_A_COMPLETION, IDENTIFIER_AT)
                target = self.admit(body, entry, trusted)
                label = target.label
                if self.quota is not None and self.quota.active:
                    lease, prompt = await self._reserve(ex, body, self.quota)
                watch = CallerWatch(ex.disconnected)
                self.watchlist.add(watch)
                opened = await self.dispatcher.open(target, body, rid, authorization)
                del body  # sent: not kept while the answer streams
            except ANSWERABLE as exc:
                await self.refuse(ex, entry, exc)
                return
            self.admission.drop_body(hold)
            entry.backend = opened.backend.name
            relay = Relay(opened, rid, binary, self.metrics)
            try:
                await self._answer(ex, relay, entry, watch, ending)
            finally:
                await relay.close()
                # What the relay ended with, in the access log (and read for a
                # lease, which settles to the completion's tokens).
                entry.bytes_out = relay.relayed
                if relay.error is not None:
                    entry.error = relay.error.code
                if relay.last:
                    _read_final(relay, entry)
        except asyncio.CancelledError:
            if not await cancelled(ex, entry, watch, ending):
                raise
        except ConnectionError:  # the caller left mid-answer
            entry.status, entry.error = CLIENT_CLOSED, "client_closed"
        finally:
            untrack()
            if watch is not None:
                watch.stop()
            if lease is not None and self.quota is not None:
                self.quota.settle(lease, prompt, entry.tokens, relay is not None)
            if hold is not None:
                self.admission.done(hold)
            if relay is not None and entry.status == 200 and entry.ttfb is not None:
                self.metrics.answers_of(label, relay.opened.backend.name).observe(
                    entry.ttfb, time.perf_counter() - entry.started, entry.tokens, not relay.whole
                )
            self.metrics.count(label, entry.status)
            self.access.write(entry)
            if span is not None:
                span.note(entry)
                span.end()

    async def refuse(self, ex: Exchange, entry: Entry, exc: Exception) -> None:
        """Answer ``exc`` (one of ``errors.ANSWERABLE``), before any byte.

        No name in the handler holds the error: its traceback holds the
        handler's frame, and with it the request body, until the GC breaks
        the cycle."""
        err = proxy_error(exc)
        entry.status, entry.error = err.status, err.code.code
        await ex.respond(*answer_of(err))

    def head(self, ex: Exchange, takes: str = "a CompletionRequest") -> tuple[int, bool]:
        """The request's declared body size and whether it wants binary frames;
        ``takes``: what the path takes, for the 405's message."""
        if ex.method != "POST":
            raise ProxyError(codes.METHOD_NOT_ALLOWED, f"POST {takes} here")
        ctype = (ex.header("content-type") or "").partition(";")[0].strip().lower()
        if ctype != FLATBUFFERS:
            raise ProxyError(codes.UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be {FLATBUFFERS}")
        length = ex.header("content-length")
        if length is None:
            raise ProxyError(codes.LENGTH_REQUIRED, "send a Content-Length")
        size = read_decimal(length)
        if size is None:
            raise ProxyError(codes.BAD_CONTENT_LENGTH, "Content-Length is not a number")
        if size > self.max_body:
            raise ProxyError(codes.BODY_TOO_LARGE, f"body over {self.max_body} bytes")
        return size, FRAMES in (ex.header("accept") or "")

    def target_of(self, body: bytes, entry: Entry | None = None) -> RouteTarget:
        """The route target of a request body, read in place;
        ``MalformedBuffer`` for a bad buffer, ``ProxyError`` for an overlong
        name or no route. Fills ``entry``'s provider, model and tenant when
        given."""
        provider, model = read_route(body)
        return self.target_for(provider, model, entry, body)

    def target_for(
        self,
        provider: int,
        model: bytes | memoryview,
        entry: Entry | None = None,
        body: bytes | None = None,
    ) -> RouteTarget:
        """The route target of ``(provider, model)``; ``ProxyError`` for an
        overlong name or no route. Fills ``entry``'s provider and model when
        given, and its tenant from the request ``body`` when given too."""
        if len(model) > self.max_model:
            raise ProxyError(
                codes.MODEL_NAME_TOO_LONG,
                f"model_name is {len(model)} bytes; the limit is {self.max_model}",
            )
        if entry is not None:
            entry.provider = _PROVIDER_NAMES.get(provider, str(provider))
            entry.model = bytes(model).decode("utf-8", "replace")
            if body is not None:
                entry.tenant = read_tenant(body)
        target = self.routes.lookup(provider, model)
        if target is None:
            name = bytes(model).decode("utf-8", "replace")
            pname = _PROVIDER_NAMES.get(provider, str(provider))
            raise ProxyError(codes.NO_ROUTE, f"no route for provider {pname} model {name!r}")
        return target

    def admit(self, body: bytes, entry: Entry, trusted: bool) -> RouteTarget:
        """The request's (either root's) route target; ``ProxyError`` (or
        ``MalformedBuffer``) for a bad buffer, name or route, or a tenant set
        without the proxy's token."""
        noted = self.access.enabled or self.tracing is not None
        target = self.target_of(body, entry if noted else None)
        if self.token is not None and not trusted and tenant_present(body):
            raise ProxyError(
                codes.TENANT_FORBIDDEN, "setting a tenant needs the proxy's bearer token"
            )
        return target

    async def _reserve(
        self, ex: Exchange, body: bytes, quota: ProxyLimits
    ) -> tuple[Lease | None, int]:
        """The tenant's lease and prompt estimate, when the request names a
        tenant the edge has not admitted already (``service.quota``); else
        ``(None, 0)``."""
        if not tenant_present(body) or ex.header(ADMITTED_HEADER) is not None:
            return None, 0
        model = bytes(read_route(body)[1]).decode("utf-8", "replace")
        return await quota.admit(body, read_tenant(body) or "", model)

    async def _answer(
        self, ex: Exchange, relay: Relay, entry: Entry, watch: CallerWatch, ending: Ending
    ) -> None:
        """Send the relay's frames; a failure before the first is a status.

        When the first frames already end the answer (a non-streamed answer,
        or a fast backend), they go out as one plain response: granian's
        streamed responses cost several times more per request.
        """
        try:
            first = await relay.first(watch)
        except ANSWERABLE as exc:
            await self.refuse(ex, entry, exc)
            return
        entry.status = 200
        entry.first_byte()
        headers = [
            ("content-type", FRAMES if relay.binary else SSE),
            ("cache-control", "no-cache"),
            ("x-request-id", entry.request_id or ""),
            (BACKEND_HEADER, entry.backend or ""),
        ]
        omitted = relay.opened.omitted
        if omitted:
            headers.append((OMITTED_HEADER, omitted_header(omitted)))
        if relay.whole:
            await ex.respond(200, headers, first)
            return
        watch.start()
        sink = await ex.stream(200, headers)
        try:
            await sink.send(first)
            async for out in relay.frames():
                await sink.send(out)
        except asyncio.CancelledError:
            if watch.fired or not ending.absorb():
                raise
            await sink.send(relay.fail(codes.DRAINING, _DRAINED))
        await sink.close()

    async def readiness(self) -> tuple[int, bytes]:
        """200 when every route has a ready backend (cached 1 s): an fbs backend
        answering ``/healthz``, an openai one ``/models``, an anthropic one
        accepting a connection, or a backend's own ``health_path``."""
        now = time.monotonic()
        if now - self._ready_at < 1.0:
            return self._ready
        body = await self.dispatcher.readiness(self.targets, list(self.backends.values()))
        ok = body.startswith(b'{"ready": true')
        self._ready_at, self._ready = now, (200 if ok else 503, body)
        return self._ready


def _read_final(relay: Relay, entry: Entry) -> None:
    """Completion tokens and error code from the last frames relayed (the
    final chunk), for the access log."""
    entry.tokens, code = relay.outcome()
    if code and entry.error is None:
        entry.error = code


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_PROXY_*``."""
    config = load_config()
    p = config.proxy
    drain = Drain(grace=p.drain_grace_seconds, seconds=p.drain_seconds)
    server = ProxyServer(config, drain=drain)
    tune(p.gc_thresholds, freeze=p.gc_freeze)
    path = os.environ.get(ENV_CONFIG)
    starts = [server.start]
    if path and p.reload_seconds > 0:
        watch = ConfigWatch(
            path, lambda: server.reload(load_config(path)), interval=p.reload_seconds, name="proxy"
        )
        starts.append(watch.install)
    return ServerApp(
        server, drain, metrics=server.metrics, on_start=starts, access_logs=(server.access,)
    )
