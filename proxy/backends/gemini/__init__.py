"""The ``gemini`` protocol: Google's Gemini API (``generativelanguage.googleapis.com``).

The request written and the answer read with the one model of Gemini's API
(``apis.gemini``): ``encode``, ``parts``, ``stream``, ``whole``,
``embeddings``; Google's error answers as refusals (``refusal``, shared with
the ``vertex`` protocol, which serves Google's models with the same
mapping); the adapter (``adapter``), its keys (``config``) and the stub's
server of it (``stub``, ``stub_wire``). Its embeddings are answered by the
stub's own ``:embedContent`` endpoints (``embeddings="gemini"``: no wire of
``stub.embeddings``)."""

from flatgate.proxy.backends.gemini.adapter import GeminiAdapter
from flatgate.proxy.backends.gemini.config import GeminiConfig, gemini_problems
from flatgate.proxy.backends.gemini.stub import GeminiWire
from flatgate.proxy.backends.protocol import BackendProtocol

PROTOCOL = BackendProtocol(
    GeminiAdapter.protocol,
    GeminiConfig,
    GeminiAdapter,
    GeminiWire,
    embeddings="gemini",
    check=gemini_problems,
)
