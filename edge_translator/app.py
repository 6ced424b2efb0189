"""The edge's HTTP surface, over ``plumbing.serve``'s ``Exchange``: its routes,
the one place errors become responses, and the worker's lifecycle.

``POST`` on a client API's path (``_ROUTES``: OpenAI Chat Completions,
``openai.endpoint.CHAT``; Anthropic Messages, ``anthropic.endpoint.MESSAGES``
and its ``COUNT_TOKENS``; and the app's own ``ResponsesApi``, the OpenAI
Responses API over this worker's stored responses) runs the shared flow
(``flow.Flow``: admission, translation, the proxy round trip, the render
loop); a new client API adds its routes there. ``POST /v1/embeddings``
(``embeddings.flow``) takes the shared flow's steps it needs, in OpenAI's
authentication and error shape. The stored responses are
served on ``GET`` and ``DELETE /v1/responses/{id}`` and ``GET
/v1/responses/{id}/input_items``, to the tenant that stored them only.
Also the model endpoints, ``GET /v1/models`` and ``GET /v1/models/{id}``
(``model_endpoints``: in Anthropic's shape, its authentication and its errors
for a request with ``anthropic-version``, in OpenAI's otherwise; the models
the caller may use, ``Tenancy.listed``), ``/healthz``, ``/readyz`` and
``/metrics`` (``flatgate_edge_*``).

It runs under granian's ASGI interface by default (``[edge] interface``),
whose ``send`` waits on a bounded channel: a client that stops reading stops
the edge reading from the proxy, which stops the proxy reading from the
backend, so memory per stream stays bounded. RSGI is leaner and unbounded.

Errors are ``EdgeError``s and become responses in one place
(``_send_error``): in the shape of the path's client API
(``ClientApi.error_answer``; OpenAI's off them), with the headers of
``errors.error_headers``. A client that disconnects cancels the request to
the proxy. The granian protocol objects are behind ``Exchange``; this module
never sees them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import msgspec

from flatgate.edge_translator.anthropic.endpoint import COUNT_TOKENS, MESSAGES
from flatgate.edge_translator.client_api import ClientApi, Route
from flatgate.edge_translator.embeddings.flow import EMBEDDINGS, EmbeddingsFlow
from flatgate.edge_translator.errors import (
    AuthenticationFailed,
    EdgeError,
    MethodNotAllowed,
    NotFound,
    error_headers,
    shutting_down,
)
from flatgate.edge_translator.flow import Flow, note_request_id
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.model_endpoints import (
    anthropic_list,
    anthropic_model,
    openai_model,
    unknown_model,
    wants_anthropic,
)
from flatgate.edge_translator.openai.endpoint import CHAT
from flatgate.edge_translator.proxy_link import ProxyLink
from flatgate.edge_translator.responses.endpoint import (
    ResponsesApi,
    delete_answer,
    input_items_answer,
    retrieve_answer,
)
from flatgate.edge_translator.responses.store import StoredResponses
from flatgate.edge_translator.settings import EdgeSettings, load_edge_settings
from flatgate.edge_translator.tenancy import Tenancy
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
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.schema import JSON

__all__ = ["EdgeApp", "create_app"]

log = logging.getLogger("flatgate.edge")

_JSON = [("content-type", JSON)]
# Each client API's POST paths. A new API adds its routes here.
_ROUTES: dict[str, Route] = {
    CHAT.path: Route(CHAT),
    MESSAGES.path: Route(MESSAGES),
    COUNT_TOKENS.path: Route(MESSAGES, COUNT_TOKENS),
}
# OpenAI's authentication, ids and error shape; its own steps (EmbeddingsFlow).
_EMBEDDINGS = Route(CHAT)
_MODELS = "/v1/models"
_GETS = (_MODELS, "/healthz", "/readyz", "/metrics")
# GET /v1/models/{id} (an id may hold slashes: all the rest of the path).
_MODEL = "/v1/models/"
_MODEL_ROUTE = "/v1/models/{id}"
# GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items.
_STORED = "/v1/responses/"
_INPUT_ITEMS = "/input_items"


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
        tracing: Tracing | Literal["settings"] | None = "settings",
    ) -> None:
        """``readiness`` answers ``/readyz`` (status, JSON body); without it the
        edge is ready while it is not draining. ``upstream_metrics`` false:
        the proxy is in process and reports its backends itself.
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
        self._routes = {
            **_ROUTES,
            self.responses.path: Route(self.responses),
            EMBEDDINGS: _EMBEDDINGS,
        }
        if tracing == "settings":
            tracing = open_tracing(settings.telemetry, "flatgate-edge")
        self.tracing = tracing
        if tracing is not None:
            self.metrics.collect_from(lambda: tracing.collect("flatgate_edge"))
        self._link = ProxyLink(
            e,
            self.metrics,
            transport_factory=transport_factory,
            upstream_metrics=upstream_metrics,
            traced=tracing is not None,
        )
        self._flow = Flow(
            e,
            # Who is calling: [[keys]] and [auth.jwt] (its verified tokens cached per worker).
            identities=Identities.from_settings(settings),
            models=settings.model_index(),
            tenancy=self.tenancy,
            link=self._link,
            metrics=self.metrics,
            drain=self._drain,
        )
        self._embeddings = EmbeddingsFlow(
            self._flow, self._link, self.metrics, e.max_response_bytes
        )
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

    @property
    def transport(self) -> Transport:
        return self._link.transport

    async def aclose(self) -> None:
        """Close the transport and the limits store (for embedding and tests)."""
        await self._link.aclose()
        await self.tenancy.aclose()

    async def __call__(self, ex: Exchange) -> None:
        path = ex.path
        method = ex.method
        post = self._routes.get(path)
        stored = post is None and path.startswith(_STORED)
        model = post is None and path.startswith(_MODEL)
        if post is not None or path in _GETS:
            route = path
        else:
            route = "stored" if stored else _MODEL_ROUTE if model else "other"
        # Every answer on a client API's path is logged, named from the start
        # (a refusal before the flow begins, a drain's, says where it was).
        entry = Entry() if post is not None or stored else None
        if entry is not None:
            entry.path = path
            entry.api = post.api.name if post is not None else self.responses.name
        span = None
        if self.tracing is not None and entry is not None:
            span = self.tracing.server(ex.header, "chat")
            entry.trace_id = span.trace_id
        status = 500
        try:
            if self._drain.draining and path != "/healthz":
                if entry is not None:
                    note_request_id(ex, entry)
                raise shutting_down()
            if post is not None and entry is not None:
                if method != "POST":
                    raise MethodNotAllowed(f"Method {method} not allowed on {path}; use POST.")
                if post is _EMBEDDINGS:
                    status = await self._embeddings.run(ex, entry)
                else:
                    status = await self._flow.run(ex, entry, post)
            elif stored and entry is not None:
                status = await self._stored(ex, entry)
            elif path in _GETS or model:
                if method not in ("GET", "HEAD"):
                    raise MethodNotAllowed(f"Method {method} not allowed on {path}; use GET.")
                status = await self._get(ex)
            else:
                raise NotFound(f"Unknown request URL: {method} {path}.")
        except EdgeError as err:
            status = await self._send_error(ex, err, entry)
        except ConnectionError:  # the client left while sending its body
            status = 499
        except Exception:
            log.exception("edge: unexpected error on %s %s", method, path)
            internal = EdgeError("The server had an error while processing your request.")
            status = await self._send_error(ex, internal, entry)
        self.metrics.count(route, status)
        if entry is not None:
            entry.status = status
            self.access.write(entry)
            if span is not None:
                span.note(entry)
                span.end()

    async def _send_error(self, ex: Exchange, err: EdgeError, entry: Entry | None) -> int:
        """Answer ``err`` in the shape of the path's client API (OpenAI's off
        them), with every error answer's headers; the status sent."""
        request_id = None
        if entry is not None:
            entry.error = err.code
            request_id = entry.request_id
        post = self._routes.get(ex.path)
        api: ClientApi[Any] = CHAT if post is None else post.api
        if post is None and ex.path.startswith(_STORED):
            api = self.responses
        if (
            post is None
            and _models_path(ex.path)
            and wants_anthropic(ex.header("anthropic-version"))
        ):
            api = MESSAGES
        if request_id is None:
            # Every error answer has a request id: an early one too (before
            # the body was read, or the model resolved), and the log keeps it.
            request_id = api.new_id()
            if entry is not None:
                entry.request_id = request_id
        status, body = api.error_answer(err, request_id)
        allow = "POST" if post is not None else "GET"
        if post is None and ex.path.startswith(_STORED):
            allow = "GET" if ex.path.endswith(_INPUT_ITEMS) else "GET, DELETE"
        headers = error_headers(err, request_id, allow=allow)
        await ex.respond(status, headers, body)
        return status

    async def _stored(self, ex: Exchange, entry: Entry) -> int:
        """A stored response, its deletion, or its input items, for the
        caller's tenant (another tenant's is a 404, as one never stored)."""
        api = self.responses
        entry.api, entry.path = api.name, ex.path
        note_request_id(ex, entry)
        rest = ex.path[len(_STORED) :]
        items = rest.endswith(_INPUT_ITEMS)
        response_id = rest[: -len(_INPUT_ITEMS)] if items else rest
        method = ex.method
        allowed = ("GET", "HEAD") if items else ("GET", "HEAD", "DELETE")
        if method not in allowed:
            raise MethodNotAllowed(f"Method {method} not allowed on {ex.path}.")
        if not response_id or "/" in response_id:
            raise NotFound(f"Unknown request URL: {method} {ex.path}.")
        identity = await api.authenticate(ex, self.identities)
        tenant = identity.tenant
        entry.tenant = tenant or None
        store = api.store
        if store is None:
            status, body = retrieve_answer(None, response_id)
        elif items:
            found = await store.input_items(tenant, response_id)
            status, body = input_items_answer(found, response_id, ex.query)
        elif method == "DELETE":
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

    async def _get(self, ex: Exchange) -> int:
        path = ex.path
        if path == "/healthz":
            await ex.respond(200, _JSON, b'{"status":"ok"}')
        elif path == "/readyz":
            status, body = (200, b'{"ready": true}') if self._ready is None else await self._ready()
            if not self._operator(ex):  # the status alone: no route or backend names
                body = b'{"ready": true}' if status == 200 else b'{"ready": false}'
            await ex.respond(status, _JSON, body)
            return status
        elif path == "/metrics":
            if not self._operator(ex):
                raise AuthenticationFailed(
                    "/metrics needs the metrics bearer token ([edge] metrics_token_sha256)"
                    + ("." if self._metrics_token is not None else ", or a loopback caller."),
                    code=codes.UNAUTHORIZED,
                )
            await ex.respond(200, [("content-type", METRICS_CONTENT_TYPE)], self.metrics.render())
        else:
            await ex.respond(200, _JSON, await self._models(ex))
        return 200

    def _operator(self, ex: Exchange) -> bool:
        """Whether the caller may read what only operators see (``/metrics``:
        tenants and their tokens; ``/readyz``'s routes and backends): the
        metrics token when ``metrics_token_sha256`` is set, else a loopback
        peer (a scraper beside the gateway; any other needs the token)."""
        token = self._metrics_token
        if token is not None:
            return token.valid(ex.header("authorization"))
        return is_loopback(ex.peer)

    async def _models(self, ex: Exchange) -> bytes:
        """``GET /v1/models`` or ``/v1/models/{id}``'s body, in the caller's
        API's shape, for the models the caller may use (another model is a
        404, as one that does not exist)."""
        anthropic = wants_anthropic(ex.header("anthropic-version"))
        api: ClientApi[Any] = MESSAGES if anthropic else CHAT
        identity = await api.authenticate(ex, self.identities)
        path = ex.path
        if path == _MODELS:
            if anthropic:
                return anthropic_list(self.tenancy.listed(identity), ex.query)
            return self.tenancy.listing(identity)  # cached per caller
        model_id = path[len(_MODEL) :]
        item = self.tenancy.visible(identity, model_id)
        if item is None:
            raise unknown_model(model_id)
        return anthropic_model(item, ex.query) if anthropic else openai_model(item)


def _models_path(path: str) -> bool:
    return path == _MODELS or path.startswith(_MODEL)


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
