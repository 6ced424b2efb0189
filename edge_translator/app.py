"""The edge's HTTP surface, over ``plumbing.serve``'s ``Exchange``: its route
table, the one place errors become responses, and the worker's lifecycle.

Its routes are one table of path patterns (``routes.Table``, built in
``EdgeApp._table``): each pattern with the methods it serves, whose error
shape its answers take, its metrics label, and what handles it. ``POST`` on a
client API's path (OpenAI Chat Completions, ``openai.endpoint.CHAT``;
Anthropic Messages, ``anthropic.endpoint.MESSAGES`` and its
``COUNT_TOKENS``; the app's own ``ResponsesApi``, the OpenAI Responses
API over this worker's stored responses, with its ``CompactApi`` on
``/v1/responses/compact``; and Gemini's, ``gemini.routes``, whose
``models/{model}:<verb>`` paths under ``/v1beta`` and ``/v1`` make a
``gemini.endpoint.GeminiApi`` per request) runs the shared flow
(``flow.Flow``: admission, translation, the proxy round trip, the render
loop); a new client API adds its routes to the table. ``POST /v1/embeddings``
(``embeddings.flow``) takes the shared flow's steps it needs, in OpenAI's
authentication and error shape. The stored responses are
served on ``GET`` and ``DELETE /v1/responses/{id}`` and ``GET
/v1/responses/{id}/input_items``, to the tenant that stored them only.
Also the model endpoints, ``GET /v1/models`` and ``GET /v1/models/{id}``
(``model_endpoints``: in Anthropic's shape, its authentication and its errors
for a request with ``anthropic-version``, in Gemini's for a Gemini caller
(``gemini.models.wants_gemini``), in OpenAI's otherwise; the models
the caller may use, ``Tenancy.listed``), ``/healthz``, ``/readyz`` and
``/metrics`` (``flatgate_edge_*``).

A method a route does not serve is a 405 with its ``Allow``; a path no route
serves is a 404 ``Unknown request URL: {METHOD} {path}.`` in the shape of the
API whose path it lies under, else the caller's (``routes``, which says why a
``POST`` to ``/v1/models/{id}`` is such a 404, not a 405). The client APIs'
paths, the stored responses' and unknown paths are access-logged (method,
path and status; never the query string, which a Gemini client fills with
its key); the model endpoints, ``/healthz``, ``/readyz`` and ``/metrics`` are
not. A WebSocket upgrade goes to ``sockets`` (``responses.sessions``: the
Responses API's WebSocket mode on ``/v1/responses``), which answers each of a
socket's turns through ``answer`` with the socket's own Responses API.

It runs under granian's ASGI interface by default (``[edge] interface``),
whose ``send`` waits on a bounded channel: a client that stops reading stops
the edge reading from the proxy, which stops the proxy reading from the
backend, so memory per stream stays bounded. RSGI is leaner and unbounded.

Errors are ``FlatgateError``s and become responses in one place
(``_send_error``): in the shape of the path's client API
(``ClientApi.error_answer``), with the headers of ``errors.error_headers``.
A client that disconnects cancels the request to the proxy. The granian
protocol objects are behind ``Exchange``; this module never sees them.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import msgspec

from flatgate.edge_translator.anthropic.endpoint import COUNT_TOKENS, MESSAGES
from flatgate.edge_translator.client_api import ClientApi, Route
from flatgate.edge_translator.embeddings.flow import EMBEDDINGS, EmbeddingsFlow
from flatgate.edge_translator.errors import (
    AuthenticationFailed,
    MethodNotAllowed,
    NotFound,
    error_headers,
    shutting_down,
)
from flatgate.edge_translator.flow import Flow, note_request_id
from flatgate.edge_translator.gemini.endpoint import GEMINI
from flatgate.edge_translator.gemini.models import gemini_list, gemini_model, wants_gemini
from flatgate.edge_translator.gemini.routes import GeminiRoutes
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.keys import Identity
from flatgate.edge_translator.model_endpoints import (
    anthropic_list,
    anthropic_model,
    openai_model,
    unknown_model,
    wants_anthropic,
)
from flatgate.edge_translator.openai.endpoint import CHAT
from flatgate.edge_translator.proxy_link import ProxyLink, watch
from flatgate.edge_translator.responses.compact import CompactApi
from flatgate.edge_translator.responses.endpoint import (
    ResponsesApi,
    delete_answer,
    input_items_answer,
    retrieve_answer,
)
from flatgate.edge_translator.responses.sessions import ResponsesSockets
from flatgate.edge_translator.responses.store import StoredResponses
from flatgate.edge_translator.routes import Endpoint, Shape, Table
from flatgate.edge_translator.settings import EdgeSettings, load_edge_settings
from flatgate.edge_translator.tenancy import Tenancy
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits import Limiter
from flatgate.proxy.plumbing.accesslog import AccessLog, Entry
from flatgate.proxy.plumbing.auth import TokenCheck
from flatgate.proxy.plumbing.config import ENV_CONFIG
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.gctune import tune
from flatgate.proxy.plumbing.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.reload import ConfigWatch
from flatgate.proxy.plumbing.serve import Exchange, ServerApp, is_loopback
from flatgate.proxy.plumbing.telemetry import Tracing, open_tracing
from flatgate.proxy.transport.base import Transport
from flatgate.proxy.transport.router import Router
from flatgate.proxy.wire.schema import JSON

__all__ = ["EdgeApp", "create_app"]

log = logging.getLogger("flatgate.edge")

_JSON = [("content-type", JSON)]
# A route's handler: the exchange, its log entry, the parameters its path gave.
_Handler: TypeAlias = Callable[[Exchange, Entry, Mapping[str, str]], Awaitable[int]]
# What a route runs: a client API's completions route (the shared flow), or a handler.
_Target: TypeAlias = Route | _Handler
# The metrics label of a path no route serves.
_UNKNOWN = "other"
_INPUT_ITEMS = "/input_items"


class EdgeApp:
    """The edge's request handler; one per worker (its transport is made in the
    worker's loop, on first use)."""

    def __init__(
        self,
        settings: EdgeSettings,
        *,
        transport_factory: Callable[[], Transport] | None = None,
        router: Router | None = None,
        drain: Drain | None = None,
        readiness: Callable[[], Awaitable[tuple[int, bytes]]] | None = None,
        limiter: Limiter | None = None,
        tracing: Tracing | Literal["settings"] | None = "settings",
    ) -> None:
        """``router``: the router the edge calls (the one-process gateway's,
        in process); without it, a separate proxy over HTTP
        (``proxy_link.ProxyLink``, over ``transport_factory``'s transport).
        ``readiness`` answers ``/readyz`` (status, JSON body); without it the
        edge is ready while it is not draining.
        ``tracing``: OpenTelemetry's (``"settings"``: ``[telemetry]``'s)."""
        self.settings = settings
        self._ready = readiness
        e = settings.edge
        self._metrics_token = TokenCheck(e.metrics_token_sha256) if e.metrics_token_sha256 else None
        self.access = AccessLog("edge", e.log_format, enabled=e.access_log)
        self._drain = drain or Drain(e.drain_grace_seconds, e.drain_seconds)
        self.metrics = Metrics("flatgate_edge")
        # Which models each caller may use, and the tenants' limits.
        self.tenancy = Tenancy(settings, limiter)
        # The Responses API, over the stored responses in the [state] store.
        self.responses = ResponsesApi(StoredResponses.following(self.tenancy.limiter))
        self.compact = CompactApi(self.responses.store)
        # The error shapes' APIs (the caller's is chosen per request), and
        # each one's name in the access log.
        self._apis: dict[Shape, ClientApi[Any]] = {
            Shape.OPENAI: CHAT,
            Shape.ANTHROPIC: MESSAGES,
            Shape.RESPONSES: self.responses,
            Shape.GEMINI: GEMINI,
        }
        if tracing == "settings":
            tracing = open_tracing(settings.telemetry, "flatgate-edge")
        self.tracing = tracing
        if tracing is not None:
            self.metrics.collect_from(lambda: tracing.collect("flatgate_edge"))
        if router is None:
            router = ProxyLink(
                e, self.metrics, transport_factory=transport_factory, traced=tracing is not None
            )
        else:
            # Its pool, and the failures the edge reports of its upstream
            # (none, in process), as for a proxy over HTTP.
            watch(self.metrics, router.pool)
        self._router: Router = router
        self._flow = Flow(
            e,
            # Who is calling: [[keys]] and [auth.jwt] (its verified tokens cached per worker).
            identities=Identities.from_settings(settings),
            models=settings.model_index(),
            tenancy=self.tenancy,
            router=self._router,
            metrics=self.metrics,
            drain=self._drain,
        )
        self._embeddings = EmbeddingsFlow(
            self._flow, self._router, self.metrics, e.max_response_bytes
        )
        self._gemini = GeminiRoutes(self._flow, self._embeddings)
        # The Responses API's WebSocket mode: each turn answered as its POST is.
        self.sockets = ResponsesSockets(
            e,
            answer=self.answer,
            identities=lambda: self._flow.identities,
            responses=self.responses,
            max_kept=lambda: self.settings.state.max_stored_response_bytes,
            drain=self._drain,
            access=self.access,
        )
        self.metrics.collect_from(lambda: self.sockets.collect("flatgate_edge"))
        self.routes = self._table()
        self.metrics.watch_admission(self._flow.admission)
        self.metrics.collect_from(self.tenancy.collect)
        stored = self.responses.store
        if stored is not None:
            self.metrics.collect_from(lambda: stored.collect("flatgate_edge"))

    @property
    def identities(self) -> Identities:
        return self._flow.identities

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
            self._flow.identities = Identities.from_settings(settings)
        self._flow.models = settings.model_index()
        self.tenancy.reload(settings)
        self.settings = settings

    def server_app(
        self, drain: Drain, on_start: Sequence[Callable[[asyncio.AbstractEventLoop], None]]
    ) -> ServerApp:
        """The granian target of this edge: its requests, its WebSockets,
        its metrics and access log, ``drain`` and the worker's ``on_start``."""
        return ServerApp(
            self,
            drain,
            metrics=self.metrics,
            on_start=on_start,
            access_logs=(self.access,),
            sockets=self.sockets,
        )

    async def aclose(self) -> None:
        """Close the router and the limits store (for embedding and tests)."""
        await self._router.aclose()
        await self.tenancy.aclose()

    def _table(self) -> Table[_Target]:
        """The edge's routes. A new client API adds its paths here."""
        stored = self.responses.path
        return Table(
            (
                # Each client API's POST paths: the shared flow.
                Endpoint(CHAT.path, ("POST",), Route(CHAT), shape=Shape.OPENAI),
                Endpoint(MESSAGES.path, ("POST",), Route(MESSAGES), shape=Shape.ANTHROPIC),
                Endpoint(
                    COUNT_TOKENS.path,
                    ("POST",),
                    Route(MESSAGES, COUNT_TOKENS),
                    shape=Shape.ANTHROPIC,
                ),
                Endpoint(stored, ("POST",), Route(self.responses), shape=Shape.RESPONSES),
                Endpoint(self.compact.path, ("POST",), Route(self.compact), shape=Shape.RESPONSES),
                # OpenAI's authentication, ids and error shape; its own steps.
                Endpoint(EMBEDDINGS, ("POST",), self._embed, shape=Shape.OPENAI),
                # The stored responses, the tenant's own.
                Endpoint(
                    stored + "/{id}",
                    ("GET", "DELETE"),
                    self._stored,
                    shape=Shape.RESPONSES,
                    label="stored",
                ),
                Endpoint(
                    stored + "/{id}" + _INPUT_ITEMS,
                    ("GET",),
                    self._input_items,
                    shape=Shape.RESPONSES,
                    label="stored",
                ),
                # Gemini's, under /v1beta and /v1 (before /v1/models/{id...}).
                *self._gemini.endpoints(),
                Endpoint("/v1/models", ("GET",), self._models, shape=Shape.CALLER, logged=False),
                # An id may hold slashes. DELETE is OpenAI's method there (a
                # fine-tuned model's deletion): a 405; any other is a 404.
                Endpoint(
                    "/v1/models/{id...}",
                    ("GET",),
                    self._model,
                    shape=Shape.CALLER,
                    label="/v1/models/{id}",
                    logged=False,
                    refuses=("DELETE",),
                ),
                Endpoint("/healthz", ("GET",), self._healthz, shape=Shape.OPENAI, logged=False),
                Endpoint("/readyz", ("GET",), self._readyz, shape=Shape.OPENAI, logged=False),
                Endpoint("/metrics", ("GET",), self._metrics, shape=Shape.OPENAI, logged=False),
            ),
            # An unknown path under an API's own is answered in its shape.
            families={
                MESSAGES.path: Shape.ANTHROPIC,
                stored: Shape.RESPONSES,
                "/v1beta": Shape.GEMINI,
            },
        )

    async def __call__(self, ex: Exchange) -> None:
        await self.answer(ex)

    async def answer(self, ex: Exchange, route: Route | None = None) -> int:
        """One request, answered, logged and counted; the status sent.
        ``route``: the route of the path's completions, instead of the
        table's (a Responses WebSocket's turn, with its socket's own API)."""
        path = ex.path
        method = ex.method
        found = self.routes.find(method, path)
        endpoint = None if found is None else found.endpoint
        # Every answer on a client API's path is logged, named from the start
        # (a refusal before the flow begins, a drain's, says where it was),
        # and every unknown path's (no API's: api is "-").
        logged = endpoint is None or endpoint.logged
        entry = Entry()
        entry.method = method
        entry.path = path
        span = None
        if endpoint is not None and logged:
            entry.api = self._api(endpoint.shape, ex).name
            if self.tracing is not None:
                span = self.tracing.server(ex.header, "chat")
                if self.access.enabled:  # the trace id is the access log's
                    entry.trace_id = span.trace_id
        status = 500
        try:
            draining = self._drain.draining and path != "/healthz"
            if draining or found is None or not found.allowed:
                # The edge's own refusals keep the client's request id, as the flow's do.
                if logged:
                    note_request_id(ex, entry)
                if draining:
                    raise shutting_down()
                if found is None:
                    raise NotFound(f"Unknown request URL: {method} {path}.")
                methods = " or ".join(found.endpoint.methods)
                raise MethodNotAllowed(f"Method {method} not allowed on {path}; use {methods}.")
            target = found.endpoint.target
            if isinstance(target, Route):
                status = await self._flow.run(ex, entry, target if route is None else route)
            else:
                status = await target(ex, entry, found.params)
        except FlatgateError as err:
            status = await self._send_error(ex, err, entry, endpoint)
        except ConnectionError:  # the client left while sending its body
            status = 499
        except Exception:
            log.exception("edge: unexpected error on %s %s", method, path)
            internal = FlatgateError("The server had an error while processing your request.")
            status = await self._send_error(ex, internal, entry, endpoint)
        self.metrics.count(_UNKNOWN if endpoint is None else endpoint.label, status)
        if logged:
            entry.status = status
            self.access.write(entry)
            if span is not None:
                span.note(entry)
                span.end()
        return status

    def _api(self, shape: Shape, ex: Exchange) -> ClientApi[Any]:
        """The client API whose shape ``shape`` is, for this request."""
        if shape is Shape.CALLER:
            if wants_anthropic(ex.header("anthropic-version")):
                return MESSAGES
            return GEMINI if self._wants_gemini(ex) else CHAT
        return self._apis[shape]

    @staticmethod
    def _wants_gemini(ex: Exchange) -> bool:
        return wants_gemini(ex.header("x-goog-api-key"), ex.header("x-goog-api-client"), ex.query)

    async def _send_error(
        self, ex: Exchange, err: FlatgateError, entry: Entry, endpoint: Endpoint[_Target] | None
    ) -> int:
        """Answer ``err`` in the shape of the path's client API (``endpoint``'s;
        for a path no route serves, ``Table.shape_of``), with every error
        answer's headers; the status sent."""
        entry.error = err.code.code
        shape = self.routes.shape_of(ex.path) if endpoint is None else endpoint.shape
        api = self._api(shape, ex)
        request_id = entry.request_id
        if request_id is None:
            # Every error answer has a request id: an early one too (before
            # the body was read, or the model resolved), and the log keeps it.
            request_id = entry.request_id = api.new_id()
        status, body = api.error_answer(err, request_id)
        allow = "POST" if endpoint is None else endpoint.allow
        await ex.respond(status, error_headers(err, request_id, allow=allow), body)
        return status

    async def _embed(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        return await self._embeddings.run(ex, entry)

    async def _stored(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        """A stored response (``GET``) or its deletion (``DELETE``)."""
        return await self._stored_answer(ex, entry, params["id"], items=False)

    async def _input_items(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        """A stored response's input items."""
        return await self._stored_answer(ex, entry, params["id"], items=True)

    async def _stored_answer(
        self, ex: Exchange, entry: Entry, response_id: str, *, items: bool
    ) -> int:
        """A stored response, its deletion, or its input items, for the
        caller's tenant (another tenant's is a 404, as one never stored)."""
        api = self.responses
        note_request_id(ex, entry)
        identity = await api.authenticate(ex, self.identities)
        tenant = identity.tenant
        entry.tenant = tenant or None
        store = api.store
        if store is None:
            status, body = retrieve_answer(None, response_id)
        elif items:
            found = await store.input_items(tenant, response_id)
            status, body = input_items_answer(found, response_id, ex.query)
        elif ex.method == "DELETE":
            status, body = delete_answer(await store.delete(tenant, response_id), response_id)
        else:
            status, body = retrieve_answer(await store.response(tenant, response_id), response_id)
        if status != 200:
            entry.error = (
                codes.RESPONSE_NOT_FOUND if status == 404 else codes.INVALID_REQUEST
            ).code
        entry.first_byte()
        entry.bytes_out = len(body)
        headers = [*_JSON]
        if entry.request_id:
            headers.append(("x-request-id", entry.request_id))
        await ex.respond(status, headers, body)
        return status

    async def _healthz(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        await ex.respond(200, _JSON, b'{"status":"ok"}')
        return 200

    async def _readyz(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        status, body = (200, b'{"ready": true}') if self._ready is None else await self._ready()
        if not self._operator(ex):  # the status alone: no route or backend names
            body = b'{"ready": true}' if status == 200 else b'{"ready": false}'
        await ex.respond(status, _JSON, body)
        return status

    async def _metrics(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        if not self._operator(ex):
            raise AuthenticationFailed(
                "/metrics needs the metrics bearer token ([edge] metrics_token_sha256)"
                + ("." if self._metrics_token is not None else ", or a loopback caller."),
                code=codes.UNAUTHORIZED,
            )
        await ex.respond(200, [("content-type", METRICS_CONTENT_TYPE)], self.metrics.render())
        return 200

    async def _models(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        """``GET /v1/models``: the models the caller may use."""
        api, identity = await self._model_caller(ex)
        if api is MESSAGES:
            body = anthropic_list(self.tenancy.listed(identity), ex.query)
        elif api is GEMINI:
            body = gemini_list(self.tenancy.listed(identity))
        else:
            body = self.tenancy.listing(identity)  # cached per caller
        await ex.respond(200, _JSON, body)
        return 200

    async def _model(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        """``GET /v1/models/{id}`` (a model the caller may not use is a 404,
        as one that does not exist)."""
        api, identity = await self._model_caller(ex)
        model_id = params["id"]
        if api is GEMINI:
            model_id = model_id.removeprefix("models/")
        item = self.tenancy.visible(identity, model_id)
        if item is None:
            raise unknown_model(model_id)
        if api is GEMINI:
            body = gemini_model(item)
        else:
            body = anthropic_model(item, ex.query) if api is MESSAGES else openai_model(item)
        await ex.respond(200, _JSON, body)
        return 200

    async def _model_caller(self, ex: Exchange) -> tuple[ClientApi[Any], Identity]:
        """The API whose shape a model endpoint answers in (Anthropic's for a
        request with ``anthropic-version``, Gemini's for a Gemini caller,
        OpenAI's otherwise), and the caller, by that API's authentication."""
        api = self._api(Shape.CALLER, ex)
        return api, await api.authenticate(ex, self.identities)

    def _operator(self, ex: Exchange) -> bool:
        """Whether the caller may read what only operators see (``/metrics``:
        tenants and their tokens; ``/readyz``'s routes and backends): the
        metrics token when ``metrics_token_sha256`` is set, else a loopback
        peer (a scraper beside the gateway; any other needs the token)."""
        token = self._metrics_token
        if token is not None:
            return token.valid(ex.header("authorization"))
        return is_loopback(ex.peer)


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
    return app.server_app(drain, starts)
