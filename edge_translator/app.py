"""The edge's HTTP surface: the OpenAI API, over ``plumbing.serve``'s ``Exchange``.

``POST /v1/chat/completions`` authenticates the caller (``auth``), reads the
body within ``max_body_bytes``, decodes and validates it once (``models``),
writes the ``CompletionRequest`` FlatBuffer (``translate``), sends it to the
proxy's ``POST /v1/completions`` asking for size-prefixed frames, and answers
with OpenAI JSON (``answer``, ``render``): SSE events as frames arrive, or one
``chat.completion``. Also ``GET /v1/models``, ``GET /healthz`` and
``GET /metrics`` (``flatgate_edge_*``). The Anthropic Messages API,
``POST /v1/messages`` and ``/v1/messages/count_tokens``, is ``messages``'s:
the app routes it there and lends it the same flow (admission, ``forward``).

It runs under granian's ASGI interface by default (``[edge] interface``),
whose ``send`` waits on a bounded channel: a client that stops reading stops
the edge reading from the proxy, which stops the proxy reading from the
backend, so memory per stream stays bounded. RSGI is leaner and unbounded.

Errors are ``EdgeError``s and become responses in one place (``_send_error``).
A client that disconnects cancels the request to the proxy. The granian
protocol objects are behind ``Exchange``; this module never sees them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping

import msgspec

from flatgate.edge_translator.answer import (
    SSE_HEADERS,
    Keepalive,
    aggregate,
    proxy_error,
    read_body,
    shutting_down,
    stream,
)
from flatgate.edge_translator.anthropic.endpoint import MessagesEndpoint
from flatgate.edge_translator.anthropic.errors import error_body as messages_error
from flatgate.edge_translator.ask import Ask
from flatgate.edge_translator.catalog import resolve_model
from flatgate.edge_translator.errors import (
    AuthenticationFailed,
    EdgeError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    UpstreamFailed,
    UpstreamTimeout,
)
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.keys import Credential, Identity
from flatgate.edge_translator.openai.mapping import new_request_id
from flatgate.edge_translator.openai.models import decode_request
from flatgate.edge_translator.openai.translate import write_request
from flatgate.edge_translator.settings import EdgeSettings, load_edge_settings
from flatgate.edge_translator.tenancy import FREE, Tenancy, with_headers
from flatgate.proxy.limits import Limiter
from flatgate.proxy.plumbing.accesslog import AccessLog, Entry
from flatgate.proxy.plumbing.admission import Refusal
from flatgate.proxy.plumbing.auth import TokenCheck
from flatgate.proxy.plumbing.config import ENV_CONFIG
from flatgate.proxy.plumbing.drain import Drain
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
from flatgate.proxy.transport.base import Timeouts, Transport
from flatgate.proxy.transport.base import UpstreamError as _UpstreamError
from flatgate.proxy.transport.base import UpstreamPoolTimeout as _UpstreamPoolTimeout
from flatgate.proxy.transport.base import UpstreamTimeout as _UpstreamTimeout
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.frames import Usage
from flatgate.proxy.wire.schema import (
    ADMITTED_HEADER,
    BACKEND_HEADER,
    FLATBUFFERS,
    FRAMES,
    JSON,
)

__all__ = ["EdgeApp", "create_app"]

log = logging.getLogger("flatgate.edge")

_JSON = [("content-type", JSON)]
_ADMITTED = ((ADMITTED_HEADER, "1"),)
_TRANSLATE_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2)
_COMPLETIONS = "/v1/chat/completions"
_MESSAGES = "/v1/messages"
_COUNT_TOKENS = "/v1/messages/count_tokens"
_POSTS = (_COMPLETIONS, _MESSAGES, _COUNT_TOKENS)
_GETS = ("/v1/models", "/healthz", "/readyz", "/metrics")
# A request's client is watched for leaving from 50-100 ms in (Watchlist).
_WATCH_TICK = 0.05
# Seconds a client is told to wait when the edge itself is at a limit.
_BUSY_RETRY_AFTER = 1.0


class EdgeApp:
    """The edge's request handler; one per worker (its transport is made in the
    worker's loop, on first use)."""

    def __init__(
        self,
        settings: EdgeSettings,
        *,
        transport_factory: Callable[[], Transport] | None = None,
        drain: Drain | None = None,
        readiness: Callable[[], Awaitable[tuple[int, bytes]]] | None = None,
        upstream_metrics: bool = True,
        limiter: Limiter | None = None,
    ) -> None:
        """``readiness`` answers ``/readyz`` (status, JSON body); without it the
        edge is ready while it is not draining. ``upstream_metrics`` false:
        the proxy is in process and reports its backends itself."""
        self.settings = settings
        self._ready = readiness
        self._upstream_metrics = upstream_metrics
        e = settings.edge
        self._models = settings.model_index()
        # Which models each caller may use, and the tenants' limits.
        self.tenancy = Tenancy(settings, limiter)
        # Who is calling: [[keys]] and [auth.jwt] (its verified tokens cached per worker).
        self.identities = Identities.from_settings(settings)
        self._url = e.proxy_url.rstrip("/") + "/v1/completions"
        self._max_body = e.max_body_bytes
        self._timeouts = Timeouts(
            connect=e.connect_timeout,
            read=e.read_timeout,
            total=e.total_timeout or None,
            first_byte=e.first_byte_timeout,
        )
        self._keepalive = e.keepalive_seconds
        self._transport_factory = transport_factory or (
            lambda: make_transport(e.transport, limit=e.pool_limit, pool_timeout=e.pool_timeout)
        )
        self._transport: Transport | None = None
        self._admission = admission(e)
        self._body_policy = body_policy(e)
        # Presented to the proxy when it authenticates its callers.
        self._proxy_auth = [("authorization", f"Bearer {e.proxy_token}")] if e.proxy_token else []
        self._metrics_token = TokenCheck(e.metrics_token_sha256) if e.metrics_token_sha256 else None
        self.access = AccessLog("edge", e.log_format, enabled=e.access_log)
        self._watchlist = Watchlist(_WATCH_TICK)
        self._drain = drain or Drain(e.drain_grace_seconds, e.drain_seconds)
        self.metrics = Metrics("flatgate_edge")
        self.metrics.watch_transport(lambda: self._transport)
        self.metrics.watch_admission(self._admission)
        self._translate_time = self.metrics.histogram(
            "flatgate_edge_translate_seconds",
            "Time to decode a request's JSON and write its FlatBuffer.",
            _TRANSLATE_BUCKETS,
        )
        self._messages = MessagesEndpoint[Ask](
            identities=self.identities,
            models=self._models,
            body_policy=self._body_policy,
            translate_time=self._translate_time,
            forward=self.forward,
            allowed=self.tenancy.check,
        )
        # Upstream metrics children, labelled once ("proxy": the edge has one upstream).
        self._ttfb = self.metrics.upstream_ttfb_of("proxy")
        self._failures_timeout = self.metrics.upstream_failure_of("proxy", "timeout")
        self._failures_other = self.metrics.upstream_failure_of("proxy", "unreachable")
        self.metrics.collect_from(self.tenancy.collect)

    def reload(self, settings: EdgeSettings) -> None:
        """A new config's ``[[keys]]``, ``[auth]``, ``[[models]]``, ``[state]``,
        ``[[limits]]`` and ``[[tenants]]``, from the next request on (requests
        in flight finish on the old). ``[edge]`` stays as started: its
        addresses, pools and limits need a restart (logged when it differs)."""
        old = self.settings
        if settings.edge != old.edge:
            log.warning("edge: [edge] changes take effect on restart; the rest is reloaded")
            settings = msgspec.structs.replace(settings, edge=old.edge)
        if (settings.keys, settings.auth) != (old.keys, old.auth):
            self.identities = Identities.from_settings(settings)
        self._models = settings.model_index()
        self._messages.reload(identities=self.identities, models=self._models)
        self.tenancy.reload(settings)
        self.settings = settings

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = self._transport_factory()
        return self._transport

    async def aclose(self) -> None:
        """Close the transport and the limits store (for embedding and tests)."""
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.aclose()
        await self.tenancy.aclose()

    async def __call__(self, ex: Exchange) -> None:
        path = ex.path
        method = ex.method
        route = path
        status = 500
        entry: Entry | None = None
        try:
            if self._drain.draining and path != "/healthz":
                route = "other" if path not in _POSTS and path not in _GETS else path
                if path in _POSTS:  # logged, as every answer on these paths is
                    entry = Entry()
                    rid = ex.header("x-request-id")
                    if rid is not None and valid_request_id(rid):
                        entry.request_id = rid
                raise shutting_down()
            if path == _COMPLETIONS:
                entry = Entry()
                if method != "POST":
                    raise MethodNotAllowed(f"Method {method} not allowed on {path}; use POST.")
                status = await self._admitted(ex, entry, self._authenticate, self._completions)
            elif path in (_MESSAGES, _COUNT_TOKENS):
                entry = Entry()
                if method != "POST":
                    raise MethodNotAllowed(f"Method {method} not allowed on {path}; use POST.")
                messages = self._messages
                if path == _MESSAGES:
                    status = await self._admitted(
                        ex, entry, messages.authenticate, messages.messages
                    )
                else:  # answered here, not a completion: no limit charged
                    status = await self._admitted(
                        ex, entry, messages.authenticate, messages.count_tokens, charged=False
                    )
            elif path in _GETS:
                if method not in ("GET", "HEAD"):
                    raise MethodNotAllowed(f"Method {method} not allowed on {path}; use GET.")
                status = await self._get(ex)
            else:
                route = "other"
                raise NotFound(f"Unknown request URL: {method} {path}.")
        except EdgeError as err:
            if entry is not None:
                entry.error = err.code
            status = await self._send_error(ex, err, entry)
        except ConnectionError:  # the client left while sending its body
            status = 499
        except Exception:
            log.exception("edge: unexpected error on %s %s", method, path)
            internal = EdgeError("The server had an error while processing your request.")
            if entry is not None:
                entry.error = internal.code
            status = await self._send_error(ex, internal, entry)
        self.metrics.count(route, status)
        if entry is not None:
            entry.status = status
            self.access.write(entry)

    async def _send_error(self, ex: Exchange, err: EdgeError, entry: Entry | None = None) -> int:
        """Answer ``err`` in the client API's shape; the status sent."""
        headers = list(_JSON)
        if entry is not None and entry.request_id:
            headers.append(("x-request-id", entry.request_id))
        headers += err.headers
        if err.retry_after is not None:
            headers.append(("retry-after", str(max(1, math.ceil(err.retry_after)))))
        if err.status == 405:
            headers.append(("allow", "POST" if ex.path in _POSTS else "GET"))
        if err.code in codes.NOT_RETRYABLE:
            headers.append(("x-should-retry", "false"))
        if err.error_code is codes.DRAINING:
            headers.append(("connection", "close"))
        status, body = err.status, b""
        if ex.path in (_MESSAGES, _COUNT_TOKENS):
            status, body = messages_error(err, entry.request_id if entry is not None else None)
        await ex.respond(status, headers, body or err.body())
        return status

    async def _get(self, ex: Exchange) -> int:
        path = ex.path
        if path == "/healthz":
            await ex.respond(200, _JSON, b'{"status":"ok"}')
        elif path == "/readyz":
            status, body = (200, b'{"ready": true}') if self._ready is None else await self._ready()
            await ex.respond(status, _JSON, body)
            return status
        elif path == "/metrics":
            if self._metrics_token is not None and not self._metrics_token.valid(
                ex.header("authorization")
            ):
                raise AuthenticationFailed(
                    "/metrics needs the metrics bearer token.", code=codes.UNAUTHORIZED
                )
            await ex.respond(200, [("content-type", METRICS_CONTENT_TYPE)], self.metrics.render())
        else:
            auth = ex.header("authorization")
            identity = self.identities.cached(auth) or await self.identities.verify(auth)
            await ex.respond(200, _JSON, self.tenancy.listing(identity))
        return 200

    # -- POST /v1/chat/completions -------------------------------------------

    async def _authenticate(self, ex: Exchange) -> Identity:
        """The OpenAI API's caller, from ``Authorization: Bearer``."""
        auth = ex.header("authorization")
        return self.identities.cached(auth) or await self.identities.verify(auth)

    async def _admitted(
        self,
        ex: Exchange,
        entry: Entry,
        authenticate: Callable[[Exchange], Awaitable[Identity]],
        step: Callable[[Exchange, Ask, str | None], Awaitable[int]],
        *,
        charged: bool = True,
    ) -> int:
        """A request from its headers to its answer. Before the body is read:
        the caller is authenticated, ``charged`` its limits no model changes
        (``Tenancy.admit_caller``), and admitted against the worker's bounds
        and its shares (``plumbing.admission``): the body's bytes (its
        Content-Length, or the body limit when none is sent) and one request
        in flight are held until the proxy has the request."""
        rid = ex.header("x-request-id")
        if rid is not None and valid_request_id(rid):
            entry.request_id = rid  # logged (and answered) even if the request fails
        length = ex.header("content-length")
        if length is not None and not length.isdigit():
            raise InvalidRequest("Invalid Content-Length header.")
        size = min(int(length), self._max_body + 1) if length is not None else self._max_body
        identity = await authenticate(ex)
        entry.tenant = identity.tenant or None
        tenancy = self.tenancy
        early = await tenancy.admit_caller(identity.tenant) if charged else FREE
        try:
            peer = ex.peer
            caller = identity.tenant if identity.credential is not Credential.OPEN else None
            hold = self._admission.admit(
                size, peer.rpartition(":")[0] if caller is None else caller, peer
            )
            if isinstance(hold, Refusal):
                raise EdgeError(
                    f"The gateway refused the request: {hold.message}; retry shortly.",
                    code=hold.code,
                    retry_after=_BUSY_RETRY_AFTER,
                )
            try:
                return await step(ex, Ask(entry, hold, identity, early), length)
            finally:
                self._admission.done(hold)
        except EdgeError as err:
            err.headers = with_headers(err.headers, early.headers)
            raise
        finally:
            tenancy.release_caller(early)

    async def _completions(self, ex: Exchange, ask: Ask, length: str | None) -> int:
        entry = ask.entry
        tenant = ask.identity.tenant
        body = await read_body(ex, self._body_policy, length)
        started = time.perf_counter()
        entry.bytes_in = len(body)
        req = decode_request(body)
        del body
        entry.model = req.model
        model = resolve_model(self._models, req.model)
        entry.provider = model.provider
        ask.completion_id = new_request_id()
        request_id = ex.header("x-request-id") or ask.completion_id
        if not valid_request_id(request_id):
            raise InvalidRequest(
                "Invalid x-request-id header: 1 to 128 printable ASCII characters, no spaces.",
                param="x-request-id",
            )
        entry.request_id = request_id
        ask.frame = write_request(
            req,
            provider=model.provider_id,
            model_name=model.name,
            tenant=tenant,
            request_id=request_id,
        )
        self._translate_time.observe(time.perf_counter() - started)
        # What the answer needs of the request; the request itself (the prompt)
        # is not kept while the answer streams.
        ask.model = model.name
        ask.stream = bool(req.stream)
        ask.choices = req.n or 1
        ask.include_usage = bool(req.stream_options and req.stream_options.include_usage)
        del req
        return await self.forward(ex, ask)

    async def forward(self, ex: Exchange, ask: Ask) -> int:
        """Send a translated request to the proxy and answer it, watching the
        caller and the drain (any client API's last step)."""
        entry = ask.entry
        tenancy = self.tenancy
        tenant = ask.identity.tenant
        tenancy.check(ask.identity, entry.model or ask.model, ask.model)
        admitted = ask.admitted = (
            await tenancy.admit(tenant, ask.model, ask.frame, after_caller=True)
            if tenancy.active
            else FREE
        )
        watch = CallerWatch(ex.disconnected)
        self._watchlist.add(watch)
        untrack = self._drain.track(ask.ending)
        try:
            return await self._exchange(ex, ask)
        except asyncio.CancelledError:
            if not watch.caught():
                raise
            entry.error = "client_closed"
            return 499  # nginx's "client closed request", for the metrics only
        except EdgeError as err:
            err.headers += admitted.headers
            raise
        finally:
            untrack()
            watch.stop()
            tenancy.settle(tenant, ask.model, admitted, ask.usage, ask.answered)

    async def _exchange(self, ex: Exchange, ask: Ask) -> int:
        reply = [("x-request-id", ask.entry.request_id or ask.completion_id)]
        if ask.admitted is not None:
            reply = with_headers(reply + ask.admitted.headers, ask.early.headers)
        keepalive = None
        if ask.stream and self._keepalive:
            keepalive = Keepalive(
                ex, [*SSE_HEADERS, *reply], self._keepalive, self.metrics, ask.api.beat
            )
        try:
            return await self._answer(ex, ask, keepalive, reply)
        except EdgeError as err:
            out = await keepalive.settle() if keepalive is not None else None
            if out is None:
                raise
            # The stream began with keep-alives: the error can only be an event.
            ask.entry.error = err.code
            await out.send(ask.api.error_event(err))
            await out.close()
            return 200
        finally:
            if keepalive is not None:
                keepalive.close()

    async def _answer(
        self,
        ex: Exchange,
        ask: Ask,
        keepalive: Keepalive | None,
        reply: list[tuple[str, str]],
    ) -> int:
        entry = ask.entry
        sent = time.perf_counter()
        try:
            resp = await self.transport.request(
                "POST",
                self._url,
                body=ask.frame,
                headers=[
                    ("content-type", FLATBUFFERS),
                    ("accept", FRAMES),
                    ("x-request-id", entry.request_id or ask.completion_id),
                    *self._proxy_auth,
                    *(_ADMITTED if self.tenancy.active else ()),
                ],
                timeouts=self._timeouts,
            )
        except _UpstreamPoolTimeout as exc:
            raise EdgeError(
                f"No connection to the proxy came free in time; retry shortly: {exc}",
                code=codes.POOL_EXHAUSTED,
                retry_after=_BUSY_RETRY_AFTER,
            ) from exc
        except asyncio.CancelledError:
            if not ask.ending.absorb():
                raise
            raise shutting_down() from None
        except _UpstreamTimeout as exc:
            self._failures_timeout.inc()
            raise UpstreamTimeout(f"The proxy did not answer in time: {exc}") from exc
        except _UpstreamError as exc:
            self._failures_other.inc()
            raise UpstreamFailed(f"The proxy could not be reached: {exc}") from exc
        if self._upstream_metrics:
            self._ttfb.observe(time.perf_counter() - sent)
        entry.backend = resp.headers.get(BACKEND_HEADER)
        # The proxy has the request: its bytes are no longer held here.
        ask.frame = b""
        self._admission.drop_body(ask.hold)
        try:
            if resp.status != 200:
                try:
                    detail = await resp.read()
                except _UpstreamError:
                    detail = b""
                raise proxy_error(resp.status, resp.headers, detail)
            ask.answered = True
            created = int(time.time())
            if ask.stream:
                renderer = ask.api.renderer(ask, created)
                headers = [*SSE_HEADERS, *reply]
                try:
                    return await stream(
                        ex,
                        resp,
                        renderer,
                        headers=headers,
                        keepalive=keepalive,
                        metrics=self.metrics,
                        entry=entry,
                        ending=ask.ending,
                        fail=ask.api.error_event,
                        beat=ask.api.beat,
                    )
                finally:
                    ask.usage = renderer.usage
                    self._note_usage(renderer.usage, entry)
            aggregator = ask.api.aggregator(ask, created)
            body = await aggregate(resp, aggregator, ask.ending)
            ask.usage = aggregator.usage
            self._note_usage(aggregator.usage, entry)
            entry.first_byte()
            entry.bytes_out = len(body)
            await ex.respond(200, [*_JSON, *reply], body)
            return 200
        finally:
            await resp.aclose()

    def _note_usage(self, usage: Usage | None, entry: Entry) -> None:
        if usage is None:
            self.metrics.usage_unknown.inc()
        else:
            entry.tokens = usage.completion_tokens


def create_app(environ: Mapping[str, str] | None = None) -> ServerApp:
    """The app granian serves (``flatgate.edge_translator.app:create_app``,
    factory mode): settings from ``$FLATGATE_CONFIG`` (or the embedded default)
    and ``FLATGATE_EDGE_*`` variables."""
    env = os.environ if environ is None else environ
    settings = load_edge_settings(None, environ=env)
    e = settings.edge
    drain = Drain(grace=e.drain_grace_seconds, seconds=e.drain_seconds)
    app = EdgeApp(settings, drain=drain)
    tune(e.gc_thresholds, freeze=e.gc_freeze)
    path = env.get(ENV_CONFIG)
    starts = []
    if path and e.reload_seconds > 0:
        watch = ConfigWatch(
            path,
            lambda: app.reload(load_edge_settings(path, environ=env)),
            interval=e.reload_seconds,
            name="edge",
        )
        starts.append(watch.install)
    return ServerApp(app, drain, metrics=app.metrics, on_start=starts, access_logs=(app.access,))
