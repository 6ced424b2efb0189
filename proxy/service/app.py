"""The proxy's HTTP surface: route from the buffer, dispatch, relay frames.

``POST /v1/completions`` takes a ``CompletionRequest`` FlatBuffer, reads
``(provider, model)`` with ``wire.route.read_route`` (a memoryview into the
body, nothing decoded), finds the route, and has the dispatcher
(``service.dispatch``) open an answer from one of its backends: an ``fbs``
backend is sent the very ``bytes`` object the server handed over, a JSON
backend its adapter's translation. The answer's chunk frames stream back:
size-prefixed frames relayed as they arrive (``Accept:
application/x-flatbuffers-stream``), or re-framed as SSE.

Errors before the first byte are an HTTP status with
``{"error": {"code", "message"}}`` (and ``Retry-After`` when a backend asked
for a wait); after it, one error chunk with ``finish_reason`` error ends the
stream. This module is the one place errors become responses.

Also ``/healthz``, ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import time

import msgspec

from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.backends.section import BackendConfig
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
    Sink,
    Watchlist,
    valid_request_id,
)
from flatgate.proxy.service.balancer import Backend, Balancer, RouteTarget
from flatgate.proxy.service.caller import body_of, caller_of, hold_of
from flatgate.proxy.service.dispatch import Dispatcher, Opened, ProxyError
from flatgate.proxy.service.quota import ProxyLimits
from flatgate.proxy.service.routes import Route, RouteTable
from flatgate.proxy.service.settings import GatewayConfig, load_config
from flatgate.proxy.transport.base import Transport, UpstreamError, UpstreamTimeout
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunks import read_outcome
from flatgate.proxy.wire.codes import ErrorCode, error_body
from flatgate.proxy.wire.frames import ChunkError, FrameCutter, MalformedFrame, sse_event
from flatgate.proxy.wire.route import read_route, read_tenant, tenant_present
from flatgate.proxy.wire.schema import (
    ADMITTED_HEADER,
    BACKEND_HEADER,
    FLATBUFFERS,
    FRAMES,
    JSON,
    PROVIDERS,
    SSE,
    FinishReason,
)
from flatgate.proxy.wire.stock import build_chunk
from flatgate.proxy.wire.verify import MalformedBuffer

__all__ = ["ProxyError", "ProxyServer", "create_app", "upstream_failure"]

_JSON = [("content-type", JSON)]
_PROVIDER_NAMES = {v: k for k, v in PROVIDERS.items()}
# A request's caller is watched for leaving from 50-100 ms in (Watchlist): an
# answer sooner than that costs a list append, not a task.
_WATCH_TICK = 0.05
# Status logged and counted for a caller that left before its answer ended.
CLIENT_CLOSED = 499
# While draining, everything but /healthz (README, "Graceful restarts").
_DRAINING_HEADERS = [*_JSON, ("connection", "close"), ("retry-after", "1")]
_DRAINING_BODY = error_body(codes.DRAINING, "the proxy is shutting down; retry elsewhere")
_DRAINED = "the proxy is shutting down: this answer was ended early"

log = logging.getLogger("flatgate.proxy")


def _error_headers(err: ProxyError) -> list[tuple[str, str]]:
    headers = _JSON
    if err.retry_after is not None:
        headers = [*headers, ("retry-after", str(max(1, math.ceil(err.retry_after))))]
    if err.status == 401:
        headers = [*headers, ("www-authenticate", 'Bearer realm="flatgate"')]
    if err.code.code in codes.NOT_RETRYABLE:
        headers = [*headers, ("x-should-retry", "false")]
    return headers


class ProxyServer:
    """The proxy's request handler; one per granian worker.

    ``request_type`` and ``route_of`` are what a request body is and how its
    route is read: FlatBuffers and ``wire.route.read_route``. A subclass may
    read another format (the load bench's JSON and protobuf baselines do).
    """

    request_type: str = FLATBUFFERS

    def route_of(self, body: bytes) -> tuple[int, bytes | memoryview]:
        """``(provider, model)`` of a request body; ``MalformedBuffer`` if bad."""
        return read_route(body)

    def __init__(
        self,
        config: GatewayConfig,
        *,
        worker: str = "",
        drain: Drain | None = None,
        limits: bool = True,
        limiter: Limiter | None = None,
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
        self.backends: dict[str, Backend] = {}
        self._backend_configs: dict[str, BackendConfig] = {}
        self._route(config)
        self._transport: Transport | None = None
        self.dispatcher = Dispatcher(
            self.balancer,
            self.metrics,
            lambda: self.transport,
            max_attempts=p.max_attempts,
            max_bytes=p.max_body_bytes,
        )
        self.max_model = p.max_model_bytes
        self.admission = admission(p)
        self.body_policy = body_policy(p)
        self.token = TokenCheck(p.auth_token_sha256) if p.auth_token_sha256 else None
        self.require_auth = p.require_auth and self.token is not None
        self.access = AccessLog("proxy", p.log_format, enabled=p.access_log)
        self.watchlist = Watchlist(_WATCH_TICK)
        self.drain = drain or Drain(p.drain_grace_seconds, p.drain_seconds)
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

    def _route(self, config: GatewayConfig) -> None:
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
        self.backends = backends
        self._backend_configs = configs

    def reload(self, config: GatewayConfig) -> None:
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
        elif path == "/v1/completions":
            await self.completions(ex)
        elif path == "/readyz":
            status, body = await self.readiness()
            await ex.respond(status, _JSON, body)
        elif path == "/metrics":
            if self.token is not None and not self.token.valid(ex.header("authorization")):
                err = ProxyError(codes.UNAUTHORIZED, "/metrics needs the proxy's bearer token")
                await ex.respond(err.status, _error_headers(err), err.body())
                return
            await ex.respond(200, [("content-type", METRICS_CONTENT_TYPE)], self.metrics.render())
        else:
            err = ProxyError(codes.NOT_FOUND, f"no such path: {path}")
            await ex.respond(err.status, _JSON, err.body())

    async def _refuse_draining(self, ex: Exchange) -> None:
        """503 ``draining``; logged on ``/v1/completions``, as every answer there is."""
        if ex.path != "/v1/completions":
            await ex.respond(codes.DRAINING.status, _DRAINING_HEADERS, _DRAINING_BODY)
            return
        entry = Entry()
        entry.request_id = self._request_id(ex)
        entry.status, entry.error = codes.DRAINING.status, codes.DRAINING.code
        try:
            await ex.respond(codes.DRAINING.status, _DRAINING_HEADERS, _DRAINING_BODY)
        finally:
            self.access.write(entry)

    def _request_id(self, ex: Exchange) -> str:
        """The caller's ``x-request-id`` if it is valid, else one of ours."""
        rid = ex.header("x-request-id")
        if rid is None or not valid_request_id(rid):
            rid = f"{self._id_prefix}{next(self._ids)}"
        return rid

    # POST /v1/completions
    async def completions(self, ex: Exchange) -> None:
        entry = Entry()
        rid = entry.request_id = self._request_id(ex)
        label = "-"
        hold: Hold | None = None  # the body bytes admitted
        watch: CallerWatch | None = None
        lease: Lease | None = None
        prompt = 0
        answered = False
        ending = Ending()
        untrack = self.drain.track(ending)
        try:
            try:
                size, binary = self._head(ex)
                authorization, trusted = caller_of(ex, self.token, self.require_auth)
                hold = hold_of(self.admission, ex, size, trusted)
                body = await body_of(ex, self.body_policy)
                entry.bytes_in = len(body)
                target = self._admit(body, entry, trusted)
                label = target.label
                quota = self.quota
                if (
                    quota is not None
                    and quota.active
                    and self.request_type == FLATBUFFERS
                    and tenant_present(body)
                    and ex.header(ADMITTED_HEADER) is None
                ):
                    model = bytes(self.route_of(body)[1]).decode("utf-8", "replace")
                    lease, prompt = await quota.admit(body, read_tenant(body) or "", model)
                watch = CallerWatch(ex.disconnected)
                self.watchlist.add(watch)
                opened = await self.dispatcher.open(target, body, rid, authorization)
                del body  # sent: not kept while the answer streams
            except ProxyError as err:
                entry.status, entry.error = err.status, err.code.code
                await ex.respond(err.status, _error_headers(err), err.body())
                return
            self.admission.drop_body(hold)
            answered = True
            entry.backend = opened.backend.name
            await self._stream(
                ex, opened, entry, watch, ending, binary=binary, tokens=lease is not None
            )
        except asyncio.CancelledError:
            if watch is not None and watch.caught():
                # The caller went away; whatever was open upstream is closed by now.
                entry.status, entry.error = CLIENT_CLOSED, "client_closed"
            elif ending.absorb():
                # The drain's deadline, before any answer: whatever was open
                # upstream is closed by now.
                entry.status, entry.error = codes.DRAINING.status, codes.DRAINING.code
                await ex.respond(codes.DRAINING.status, _DRAINING_HEADERS, _DRAINING_BODY)
            else:
                raise
        except ConnectionError:  # the caller left mid-answer
            entry.status, entry.error = CLIENT_CLOSED, "client_closed"
        finally:
            untrack()
            if watch is not None:
                watch.stop()
            if lease is not None and self.quota is not None:
                self.quota.settle(lease, prompt, entry.tokens, answered)
            if hold is not None:
                self.admission.done(hold)
            self.metrics.count(label, entry.status)
            self.access.write(entry)

    def _head(self, ex: Exchange) -> tuple[int, bool]:
        """The request's declared body size and whether it wants binary frames."""
        if ex.method != "POST":
            raise ProxyError(codes.METHOD_NOT_ALLOWED, "POST a CompletionRequest here")
        ctype = (ex.header("content-type") or "").partition(";")[0].strip().lower()
        if ctype != self.request_type:
            raise ProxyError(
                codes.UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be {self.request_type}"
            )
        length = ex.header("content-length")
        if length is None:
            raise ProxyError(codes.LENGTH_REQUIRED, "send a Content-Length")
        try:
            size = int(length)
        except ValueError:
            raise ProxyError(codes.BAD_CONTENT_LENGTH, "Content-Length is not a number") from None
        if size > self.max_body:
            raise ProxyError(codes.BODY_TOO_LARGE, f"body over {self.max_body} bytes")
        if size < 0:
            raise ProxyError(codes.BAD_CONTENT_LENGTH, "Content-Length is negative")
        return size, FRAMES in (ex.header("accept") or "")

    def target_of(self, body: bytes, entry: Entry | None = None) -> RouteTarget:
        """The route target of a request body, read in place; ``ProxyError`` for
        a bad buffer, an overlong name or no route. Fills ``entry``'s provider,
        model and tenant when given."""
        try:
            provider, model = self.route_of(body)
        except MalformedBuffer as exc:
            raise ProxyError(codes.MALFORMED_REQUEST, str(exc)) from None
        if len(model) > self.max_model:
            raise ProxyError(
                codes.MODEL_NAME_TOO_LONG,
                f"model_name is {len(model)} bytes; the limit is {self.max_model}",
            )
        if entry is not None:
            entry.provider = _PROVIDER_NAMES.get(provider, str(provider))
            entry.model = bytes(model).decode("utf-8", "replace")
            if self.request_type == FLATBUFFERS:
                entry.tenant = read_tenant(body)
        target = self.routes.lookup(provider, model)
        if target is None:
            name = bytes(model).decode("utf-8", "replace")
            pname = _PROVIDER_NAMES.get(provider, str(provider))
            raise ProxyError(codes.NO_ROUTE, f"no route for provider {pname} model {name!r}")
        # The view (a GC-tracked object over the body) is not needed past the
        # lookup; dropping it now keeps it out of the GC's young generation
        # while the request waits on the backend.
        return target

    def _admit(self, body: bytes, entry: Entry, trusted: bool) -> RouteTarget:
        """The request's route target; ``ProxyError`` for a bad buffer, name or
        route, or a tenant set without the proxy's token."""
        target = self.target_of(body, entry if self.access.enabled else None)
        if (
            self.token is not None
            and not trusted
            and self.request_type == FLATBUFFERS
            and tenant_present(body)
        ):
            raise ProxyError(
                codes.TENANT_FORBIDDEN, "setting a tenant needs the proxy's bearer token"
            )
        return target

    async def _stream(
        self,
        ex: Exchange,
        opened: Opened,
        entry: Entry,
        watch: CallerWatch,
        ending: Ending,
        *,
        binary: bool,
        tokens: bool = False,
    ) -> None:
        """Relay frames until the final chunk; cancel upstream if the caller goes away.

        When the first body read already holds the final chunk (a non-streamed
        answer, or a fast backend), it goes out as one plain response: granian's
        streamed responses cost several times more per request.
        """
        metrics = self.metrics
        metrics.active_streams.inc()
        headers = [
            ("content-type", FRAMES if binary else SSE),
            ("cache-control", "no-cache"),
            ("x-request-id", entry.request_id or ""),
            (BACKEND_HEADER, opened.backend.name),
        ]
        resp = opened.response
        translator = opened.translator
        pieces = resp.iter_bytes()
        relayed = 0
        last = b""
        try:
            # Until the first frame: the caller may leave while the backend
            # thinks, and the first-byte timeout is in force.
            ended = False
            try:
                ready = b""
                while not ready:
                    if not resp.ready():
                        watch.start()
                    piece = await anext(pieces, None)
                    if piece is None:
                        ready = translator.end()
                        ended = True
                        break
                    ready = translator.feed(piece)
            except (UpstreamError, TranslatorError) as exc:
                err = upstream_failure(exc)
                entry.status, entry.error = err.status, err.code.code
                await ex.respond(err.status, _JSON, err.body())
                return
            resp.begun()
            entry.status = 200
            entry.first_byte()
            last = ready
            if ended or translator.done:
                out = ready if binary else self._sse(ready)
                relayed = len(out)
                await ex.respond(200, headers, out)
                return
            watch.start()
            sink = await ex.stream(200, headers)
            try:
                out = ready if binary else self._sse(ready)
                relayed += len(out)
                await sink.send(out)
                async for piece in pieces:
                    ready = translator.feed(piece)
                    if ready:
                        last = ready
                        out = ready if binary else self._sse(ready)
                        relayed += len(out)
                        await sink.send(out)
                    if translator.done:
                        break
                else:
                    tail = translator.end()
                    if tail:
                        last = tail
                        await sink.send(tail if binary else self._sse(tail))
            except UpstreamError as exc:
                if not translator.done:
                    code = (
                        codes.BACKEND_TIMEOUT
                        if isinstance(exc, UpstreamTimeout)
                        else codes.BACKEND_DISCONNECTED
                    )
                    last = b""
                    entry.error = code.code
                    await self._send_error(sink, binary, entry.request_id or "", code, str(exc))
            except TranslatorError as exc:
                last = b""
                entry.error = codes.BACKEND_PROTOCOL_ERROR.code
                await self._send_error(
                    sink, binary, entry.request_id or "", codes.BACKEND_PROTOCOL_ERROR, str(exc)
                )
            except asyncio.CancelledError:
                if watch.fired or not ending.absorb():
                    raise
                last = b""
                entry.error = codes.DRAINING.code
                await self._send_error(
                    sink, binary, entry.request_id or "", codes.DRAINING, _DRAINED
                )
            await sink.close()
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]
            await opened.close()
            metrics.relayed_bytes.inc(relayed)
            metrics.active_streams.dec()
            entry.bytes_out = relayed
            if last and (self.access.enabled or tokens):  # tokens: a lease settles to them
                _read_final(last, entry)

    @staticmethod
    def _sse(ready: bytes) -> bytes:
        view = memoryview(ready)
        return b"".join([sse_event(view[start:end]) for start, end in FrameCutter.spans(ready)])

    async def _send_error(
        self, sink: Sink, binary: bool, rid: str, code: ErrorCode, message: str
    ) -> None:
        # Rare (one per failed stream): built with the pool, whose figures
        # /metrics reports.
        frame = build_chunk(
            self.pool,
            request_id=rid,
            error=ChunkError(code.code, message),
            finish_reason=FinishReason.ERROR,
        )
        await sink.send(frame if binary else sse_event(memoryview(frame)[4:]))

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


def _read_final(frames: bytes, entry: Entry) -> None:
    """Completion tokens and error code from the last of ``frames`` (the final
    chunk), for the access log."""
    pos, n = 0, len(frames)
    last = 0
    while pos + 4 <= n:  # the last frame's start (frames are whole)
        last = pos
        pos += 4 + int.from_bytes(frames[pos : pos + 4], "little")
    try:
        tokens, code = read_outcome(frames, last + 4, pos)
    except MalformedFrame:
        return
    entry.tokens = tokens
    if code and entry.error is None:
        entry.error = code


def upstream_failure(exc: Exception) -> ProxyError:
    if isinstance(exc, UpstreamTimeout):
        return ProxyError(codes.BACKEND_TIMEOUT, f"no backend answered in time: {exc}")
    if isinstance(exc, TranslatorError):
        return ProxyError(codes.BACKEND_PROTOCOL_ERROR, str(exc))
    return ProxyError(codes.BACKEND_UNAVAILABLE, f"no backend reachable: {exc}")


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_PROXY_*``."""
    config = load_config()
    p = config.proxy
    drain = Drain(grace=p.drain_grace_seconds, seconds=p.drain_seconds)
    server = ProxyServer(config, drain=drain)
    tune(p.gc_thresholds, freeze=p.gc_freeze)
    path = os.environ.get(ENV_CONFIG)
    starts = []
    if path and p.reload_seconds > 0:
        watch = ConfigWatch(
            path, lambda: server.reload(load_config(path)), interval=p.reload_seconds, name="proxy"
        )
        starts.append(watch.install)
    return ServerApp(
        server, drain, metrics=server.metrics, on_start=starts, access_logs=(server.access,)
    )
