"""Building a ``CompletionRequest`` from Python values, for internal callers.

Owns ``build_request`` (re-exported as ``wire.request.build_request``, the
documented way), a convenience over the generated object API for services
(and tests, and the load bench) that call the proxy directly, with its
builders leased from a ``BuilderPool``; the edge writes with the faster
``wire.request.writer`` instead. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flatgate.generated.LLMGateway import CompletionRequest as _fb_req
from flatgate.generated.LLMGateway import KeyValue as _fb_kv
from flatgate.generated.LLMGateway import Message as _fb_msg
from flatgate.proxy.wire.builders import BuilderPool, finish_bytes
from flatgate.proxy.wire.schema import PROVIDERS, REQUEST_IDENTIFIER, Role

__all__ = ["ROLES", "build_request"]

# Role names as the OpenAI API spells them.
ROLES: dict[str, int] = {r.name.lower(): int(r) for r in Role}
_POOL = BuilderPool(size=8)


def build_request(
    model: str,
    messages: Sequence[tuple[str, str]],
    *,
    provider: str | int = 0,
    request_id: str = "",
    max_tokens: int = 0,
    stream: bool = True,
    tool_choice_function: str = "",
    metadata: Mapping[str, str] | None = None,
    tenant: str = "",
) -> bytes:
    """A finished ``CompletionRequest`` (with its file identifier) as bytes.

    ``messages`` are ``(role, content)`` pairs, role one of ``ROLES``.
    """
    req = _fb_req.CompletionRequestT()
    req.modelName = model
    req.provider = PROVIDERS[provider] if isinstance(provider, str) else provider
    req.requestId = request_id or None
    req.tenant = tenant or None
    req.maxTokens = max_tokens
    req.stream = stream
    req.messages = []
    for role, content in messages:
        m = _fb_msg.MessageT()
        m.role = ROLES[role]
        m.content = content
        req.messages.append(m)
    if tool_choice_function:
        req.toolChoice = 4
        req.toolChoiceName = tool_choice_function
    if metadata:
        req.metadata = []
        for key, value in sorted(metadata.items()):
            kv = _fb_kv.KeyValueT()
            kv.key, kv.value = key, value
            req.metadata.append(kv)
    with _POOL.lease() as b:
        b.Finish(req.Pack(b), REQUEST_IDENTIFIER)
        return finish_bytes(b)
