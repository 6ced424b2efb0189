"""The built-in model server: deterministic tokens, for runs, tests and benchmarks.

``flatgate stub --protocol fbs|openai|openai-responses|anthropic|bedrock`` serves one
protocol per process, in that API's own wire format (each protocol's folder
under ``proxy/backends`` holds its stub's wire module beside its adapter),
with the same deterministic echo and faults (``backends.dialect``), so that
the adapters are tested end to end against it. Here: ``server`` (HTTP
handling, stats, faults), ``cadence`` (the token timing), ``embeddings``
(``POST /v1/embeddings``), ``settings`` (``[stub]``); ``create_app`` is the
granian factory.
"""

from __future__ import annotations

from flatgate.proxy.backends.dialect import FAULTS, StubRequest, deltas_of
from flatgate.proxy.backends.fbs.stub import parse_request
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.serve import ServerApp
from flatgate.proxy.stub.server import StubServer
from flatgate.proxy.stub.settings import load_stub_section

__all__ = ["FAULTS", "StubRequest", "StubServer", "create_app", "deltas_of", "parse_request"]


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_STUB_*``."""
    s = load_stub_section()
    drain = Drain(grace=s.drain_grace_seconds, seconds=s.drain_seconds)
    return ServerApp(StubServer(s, s.fault or None, drain), drain)
