"""What a Responses answer needs of its request: ``Echo``, and the ids of
what it creates.

Owns the request fields a ``response`` object echoes (as OpenAI's does, and
as the Open Responses specification's ``ResponseResource`` requires each of
them: ``frequency_penalty``, ``instructions``, ``max_output_tokens``,
``max_tool_calls``, ``parallel_tool_calls``, ``presence_penalty``,
``previous_response_id``, ``prompt_cache_key``, ``reasoning``,
``safety_identifier``, ``service_tier``, ``store``, ``temperature``,
``text``, ``tool_choice``, ``tools``, ``top_logprobs``, ``top_p``,
``truncation``, ``user``, ``metadata``), encoded once per request as a JSON
fragment: the client's values where it sent them, and where not OpenAI's
defaults, the values OpenAI's own answers echo and the specification's
example shows (``temperature`` 1, ``top_p`` 1, ``presence_penalty`` 0,
``frequency_penalty`` 0, ``top_logprobs`` 0, ``service_tier``
``"default"``, ``tool_choice`` ``"auto"``, ``truncation`` ``"disabled"``,
``parallel_tool_calls`` true, ``reasoning`` ``{"effort": null, "summary":
null}``, ``text`` ``{"format": {"type": "text"}}``, ``tools`` and
``metadata`` empty). Each echoed object has what the schema requires of
it: a ``function`` tool its ``name``, ``description``, ``parameters``
(null when not given) and ``strict`` (true unless the client said false:
what the wire carries, the Responses API's default); ``reasoning`` its
``effort`` and ``summary``; ``text`` its ``format``; the client's other
members kept. Also what the renderers need besides: the namespaced tools'
names (to name a call as the client declared it), whether the client
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
    frequency_penalty: float
    instructions: str | None
    max_output_tokens: int | None
    max_tool_calls: int | None
    parallel_tool_calls: bool
    presence_penalty: float
    previous_response_id: str | None
    prompt_cache_key: str | None
    reasoning: msgspec.Raw
    safety_identifier: str | None
    service_tier: str
    store: bool
    temperature: float
    text: msgspec.Raw
    tool_choice: msgspec.Raw
    tools: msgspec.Raw
    top_logprobs: int
    top_p: float
    truncation: str
    user: str | None
    metadata: msgspec.Raw


class _Function(msgspec.Struct, gc=False):
    """A ``function`` tool as the answer echoes it: every member the schema
    requires (``FunctionTool``), null where the client gave none."""

    type: str
    name: str | None
    description: str | None
    parameters: msgspec.Raw
    strict: bool


class _Tool(msgspec.Struct, gc=False):
    # A tool as far as its echo reads it (other members: a hosted tool's own).
    type: str = ""
    name: str | None = None
    description: str | None = None
    parameters: msgspec.Raw = msgspec.Raw()
    strict: bool | None = None


_NULL = b"null"
_DEFAULTS = {
    "reasoning": msgspec.Raw(b'{"effort":null,"summary":null}'),
    "text": msgspec.Raw(b'{"format":{"type":"text"}}'),
    "tool_choice": msgspec.Raw(b'"auto"'),
    "tools": msgspec.Raw(b"[]"),
    "metadata": msgspec.Raw(b"{}"),
}
# What an echoed object must hold, and its value when the client left it out.
_REQUIRED_MEMBERS = {
    "reasoning": {"effort": msgspec.Raw(_NULL), "summary": msgspec.Raw(_NULL)},
    "text": {"format": msgspec.Raw(b'{"type":"text"}')},
}
_encode = msgspec.json.Encoder().encode
_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_tool = msgspec.json.Decoder(_Tool).decode
_raws = msgspec.json.Decoder(list[msgspec.Raw]).decode


def _raw(fields: dict[str, msgspec.Raw], name: str) -> msgspec.Raw:
    raw = fields.get(name)
    if raw is None or bytes(raw) == _NULL:
        return _DEFAULTS[name]
    return raw


def _completed(fields: dict[str, msgspec.Raw], name: str) -> msgspec.Raw:
    """An echoed object with the members the schema requires of it, null
    where the client gave none (a member it sent as null is left out of no
    object: ``text.format`` null reads as the default format)."""
    raw = _raw(fields, name)
    if raw is _DEFAULTS[name]:
        return raw
    given = {k: v for k, v in _members(raw).items() if bytes(v) != _NULL}
    return msgspec.Raw(_encode({**_REQUIRED_MEMBERS[name], **given}))


def _tools(fields: dict[str, msgspec.Raw]) -> msgspec.Raw:
    """``tools`` as sent, each ``function`` tool with every member the schema
    requires (the decoder has checked them: a function tool has no others)."""
    out: list[msgspec.Raw | _Function] = []
    for raw in _raws(_raw(fields, "tools")):
        tool = _tool(raw)
        if tool.type != "function":
            out.append(raw)
            continue
        params = tool.parameters if tool.parameters else msgspec.Raw(_NULL)
        out.append(
            _Function("function", tool.name, tool.description, params, tool.strict is not False)
        )
    return msgspec.Raw(_encode(out))


def echo_of(d: Decoded) -> Echo:
    """What ``d``'s answer echoes of it, and needs of it."""
    req, fields = d.req, d.fields
    store = req.store is not False
    echoed = _Echoed(
        0.0 if req.frequency_penalty is None else req.frequency_penalty,
        req.instructions,
        req.max_output_tokens,
        req.max_tool_calls,
        req.parallel_tool_calls is not False,
        0.0 if req.presence_penalty is None else req.presence_penalty,
        req.previous_response_id,
        req.prompt_cache_key,
        _completed(fields, "reasoning"),
        req.safety_identifier,
        req.service_tier or "default",
        store,
        1.0 if req.temperature is None else req.temperature,
        _completed(fields, "text"),
        _raw(fields, "tool_choice"),
        _tools(fields) if req.tools else _DEFAULTS["tools"],
        req.top_logprobs or 0,
        1.0 if req.top_p is None else req.top_p,
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
