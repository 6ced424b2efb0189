"""The built-in model server: deterministic tokens, for runs, tests and benchmarks.

``flatgate stub --protocol fbs|openai|openai-responses|anthropic`` serves one
protocol per process: ``fbs`` (a ``CompletionRequest`` in, chunk frames out),
``openai`` (Chat Completions), ``openai-responses`` (the Responses API) or
``anthropic`` (Messages). In each API's own wire format it gives the same
deterministic echo (``echo``) and the same faults (``server``), so backend
adapters can be tested end to end against it.

Modules: ``echo`` (the answer and the faults, no format), ``fbs``,
``openai``, ``openai_responses`` and ``anthropic`` (the wire formats;
``openai_request``, ``openai_responses_request`` and ``anthropic_request``
validate their requests), ``embeddings`` (``POST /v1/embeddings`` in the
``fbs`` and OpenAI protocols), ``server`` (HTTP handling, stats, faults),
``settings`` (``[stub]``). ``create_app`` is the granian factory.
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
