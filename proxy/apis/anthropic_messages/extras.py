"""Messages extras: the one JSON object a Messages request's fields with no
wire slot travel in, written by the edge and read by the ``anthropic``
adapter (both through this module).

``write_extras`` writes ``CompletionRequest.extras`` (dialect
``ApiDialect.ANTHROPIC_MESSAGES``): the top-level fields the schema has no
slot for (``request.EXTRA_FIELDS``: ``thinking``, ``output_config``,
``context_management``, ``service_tier``, ``container``, ``mcp_servers``, a
top-level ``cache_control``; then any field flatgate does not know, in the
client's order), as the client wrote them, and flatgate's own keys, which
start with ``$`` (a client's ``$`` field is refused at decode):

- ``"$headers": {"anthropic-beta": "..."}``: the client's beta header, which
  an Anthropic backend must send on (after its configured one);
- ``"$cache_control": [{"at", "index", "cache_control"}, ...]`` (``Mark``):
  block-level prompt-cache breakpoints. ``at`` is ``"system"`` (the
  top-level system blocks, which are then the wire's leading System
  messages, one per block), ``"messages"`` (``index`` is the WIRE message
  the block went into: the adapter puts it on the last content block it
  builds from that message) or ``"tools"`` (``index``: the tool's);
- ``"$tools": [{"index", "fields"}, ...]`` (``ToolFields``): a custom tool's
  fields with no wire slot (every one but ``name``, ``description``,
  ``input_schema``, ``type``, ``strict`` and ``cache_control``:
  ``defer_loading``, ``input_examples``, ``eager_input_streaming``,
  ``allowed_callers``, any other), as written, for tool ``index`` (the
  wire's tool index: the client's);
- ``"$blocks": [{"index", "block", "n", "fields"}, ...]`` (``BlockFields``):
  a content block's fields with no wire slot (a text block's ``citations``
  unless null, and any field flatgate does not know on a text,
  ``tool_use``, ``tool_result``, ``thinking`` or ``redacted_thinking``
  block), for the block an Anthropic backend builds from WIRE message
  ``index``: ``block`` ``"text"`` (its one text block: ``translate``
  refuses such a field on one of several text blocks of a message, which it
  joins, naming it), ``"tool_result"``, ``"tool_use"`` (``n``: the call's
  index in the wire message) or ``"thinking"`` (``n``: the reasoning part's
  index; a redacted one too).

A message of content parts (a user turn or a ``tool_result`` holding an
image or a document: ``translate``) has no ``$cache_control`` or ``$blocks``
entry for its text, image and document blocks: each block's
``cache_control`` and fields travel on its own part's ``extras`` (one JSON
object of the block's fields, as written), so a breakpoint lands on the
block it was put on, never on the last block of a joined text; the
``tool_result`` block itself still has its entries (``at`` ``"messages"``,
``block`` ``"tool_result"``), as for one of text.

A request with none of these has no extras (``b""``), and costs nothing
here. Values are ``msgspec.Raw``: the client's bytes, never re-encoded.

``read_extras`` reads the object's members back (``Extras``): the client's
fields, to merge as written (its ``tools``, server tools as sent, apart),
and the ``$`` keys decoded; a ``$`` key it
does not know (a newer edge's) is named in ``Extras.unknown``, not guessed
at. What does not read is an ``ExtrasError`` naming the key
(``extras.$tools: ...``), which the adapter answers as an untranslatable
request. Which fields a backend merges, and what another dialect's backend
does with these, is the adapter's (``backends.anthropic.adapter``,
``backends.extras``). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import msgspec

from flatgate.proxy.apis.anthropic_messages.request import (
    EXTRA_FIELDS,
    Fields,
    MessagesRequest,
    WithUnknown,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.schema import BETA_HEADER

__all__ = [
    "MID_SYSTEM_BETA",
    "BlockFields",
    "CacheMark",
    "Extras",
    "ExtrasError",
    "Mark",
    "Placed",
    "ToolFields",
    "mid_system",
    "read_extras",
    "split_betas",
    "write_extras",
]

# The beta (a prefix: the betas are dated) that lets system messages into
# ``messages`` (Claude Code's ``mid-conversation-system-2026-04-07``).
MID_SYSTEM_BETA = "mid-conversation-system-"

# flatgate's own keys.
_HEADERS = "$headers"
_CACHE_CONTROL = "$cache_control"
_TOOLS = "$tools"
_BLOCKS = "$blocks"
# What a header value may hold (visible ASCII and spaces, as the edge got it).
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")


class Mark(msgspec.Struct, gc=False):
    """One ``$cache_control`` entry."""

    at: str
    index: int
    cache_control: msgspec.Raw


class ToolFields(msgspec.Struct, gc=False):
    """One ``$tools`` entry."""

    index: int
    fields: Fields


class BlockFields(msgspec.Struct, gc=False):
    """One ``$blocks`` entry."""

    index: int
    block: str
    n: int
    fields: Fields


# What ``translate`` collects as it walks the messages (tuples: cheaper than
# the entries it becomes here): a block-level breakpoint (at, index, the
# client's cache_control object), and a block's fields (wire message index,
# block kind, n, the fields as written).
CacheMark = tuple[str, int, msgspec.Raw]
Placed = tuple[int, str, int, Fields]

_encode = msgspec.json.Encoder().encode
_decode_marks = msgspec.json.Decoder(list[Mark]).decode
_decode_tool_fields = msgspec.json.Decoder(list[ToolFields]).decode
_decode_block_fields = msgspec.json.Decoder(list[BlockFields]).decode
_decode_headers = msgspec.json.Decoder(dict[str, str]).decode
_decode_tools = msgspec.json.Decoder(list[msgspec.Raw]).decode


def write_extras(
    req: MessagesRequest,
    marks: list[CacheMark],
    headers: Mapping[str, str] | None,
    blocks: list[Placed] | None = None,
    output_config: msgspec.Raw | None = None,
) -> bytes:
    """The extras JSON object text of ``req`` (``b""``: nothing to carry);
    ``marks`` and ``blocks``: the breakpoints and the content blocks' fields,
    placed by ``translate``; ``headers``: the client's (its ``anthropic-beta``);
    ``output_config``: the one in force, when a message's effort changes
    the top-level one (``effort.output_config_in_force``)."""
    out: dict[str, object] = {}
    for name in EXTRA_FIELDS:
        raw = getattr(req, name)
        if name == "output_config" and output_config is not None:
            raw = output_config
        if raw:
            out[name] = raw
    tools = None
    if type(req) is WithUnknown:
        out.update(req.unknown)
        tools = req.tool_fields
    beta = headers.get(BETA_HEADER) if headers else None
    if beta:
        out[_HEADERS] = {BETA_HEADER: beta}
    if marks:
        out[_CACHE_CONTROL] = [Mark(*m) for m in marks]
    if tools:
        out[_TOOLS] = [ToolFields(k, f) for k, f in sorted(tools.items())]
    if blocks:
        out[_BLOCKS] = [BlockFields(*b) for b in blocks]
    return _encode(out) if out else b""


class ExtrasError(FlatgateError, ValueError):
    """Messages extras that do not read; the message names the key."""

    default = codes.UNTRANSLATABLE_REQUEST


def split_betas(value: str) -> list[str]:
    """An ``anthropic-beta`` header's betas (comma-separated), in order."""
    return [b for b in (part.strip() for part in value.split(",")) if b]


def mid_system(betas: Iterable[str]) -> bool:
    """Whether ``betas`` let a system message into ``messages``."""
    return any(b.startswith(MID_SYSTEM_BETA) for b in betas)


class Extras:
    """Messages extras, read: the client's fields and flatgate's own keys."""

    __slots__ = ("betas", "blocks", "fields", "marks", "tool_fields", "tools", "unknown")

    def __init__(self) -> None:
        # The client's fields (no ``$``, no ``tools``), in order: (name, the
        # value as written).
        self.fields: list[tuple[str, bytes]] = []
        # The client's own ``tools`` (server tools), each as written.
        self.tools: list[msgspec.Raw] = []
        self.betas: list[str] = []
        self.marks: list[Mark] = []
        self.tool_fields: list[ToolFields] = []
        self.blocks: list[BlockFields] = []
        # ``$`` keys this flatgate does not know.
        self.unknown: list[str] = []

    @property
    def mid_system(self) -> bool:
        return mid_system(self.betas)


def _own(key: str, raw: msgspec.Raw, out: Extras) -> None:
    """One of flatgate's own (``$``) keys."""
    try:
        if key == _HEADERS:
            for name, value in _decode_headers(raw).items():
                if name.lower() != BETA_HEADER:
                    raise ExtrasError(f"extras.$headers: {name!r} is not a header it sends")
                if not _HEADER_VALUE.fullmatch(value):
                    raise ExtrasError(f"extras.$headers.{BETA_HEADER}: not a header value")
                out.betas += split_betas(value)
        elif key == _CACHE_CONTROL:
            out.marks = _decode_marks(raw)
        elif key == _TOOLS:
            out.tool_fields = _decode_tool_fields(raw)
        elif key == _BLOCKS:
            out.blocks = _decode_block_fields(raw)
        else:
            out.unknown.append(key)
    except msgspec.ValidationError as exc:
        raise ExtrasError(f"extras.{key}: {exc}") from None


def read_extras(fields: Fields, skip: frozenset[str] = frozenset()) -> Extras:
    """Messages extras' members (``fields``: the object's, each as written)
    read: the client's fields as they are (but those in ``skip``: the
    reader's own), its ``tools`` as a list, flatgate's own keys decoded;
    ``ExtrasError`` when one of those does not read."""
    out = Extras()
    for key, raw in fields.items():
        if key.startswith("$"):
            _own(key, raw, out)
        elif key == "tools":
            try:
                out.tools = _decode_tools(raw)
            except msgspec.ValidationError:
                raise ExtrasError("extras.tools: not a list of tool objects") from None
        elif key not in skip:
            out.fields.append((key, bytes(raw)))
    return out
