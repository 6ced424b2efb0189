"""A Messages request's fields with no wire slot, as the request's extras.

Owns ``extras_of``: the one JSON object (``CompletionRequest.extras``, dialect
``ApiDialect.ANTHROPIC_MESSAGES``) that carries, as the client wrote them, the
top-level fields the schema has no slot for (``models.EXTRA_FIELDS``:
``thinking``, ``output_config``, ``context_management``, ``service_tier``,
``container``, ``mcp_servers``, a top-level ``cache_control``; then any field
flatgate does not know, in the client's order), and flatgate's own keys,
which start with ``$`` (a client's ``$`` field is refused at decode):

- ``"$headers": {"anthropic-beta": "..."}``: the client's beta header, which
  an Anthropic backend must send on;
- ``"$cache_control": [{"at", "index", "cache_control"}, ...]``: block-level
  prompt-cache breakpoints. ``at`` is ``"system"`` (the top-level system
  blocks, which are then the wire's leading System messages, one per block),
  ``"messages"`` (``index`` is the WIRE message the block went into: the
  adapter applies it to the last content block it builds from that message)
  or ``"tools"`` (``index``: the tool's);
- ``"$tools": [{"index", "fields"}, ...]``: a custom tool's fields with no
  wire slot (every one but ``name``, ``description``, ``input_schema``,
  ``type``, ``strict`` and ``cache_control``: ``defer_loading``,
  ``input_examples``, ``eager_input_streaming``, ``allowed_callers``, any
  other), as written, for tool ``index`` (the wire's tool index: the
  client's);
- ``"$blocks": [{"index", "block", "n", "fields"}, ...]``: a content
  block's fields with no wire slot (a text block's ``citations`` unless
  null, and any field flatgate does not know on a text, ``tool_use``,
  ``tool_result``, ``thinking`` or ``redacted_thinking`` block), for the
  block an Anthropic backend builds from WIRE message ``index``: ``block``
  ``"text"`` (its one text block: ``translate`` refuses such a field on one
  of several text blocks of a message, which it joins, naming it),
  ``"tool_result"``, ``"tool_use"`` (``n``: the call's index in the wire
  message) or ``"thinking"`` (``n``: the reasoning part's index; a
  redacted one too).

A request with none of these has no extras (``b""``), and costs nothing
here. Values are ``msgspec.Raw``: the client's bytes, never re-encoded.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from flatgate.proxy.apis.anthropic_messages.request import (
    EXTRA_FIELDS,
    Fields,
    MessagesRequest,
    WithUnknown,
)
from flatgate.proxy.wire.schema import BETA_HEADER

__all__ = ["BlockFields", "CacheMark", "extras_of"]

# A block-level breakpoint: (at, index, the client's cache_control object).
CacheMark = tuple[str, int, msgspec.Raw]
# A block's fields: (wire message index, block kind, n, the fields as written).
BlockFields = tuple[int, str, int, dict[str, msgspec.Raw]]

_encode = msgspec.json.Encoder().encode


class _Mark(msgspec.Struct, gc=False):
    at: str
    index: int
    cache_control: msgspec.Raw


class _ToolFields(msgspec.Struct, gc=False):
    index: int
    fields: Fields


class _BlockFields(msgspec.Struct, gc=False):
    index: int
    block: str
    n: int
    fields: Fields


def extras_of(
    req: MessagesRequest,
    marks: list[CacheMark],
    headers: Mapping[str, str] | None,
    blocks: list[BlockFields] | None = None,
) -> bytes:
    """The extras JSON object text of ``req`` (``b""``: nothing to carry);
    ``blocks``: the content blocks' fields, placed by ``translate``."""
    out: dict[str, object] = {}
    for name in EXTRA_FIELDS:
        raw = getattr(req, name)
        if raw:
            out[name] = raw
    tools = None
    if type(req) is WithUnknown:
        out.update(req.unknown)
        tools = req.tool_fields
    beta = headers.get(BETA_HEADER) if headers else None
    if beta:
        out["$headers"] = {BETA_HEADER: beta}
    if marks:
        out["$cache_control"] = [_Mark(*m) for m in marks]
    if tools:
        out["$tools"] = [_ToolFields(k, f) for k, f in sorted(tools.items())]
    if blocks:
        out["$blocks"] = [_BlockFields(*b) for b in blocks]
    return _encode(out) if out else b""
