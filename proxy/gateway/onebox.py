"""The one-process gateway: the edge and the proxy's router in one granian app.

``create_app`` is a composition root, as ``cli`` is: it builds a
``ProxyServer`` (routes, balancer, dispatcher, upstream pool) and an
``EdgeApp`` whose transport is that router in process
(``service.inprocess.InProcessTransport``). A JSON request is decoded once
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

from flatgate.edge_translator.app import EdgeApp
from flatgate.edge_translator.config import load_edge_settings
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.gctune import tune
from flatgate.proxy.plumbing.serve import ServerApp
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.inprocess import InProcessTransport
from flatgate.proxy.service.settings import load_config

__all__ = ["build", "create_app"]


def build(config_path: str | None = None, drain: Drain | None = None) -> EdgeApp:
    """The gateway's handler: an edge whose proxy is in process."""
    config = load_config(config_path)
    settings = load_edge_settings(config_path)
    e = settings.edge
    drain = drain or Drain(grace=e.drain_grace_seconds, seconds=e.drain_seconds)
    proxy = ProxyServer(config, drain=drain, worker=str(os.getpid()))
    edge = EdgeApp(
        settings,
        transport_factory=lambda: InProcessTransport(proxy),
        drain=drain,
        readiness=proxy.readiness,
        upstream_metrics=False,
    )
    edge.metrics.include(proxy.metrics)
    return edge


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_*``."""
    settings = load_edge_settings(None)
    e = settings.edge
    drain = Drain(grace=e.drain_grace_seconds, seconds=e.drain_seconds)
    edge = build(None, drain)
    tune(e.gc_thresholds, freeze=e.gc_freeze)
    return ServerApp(edge, drain, metrics=edge.metrics)
