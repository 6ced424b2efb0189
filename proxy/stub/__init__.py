"""The built-in model server: deterministic tokens, for runs, tests and benchmarks.

``flatgate stub --protocol fbs|openai|anthropic`` serves one protocol per
process: ``fbs`` (a ``CompletionRequest`` in, chunk frames out), ``openai``
(Chat Completions) or ``anthropic`` (Messages). In each API's own wire format
it gives the same deterministic echo (``echo``) and the same faults
(``server``), so backend adapters can be tested end to end against it.

Modules: ``echo`` (the answer and the faults, no format), ``fbs``, ``openai``
and ``anthropic`` (the wire formats; ``openai_request`` and
``anthropic_request`` validate their requests), ``server`` (HTTP handling,
stats, faults). ``create_app`` is the granian factory.
"""

from __future__ import annotations

from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.serve import ServerApp
from flatgate.proxy.service.settings import FAULTS, load_config
from flatgate.proxy.stub.echo import StubRequest, deltas_of
from flatgate.proxy.stub.fbs import parse_request
from flatgate.proxy.stub.server import StubServer

__all__ = ["FAULTS", "StubRequest", "StubServer", "create_app", "deltas_of", "parse_request"]


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_STUB_*``."""
    config = load_config()
    s = config.stub
    drain = Drain(grace=s.drain_grace_seconds, seconds=s.drain_seconds)
    return ServerApp(StubServer(s, s.fault or None, drain), drain)
