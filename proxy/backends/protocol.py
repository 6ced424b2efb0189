"""What a backend protocol's folder registers: ``BackendProtocol``.

Each folder below ``backends`` (``fbs``, ``openai``, ``responses``,
``anthropic``) is one protocol and makes one of these in its ``__init__``:
its name in the config (``[[backends]] protocol``), its entry's keys (a
``BackendConfig`` subclass) and their checks, its adapter, and the stub's
server of it. ``backends.registry`` lists the folders; the config, the
balancer, the dispatcher and the stub derive from it.

No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flatgate.proxy.backends.base import Adapter
from flatgate.proxy.backends.dialect import Wire
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.plumbing.config import Problems

__all__ = ["BackendProtocol", "EmbeddingsWire"]

# The embeddings wire a protocol's server answers in (the stub's,
# ``stub.embeddings``): a FlatBuffers EmbeddingResponse or OpenAI's JSON.
EmbeddingsWire = str


def _no_keys(config: Any, where: str, problems: Problems) -> None:
    """A protocol with no keys of its own has nothing more to check."""


@dataclass(frozen=True, slots=True)
class BackendProtocol:
    """One backend protocol, as its folder registers it."""

    # Its name in [[backends]] protocol (and `flatgate stub --protocol`).
    name: str
    # Its entry's keys: BackendConfig's and its own.
    config: type[BackendConfig]
    # Its adapter, one per configured backend.
    adapter: Callable[[Any], Adapter]
    # The stub's server of it (`flatgate stub --protocol <name>`).
    stub: Callable[[], Wire]
    # The embeddings wire its API has ("fbs", "openai"); None: its API has none.
    embeddings: EmbeddingsWire | None
    # Its own keys' checks, each problem naming where.<key>.
    check: Callable[[Any, str, Problems], None] = _no_keys
