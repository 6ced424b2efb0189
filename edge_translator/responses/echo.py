"""What a Responses answer needs of its request: ``Echo``, and the ids of
what it creates.

Owns the request fields a ``response`` object echoes (as OpenAI's does:
``instructions``, ``max_output_tokens``, ``max_tool_calls``,
``parallel_tool_calls``, ``previous_response_id``, ``prompt_cache_key``,
``reasoning``, ``safety_identifier``, ``service_tier``, ``store``,
``temperature``, ``text``, ``tool_choice``, ``tools``, ``top_logprobs``,
``top_p``, ``truncation``, ``user``, ``metadata``), encoded once per request
as a JSON fragment, the client's own JSON where it sent one and OpenAI's
defaults where not; and what the renderers need besides: the namespaced
tools' names (to name a call as the client declared it), whether the client
asked for ``reasoning.encrypted_content``, and whether it is stored.

Ids (``new_id``): a kind's prefix (``resp``, ``msg``, ``fc``, ``rs``) and
128 random bits (``ids.new_id``). Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.edge_translator.ids import new_id as random_id
from flatgate.proxy.apis.openai_responses.request import Decoded

__all__ = ["ENCRYPTED", "Echo", "echo_of", "new_id"]

# The ``include`` value that asks for reasoning items' encrypted content.
ENCRYPTED = "reasoning.encrypted_content"


def new_id(kind: str) -> str:
    """A fresh id of ``kind`` (``"resp"``, ``"msg"``, ``"fc"``, ``"rs"``)."""
    return random_id(f"{kind}_")


class Echo(msgspec.Struct, frozen=True, gc=False):
    """A request's part in its answer (see the module docstring):
    ``fields`` is the echoed fields' JSON, without braces."""

    fields: bytes
    names: dict[str, tuple[str, str]]
    encrypted: bool = False
    store: bool = True
    # The input to store, as ``store.list_pieces``, until the request is
    # admitted (``ResponsesApi.admitted`` takes it out): at most one.
    kept: list[tuple[bytes, ...]] = msgspec.field(default_factory=list)


class _Echoed(msgspec.Struct, gc=False):
    instructions: str | None
    max_output_tokens: int | None
    max_tool_calls: int | None
    parallel_tool_calls: bool
    previous_response_id: str | None
    prompt_cache_key: str | None
    reasoning: msgspec.Raw
    safety_identifier: str | None
    service_tier: str | None
    store: bool
    temperature: float | None
    text: msgspec.Raw
    tool_choice: msgspec.Raw
    tools: msgspec.Raw
    top_logprobs: int | None
    top_p: float | None
    truncation: str
    user: str | None
    metadata: msgspec.Raw


_DEFAULTS = {
    "reasoning": msgspec.Raw(b'{"effort":null,"summary":null}'),
    "text": msgspec.Raw(b'{"format":{"type":"text"}}'),
    "tool_choice": msgspec.Raw(b'"auto"'),
    "tools": msgspec.Raw(b"[]"),
    "metadata": msgspec.Raw(b"{}"),
}
_encode = msgspec.json.Encoder().encode


def _raw(fields: dict[str, msgspec.Raw], name: str) -> msgspec.Raw:
    raw = fields.get(name)
    if raw is None or bytes(raw) == b"null":
        return _DEFAULTS[name]
    return raw


def echo_of(d: Decoded) -> Echo:
    """What ``d``'s answer echoes of it, and needs of it."""
    req, fields = d.req, d.fields
    store = req.store is not False
    echoed = _Echoed(
        req.instructions,
        req.max_output_tokens,
        req.max_tool_calls,
        req.parallel_tool_calls is not False,
        req.previous_response_id,
        req.prompt_cache_key,
        _raw(fields, "reasoning"),
        req.safety_identifier,
        req.service_tier,
        store,
        req.temperature,
        _raw(fields, "text"),
        _raw(fields, "tool_choice"),
        _raw(fields, "tools"),
        req.top_logprobs,
        req.top_p,
        req.truncation or "disabled",
        req.user,
        _raw(fields, "metadata"),
    )
    return Echo(
        _encode(echoed)[1:-1],
        d.names,
        encrypted=ENCRYPTED in (req.include or ()),
        store=store,
    )
