"""The registry of backend protocols: a folder each, listed once here.

A protocol is a folder below ``backends`` whose ``__init__`` makes a
``BackendProtocol`` (``backends.protocol``): its name, its ``[[backends]]``
keys and their checks, its adapter and the stub's server of it. ``PROTOCOLS``
holds them by name (the first is the default ``protocol``); everything that
depends on a backend's protocol derives from it:

- ``backend_config``: a ``[[backends]]`` entry converted to its protocol's
  config class (a key another protocol owns is named as that protocol's);
- ``backend_problems``: the common keys' checks and its protocol's own;
- ``kinds``: the kinds of request a backend serves (``serves``, else what its
  protocol's API has);
- ``adapter_for``: a configured backend's adapter (the balancer's);
- the stub serves ``PROTOCOLS[name].stub`` (``stub.server``) and checks
  ``[stub] protocol`` and ``up`` against it.

Adding a protocol is a folder, its ``PROTOCOL`` imported here and named in
``PROTOCOLS``. No I/O beyond
``section.common_problems``'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from flatgate.proxy.backends.anthropic import PROTOCOL as ANTHROPIC
from flatgate.proxy.backends.base import Adapter
from flatgate.proxy.backends.bedrock import PROTOCOL as BEDROCK
from flatgate.proxy.backends.fbs import PROTOCOL as FBS
from flatgate.proxy.backends.gemini import PROTOCOL as GEMINI
from flatgate.proxy.backends.openai import PROTOCOL as OPENAI
from flatgate.proxy.backends.protocol import BackendProtocol
from flatgate.proxy.backends.responses import PROTOCOL as RESPONSES
from flatgate.proxy.backends.section import (
    COMPLETIONS,
    EMBEDDINGS,
    REQUEST_KINDS,
    BackendConfig,
    RequestKind,
    common_problems,
)
from flatgate.proxy.backends.vertex import PROTOCOL as VERTEX
from flatgate.proxy.plumbing.config import ConfigError, Problems, convert_entry

__all__ = [
    "DEFAULT_PROTOCOL",
    "PROTOCOLS",
    "adapter_for",
    "backend_config",
    "backend_problems",
    "backends_of",
    "kinds",
]

# The protocols, each its folder's registration, the default first.
PROTOCOLS: Mapping[str, BackendProtocol] = {
    p.name: p for p in (FBS, OPENAI, RESPONSES, ANTHROPIC, BEDROCK, GEMINI, VERTEX)
}
DEFAULT_PROTOCOL = next(iter(PROTOCOLS))
_COMMON = frozenset(BackendConfig.__struct_fields__)
# Each protocol's own keys, and the protocols that own each.
_OWNERS: dict[str, list[str]] = {}
for _p in PROTOCOLS.values():
    for _key in _p.config.__struct_fields__:
        if _key not in _COMMON:
            _OWNERS.setdefault(_key, []).append(_p.name)


def backend_config(entry: Any, where: str, problems: Problems) -> BackendConfig | None:
    """One ``[[backends]]`` entry as its protocol's config, or ``None`` if it
    has a problem (added, naming ``where.<key>``): an unknown protocol, or a
    key that only another protocol has."""
    name = entry.get("protocol", DEFAULT_PROTOCOL) if isinstance(entry, Mapping) else None
    spec = PROTOCOLS.get(name) if isinstance(name, str) else None
    if spec is None:
        if isinstance(entry, Mapping):
            problems.append(
                f"{where}.protocol: expected one of {', '.join(PROTOCOLS)}, got {name!r}"
            )
            return None
        return convert_entry(entry, BackendConfig, where, problems)
    own = spec.config.__struct_fields__
    foreign = [key for key in entry if key not in own and key in _OWNERS]
    for key in foreign:
        problems.append(f"{where}.{key}: applies to {' and '.join(_OWNERS[key])} backends only")
    if foreign:
        return None
    return convert_entry(entry, spec.config, where, problems)


def backends_of(data: Mapping[str, Any]) -> list[BackendConfig]:
    """A checked document's ``[[backends]]``, each its protocol's config
    (converted, not checked again); raises ``ConfigError`` for an entry that
    does not convert."""
    problems = Problems()
    found = [
        backend_config(e, f"backends[{i}]", problems)
        for i, e in enumerate(data.get("backends", []))
    ]
    if problems:
        raise ConfigError(*problems)
    return [b for b in found if b is not None]


def backend_problems(
    b: BackendConfig, where: str, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Every reason this backend cannot work, each naming ``where.<key>``."""
    problems = Problems()
    common_problems(b, where, os.environ if environ is None else environ, problems)
    spec = PROTOCOLS[b.protocol]
    if b.serves and EMBEDDINGS in b.serves and spec.embeddings is None:
        problems.append(
            f"{where}.serves: a backend of protocol {b.protocol} serves no embeddings "
            "(flatgate sends it completions only)"
        )
    spec.check(b, where, problems)
    return problems


def kinds(b: BackendConfig) -> tuple[RequestKind, ...]:
    """The kinds of request it serves: ``serves``, or its protocol's (those
    its API has: an ``anthropic`` backend completions only)."""
    if b.serves is not None:
        return b.serves
    return REQUEST_KINDS if PROTOCOLS[b.protocol].embeddings else (COMPLETIONS,)


def adapter_for(b: BackendConfig) -> Adapter:
    """The adapter of a backend's protocol."""
    return PROTOCOLS[b.protocol].adapter(b)
