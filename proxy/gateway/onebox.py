"""The one-process gateway: the edge and the proxy's router in one granian app.

``create_app`` is a composition root, as ``cli`` is: it builds a
``ProxyServer`` (routes, balancer, dispatcher, upstream pool) and an
``EdgeApp`` that calls that router in process
(``service.inprocess.InProcessRouter``, the edge's
``transport.router.Router``, which the edge otherwise has over HTTP from
``edge_translator.proxy_link``). A JSON request is decoded once
and written as a ``CompletionRequest``; the router reads its route from those
very bytes and sends a backend the untouched bytes (``fbs``) or its adapter's
JSON, with no loopback HTTP hop and no second parse.

It serves the edge's surface only (the OpenAI API, ``/v1/models``,
``/healthz``, ``/readyz`` from the router's backends, ``/metrics`` with the
router's figures beside the edge's), on the ``[edge]`` address. The ``.fbs``
API is not on this port: a public caller could set ``tenant`` there and
bypass the edge's keys. Internal ``.fbs`` callers use ``flatgate proxy``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import msgspec

from flatgate.edge_translator.app import EdgeApp
from flatgate.edge_translator.settings import EdgeSettings
from flatgate.proxy.gateway.document import GatewayDocument, load_document
from flatgate.proxy.limits import Limiter
from flatgate.proxy.plumbing.config import ENV_CONFIG
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.gctune import tune
from flatgate.proxy.plumbing.reload import ConfigWatch
from flatgate.proxy.plumbing.serve import ServerApp
from flatgate.proxy.plumbing.telemetry import open_tracing
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.inprocess import InProcessRouter
from flatgate.proxy.service.settings import ProxySettings

__all__ = ["build", "create_app", "reloader"]


def _router_config(config: ProxySettings, settings: EdgeSettings) -> ProxySettings:
    """``config`` as the in-process router takes it: its requests are the
    edge's, so a buffer may expand to what the edge's largest body does
    (``verify_request``'s bound), when that is more than ``[proxy]``'s."""
    largest = max(config.proxy.max_body_bytes, settings.edge.max_body_bytes)
    proxy = msgspec.structs.replace(config.proxy, max_body_bytes=largest)
    return msgspec.structs.replace(config, proxy=proxy)


def _parts(document: GatewayDocument) -> tuple[EdgeSettings, ProxySettings]:
    """The edge's part of the document, and the router's."""
    settings = document.edge_settings()
    return settings, _router_config(document.proxy_settings(), settings)


def _build(document: GatewayDocument, drain: Drain | None = None) -> tuple[EdgeApp, ProxyServer]:
    settings, config = _parts(document)
    e = settings.edge
    drain = drain or Drain(grace=e.drain_grace_seconds, seconds=e.drain_seconds)
    # One limiter (and store) per worker for both layers: the edge's
    # tenants' limits, the router's shared backend counts and cooldowns.
    limiter = Limiter(settings.limits_config())
    worker = str(os.getpid())
    # One tracer for both layers: the edge's request span is the parent of
    # the router's backend attempts (the task's current span).
    tracing = open_tracing(document.telemetry, "flatgate")
    proxy = ProxyServer(
        config, drain=drain, worker=worker, limits=False, limiter=limiter, tracing=tracing
    )
    edge = EdgeApp(
        settings,
        router=InProcessRouter(proxy),
        drain=drain,
        readiness=proxy.readiness,
        limiter=limiter,
        tracing=tracing,
    )
    edge.metrics.include(proxy.metrics)
    return edge, proxy


def build(config_path: str | None = None, drain: Drain | None = None) -> EdgeApp:
    """The gateway's handler: an edge whose proxy is in process."""
    return _build(load_document(config_path), drain)[0]


def reloader(path: str, edge: EdgeApp, proxy: ProxyServer) -> Callable[[], None]:
    """Re-read ``path`` (once) for both layers: both halves validate before
    either is applied."""

    def apply() -> None:
        settings, config = _parts(load_document(path))
        proxy.reload(config)
        edge.reload(settings)

    return apply


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_*``,
    the file read once."""
    document = load_document(None)
    e = document.edge
    drain = Drain(grace=e.drain_grace_seconds, seconds=e.drain_seconds)
    edge, proxy = _build(document, drain)
    tune(e.gc_thresholds, freeze=e.gc_freeze)
    path = os.environ.get(ENV_CONFIG)
    starts = [proxy.start]
    if path and e.reload_seconds > 0:
        watch = ConfigWatch(
            path, reloader(path, edge, proxy), interval=e.reload_seconds, name="gateway"
        )
        starts.append(watch.install)
    # The router's own access log is written only on the proxy's HTTP
    # surface, which this app does not serve: the edge's is the one to flush.
    return edge.server_app(drain, starts)
