"""The Anthropic Messages request, as msgspec Structs, and its decoders.

The one model of the request (its parts are ``blocks``): the edge decodes
with ``decode_messages``, the ``anthropic`` adapter encodes the body it
sends with ``MessagesRequest`` (``omit_defaults``: see ``blocks``), and the
stub reads a body with ``decode_served``.

Owns what ``POST /v1/messages`` (and ``/v1/messages/count_tokens``) accept:
``model``, ``max_tokens`` (required, as Anthropic requires), ``system`` (a
string or text blocks), ``messages`` whose role is ``user``, ``assistant`` or
``system`` (a system message mid-conversation, Claude Code's
``mid-conversation-system-2026-04-07`` beta; its ``output_config``, a
per-message effort, is ``effort``'s) and whose content is a string or
blocks (``text``; a user's ``image`` with a ``base64``, ``url`` or ``file``
source and ``document`` with a ``base64`` PDF, ``text``, ``content``, ``url``
or ``file`` source, ``title``, ``context`` and ``citations``;
``tool_result`` with a string or text, image and document blocks and
``is_error``; ``tool_use``; and an assistant's ``thinking`` with its
``signature`` and ``redacted_thinking`` with its ``data``), ``tools`` (``name``,
``description``, ``input_schema``), ``tool_choice`` (``auto``, ``any``,
``tool``, ``none``, with ``disable_parallel_tool_use``), ``stop_sequences``,
``temperature``, ``top_p``, ``top_k``, ``metadata.user_id`` and ``stream``.

Every other top-level field is kept as the client's JSON (``msgspec.Raw``)
for the request's extras (``extras.write_extras``): the documented ones
with no wire slot (``EXTRA_FIELDS``) as fields, in the one pass a body of
known fields costs (``_Known`` forbids unknown fields; a body that has some
is decoded again, leniently, with its fields as ``Raw``: a ``WithUnknown``). A top-level key
starting with ``$`` is refused (flatgate's own keys in the extras), and so
is ``thread`` (the Message Threads beta: flatgate keeps no threads), with
Anthropic's documented ``thread_unsupported_request`` details, which the
SDKs' tool runners answer by sending the whole conversation. Block-level
``cache_control`` and a text block's ``citations`` are kept as written on
each block and tool. A ``base64`` source's ``data`` is decoded as the body
is parsed (a ``bytes`` field: msgspec decodes base64 in C, strictly); a
string that is not base64 is a 400 naming it
(``messages.0.content.0.source.data: Invalid base64 encoded string``, code
``invalid_media``). A role other than these three is refused in Anthropic's
words (``Unexpected role "..."``: Claude Code falls back by
them).

Inside a tool, a content block or a source, the structs forbid unknown fields too, so
that a body with one (Claude Code's ``defer_loading`` on a tool) also fails
the one pass: ``_with_unknown`` then reads its members as written, takes a
tool's and a block's unknown fields out (``WithUnknown.tool_fields``,
``block_fields``: ``translate`` places them, ``extras.write_extras``
carries them as ``$tools`` and ``$blocks``), and decodes the rest strictly.
A message's own unknown field, and one on a block inside a
``tool_result`` (whose blocks take their documented fields only), are
refused naming it (``messages.0.name:
Extra inputs are not permitted``). ``count_tokens`` reads past a tool's and
a block's. The stub (``decode_served``) reads past all four: one switch
(``_strip``'s ``read_past``) between the edge's strictness and the stub's;
it takes or refuses the unknown top-level fields itself, and words
msgspec's errors its own way.

Server tools and block types flatgate does not carry (``search_result``,
``server_tool_use``, ``container_upload``, ...) are refused with a 400 that
names them (``_CARRIED`` lists what is carried): silently dropping a block
would change what the model is asked. A block in a message of a role that
cannot hold it (``misplaced``: an image from the assistant, a ``tool_use``
from the user) is refused by ``translate`` as it walks the blocks (one
pass); what images and documents become on the wire is ``parts``'s.
Failures are ``InvalidRequest``s whose message names the field the way
Anthropic does (``messages.0.content.1.type: ...``); a body nested too
deeply, or with text that is not UTF-8 (``apis.decoding``), is
``invalid_json``. Pure: no I/O; the decoders are built once at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

import msgspec

from flatgate.proxy.apis.anthropic_messages.blocks import (
    AnyChoice,
    Choice,
    DocumentBlock,
    ImageBlock,
    Message,
    Metadata,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
)
from flatgate.proxy.apis.decoding import (
    UNDECODABLE,
    is_utf8,
    validation_text,
    why_undecodable,
)
from flatgate.proxy.apis.errors import DetailedRequestError, InvalidRequest, shown
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.validation import read_validation

__all__ = [
    "EXTRA_FIELDS",
    "CountTokensRequest",
    "Fields",
    "MessagesRequest",
    "WithUnknown",
    "decode_count_tokens",
    "decode_messages",
    "decode_served",
    "misplaced",
    "not_an_object",
    "not_utf8",
    "thread_unsupported",
    "unexpected_role",
]


_Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_Int32 = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]


class CountTokensRequest(msgspec.Struct, gc=False):
    """``POST /v1/messages/count_tokens``: what the prompt is."""

    model: str
    messages: Annotated[list[Message], msgspec.Meta(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Choice | None = None


class MessagesRequest(CountTokensRequest, kw_only=True, omit_defaults=True, gc=True, dict=True):
    """``POST /v1/messages`` as far as flatgate carries it. ``dict``: the
    endpoint keeps what it computed of the request on it between its steps
    (the prompt's estimate, for ``message_start``). ``omit_defaults``: the
    ``anthropic`` adapter writes the body it sends with it (no field it
    leaves at its default is written; see ``blocks``)."""

    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
    stop_sequences: list[str] | None = None
    temperature: _Unit | None = None
    top_p: _Unit | None = None
    top_k: _Int32 | None = None
    metadata: Metadata | None = None
    stream: bool | None = None
    # Fields with no wire slot, kept as the client's JSON for the extras
    # (``extras.write_extras``); empty: absent. The adapter never sets them:
    # it merges the extras' fields into its body as written.
    thinking: msgspec.Raw = msgspec.Raw()
    output_config: msgspec.Raw = msgspec.Raw()
    context_management: msgspec.Raw = msgspec.Raw()
    service_tier: msgspec.Raw = msgspec.Raw()
    container: msgspec.Raw = msgspec.Raw()
    mcp_servers: msgspec.Raw = msgspec.Raw()
    cache_control: msgspec.Raw = msgspec.Raw()
    # Refused (``thread_unsupported``): flatgate keeps no threads.
    thread: msgspec.Raw = msgspec.Raw()


class _Known(MessagesRequest, kw_only=True, forbid_unknown_fields=True):
    """A body with only the fields ``MessagesRequest`` knows: its one pass."""


# A JSON object's members, each as the client wrote its value.
Fields = dict[str, msgspec.Raw]


class WithUnknown(MessagesRequest, kw_only=True):
    """A request that also holds fields flatgate does not know, as the
    client wrote them (never decoded from JSON: built by ``decode_messages``):
    top-level ones (``unknown``), a custom tool's (``tool_fields``, by the
    tool's index) and a content block's (``block_fields``, by (message,
    block) index; a top-level system block's message index is -1)."""

    unknown: Fields
    tool_fields: dict[int, Fields] = {}
    block_fields: dict[tuple[int, int], Fields] = {}


# The fields kept for the extras, in the order they are written there.
EXTRA_FIELDS = (
    "thinking",
    "output_config",
    "context_management",
    "service_tier",
    "container",
    "mcp_servers",
    "cache_control",
)
_KNOWN_NAMES = frozenset(MessagesRequest.__struct_fields__)
_UNKNOWN = "Object contains unknown field"

_decode_known = msgspec.json.Decoder(_Known).decode
_decode_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_count = msgspec.json.Decoder(CountTokensRequest).decode
_decode_objects = msgspec.json.Decoder(list[Fields]).decode
_decode_content = msgspec.json.Decoder(str | list[Fields]).decode
_decode_str = msgspec.json.Decoder(str).decode
_encode = msgspec.json.Encoder().encode
_TOOL_NAMES = frozenset(ToolDef.__struct_fields__)
_MESSAGE_NAMES = frozenset(Message.__struct_fields__)
_BLOCK_NAMES = {
    str(cls.__struct_config__.tag): frozenset((*cls.__struct_fields__, "type"))
    for cls in (
        TextBlock,
        ImageBlock,
        DocumentBlock,
        ToolUseBlock,
        ToolResultBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
    )
}
_RESULT_NAMES = _BLOCK_NAMES["tool_result"]
# The blocks a tool result's content may hold.
_INNER_NAMES = frozenset(_BLOCK_NAMES[k] for k in ("text", "image", "document"))

_CARRIED = "text, image, document, tool_use, tool_result, thinking and redacted_thinking"
_SOURCES = (
    "an image's source is of type base64, url or file; a document's of type base64, "
    "text, content, url or file"
)
_BASE64 = "Invalid base64"


def _where(message: str) -> tuple[str, str]:
    """(Anthropic's path, msgspec's reason) of a validation message:
    ``$.messages[0].role`` is ``messages.0.role``."""
    v = read_validation(message)
    path = v.where(index=".{}", value="", field=v.missing)
    return path, "Field required" if v.missing else v.reason


def unexpected_role(role: str, where: str) -> InvalidRequest:
    """Anthropic's own words for a role it does not take (clients match on
    ``Unexpected role "..."``: Claude Code falls back by them)."""
    return InvalidRequest(
        f'messages: Unexpected role "{shown(role)}". The Messages API accepts the roles '
        '"user" and "assistant" as input message roles, and "system" mid-conversation.',
        param=where,
    )


def _invalid(exc: msgspec.ValidationError) -> InvalidRequest:
    path, reason = _where(validation_text(exc))
    if path.endswith(".source.type") and reason.startswith("Invalid value"):
        reason += f": {_SOURCES}"
    elif path.endswith(".type") and reason.startswith("Invalid value"):
        reason += f": flatgate carries content blocks of type {_CARRIED}"
    elif path.endswith(".role") and reason.startswith("Invalid enum value"):
        return unexpected_role(reason.partition("'")[2].rpartition("'")[0], path)
    elif reason.startswith(_BASE64):
        return InvalidRequest(f"{path}: {reason}", param=path, code=codes.INVALID_MEDIA)
    return InvalidRequest(f"{path}: {reason}" if path else reason, param=path or None)


def misplaced(block: msgspec.Struct, where: str) -> InvalidRequest:
    """The 400 for a tool_use or thinking block from the user, an image or a
    document from the assistant or in a system message, or a tool_result
    from the assistant."""
    kind = type(block).__struct_config__.tag
    if isinstance(block, ImageBlock | DocumentBlock):
        return InvalidRequest(
            f"{where}: {kind} blocks are only allowed in user messages and tool results",
            param=where,
        )
    if type(block) is not ToolResultBlock:
        return InvalidRequest(
            f"{where}: {kind} blocks are only allowed in assistant messages", param=where
        )
    return InvalidRequest(
        f"{where}: tool_result blocks are only allowed in user messages", param=where
    )


def not_an_object(where: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: Input should be an object", param=where)


def not_utf8(where: str) -> InvalidRequest:
    """The 400 for JSON kept as written (an ``input_schema``, a ``tool_use``
    input) whose bytes are not UTF-8."""
    return InvalidRequest(
        f"{where}: a string in it is not valid UTF-8", param=where, code=codes.INVALID_JSON
    )


def _check_tools(req: CountTokensRequest) -> None:
    names = set()
    for i, tool in enumerate(req.tools or ()):
        if tool.type not in (None, "custom"):
            raise InvalidRequest(
                f"tools.{i}.type: tools of type '{shown(tool.type)}' (server tools) are not "
                "supported: flatgate carries client tools with an input_schema.",
                param=f"tools.{i}.type",
            )
        schema = bytes(tool.input_schema)
        if not schema:
            where = f"tools.{i}.input_schema"
            raise InvalidRequest(f"{where}: Field required", param=where)
        if not schema.lstrip().startswith(b"{"):
            raise not_an_object(f"tools.{i}.input_schema")
        if not is_utf8(schema):
            raise not_utf8(f"tools.{i}.input_schema")
        names.add(tool.name)
    choice = req.tool_choice
    if isinstance(choice, AnyChoice | ToolChoice) and not req.tools:
        raise InvalidRequest(
            "tool_choice: may only be specified while providing tools", param="tool_choice"
        )
    if isinstance(choice, ToolChoice) and choice.name not in names:
        raise InvalidRequest(
            f"tool_choice.name: tool '{shown(choice.name)}' not found in tools",
            param="tool_choice.name",
        )


def _not_json(why: str) -> InvalidRequest:
    return InvalidRequest(
        f"There was an issue with the request body: it is not valid JSON ({why}).",
        code=codes.INVALID_JSON,
    )


R = TypeVar("R", bound="CountTokensRequest")


def _decoded(decode: Callable[[bytes | memoryview], R], body: bytes | memoryview) -> R:
    """``decode(body)``, checked; every failure is an ``InvalidRequest``."""
    try:
        req = decode(body)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from exc
    except msgspec.DecodeError as exc:
        raise _not_json(str(exc)) from exc
    except UNDECODABLE as exc:
        raise _not_json(why_undecodable(exc)) from None
    _check_tools(req)
    return req


def _extra_input(where: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: Extra inputs are not permitted ({why})", param=where)


def _objects(raw: msgspec.Raw, decode: Callable[[msgspec.Raw], object]) -> list[Fields] | None:
    """``raw`` as a list of objects (members as written), or ``None`` if it
    is not one: the strict pass then says what is wrong with it."""
    try:
        value = decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return value if isinstance(value, list) else None


def _pop_unknown(obj: Fields, known: frozenset[str]) -> Fields:
    """The members of ``obj`` not in ``known``, taken out of it."""
    return {k: obj.pop(k) for k in [k for k in obj if k not in known]}


def _block_names(block: Fields) -> frozenset[str] | None:
    """The fields a block of this ``type`` has (``None``: a block type
    refused by its type anyway, or no type: the strict pass says so)."""
    tag = block.get("type")
    try:
        return _BLOCK_NAMES.get(_decode_str(tag)) if tag is not None else None
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _strip_blocks(
    blocks: list[Fields],
    where: str,
    i: int,
    found: dict[tuple[int, int], Fields],
    read_past: bool,
) -> bool:
    """Take the unknown fields out of ``blocks`` (the content of message
    ``i``, or -1: the top-level system) into ``found``; refuse those of a
    tool result's inner blocks, or with ``read_past`` drop them. Whether
    ``blocks`` changed."""
    changed = False
    for j, block in enumerate(blocks):
        names = _block_names(block)
        if names is None:
            continue
        extra = _pop_unknown(block, names)
        if extra:
            found[(i, j)] = extra
            changed = True
        inner = block.get("content") if names is _RESULT_NAMES else None
        parts = _objects(inner, _decode_content) if inner is not None else None
        dropped = False
        for k, part in enumerate(parts or ()):
            known = _block_names(part)
            if known is None or known not in _INNER_NAMES:
                continue
            for name in _pop_unknown(part, known):
                if not read_past:
                    raise _extra_input(
                        f"{where}.{j}.content.{k}.{name}",
                        "a tool result's blocks take their documented fields only",
                    )
                dropped = True
        if dropped:
            block["content"] = msgspec.Raw(_encode(parts))
            changed = True
    return changed


def _strip(
    top: Fields,
    tool_fields: dict[int, Fields],
    block_fields: dict[tuple[int, int], Fields],
    *,
    read_past: bool = False,
) -> None:
    """Take the unknown fields of ``top``'s tools and content blocks out of
    it, into ``tool_fields`` and ``block_fields``; refuse a message's own
    (a message is its role and content) and a tool result's inner blocks'.
    ``read_past`` (the stub's switch): drop those two instead."""
    tools = top.get("tools")
    objs = _objects(tools, _decode_objects) if tools is not None else None
    if objs:
        for k, tool in enumerate(objs):
            extra = _pop_unknown(tool, _TOOL_NAMES)
            if extra:
                tool_fields[k] = extra
        if tool_fields:
            top["tools"] = msgspec.Raw(_encode(objs))
    system = top.get("system")
    blocks = _objects(system, _decode_content) if system is not None else None
    if blocks and _strip_blocks(blocks, "system", -1, block_fields, read_past):
        top["system"] = msgspec.Raw(_encode(blocks))
    messages = top.get("messages")
    objs = _objects(messages, _decode_objects) if messages is not None else None
    changed = False
    for i, m in enumerate(objs or ()):
        extra = _pop_unknown(m, _MESSAGE_NAMES)
        if extra:
            if not read_past:
                raise _extra_input(
                    f"messages.{i}.{next(iter(extra))}", "a message is its role and content"
                )
            changed = True
        content = m.get("content")
        blocks = _objects(content, _decode_content) if content is not None else None
        if _strip_blocks(blocks or [], f"messages.{i}.content", i, block_fields, read_past):
            m["content"] = msgspec.Raw(_encode(blocks))
            changed = True
    if changed:
        top["messages"] = msgspec.Raw(_encode(objs))


def _with_unknown(body: bytes | memoryview) -> MessagesRequest:
    """A body with fields ``MessagesRequest`` does not know, at the top or in
    a tool or a block: the request, and those fields as the client wrote them
    (read again, without them: for such bodies only)."""
    top = _decode_fields(body)
    unknown = {k: top.pop(k) for k in [k for k in top if k not in _KNOWN_NAMES]}
    _refused(unknown)
    tool_fields: dict[int, Fields] = {}
    block_fields: dict[tuple[int, int], Fields] = {}
    _strip(top, tool_fields, block_fields)
    req = _decode_known(_encode(top))
    fields = {f: getattr(req, f) for f in MessagesRequest.__struct_fields__}
    return WithUnknown(
        **fields, unknown=unknown, tool_fields=tool_fields, block_fields=block_fields
    )


def _unknown_field(exc: msgspec.ValidationError) -> bool:
    return str(exc).startswith(_UNKNOWN)


def _messages(body: bytes | memoryview) -> MessagesRequest:
    try:
        return _decode_known(body)
    except msgspec.ValidationError as exc:
        if not _unknown_field(exc):
            raise
    return _with_unknown(body)


def _refused(top: Fields) -> None:
    """Refuse what ``/v1/messages`` refuses of a body's top level whatever
    else it holds: flatgate's own ``$`` keys, and a ``thread`` (not null)."""
    for key in top:
        if key.startswith("$"):  # flatgate's own keys in the extras
            raise InvalidRequest(f"{shown(key)}: Extra inputs are not permitted", param=key)
    thread = top.get("thread")
    if thread and bytes(thread) != b"null":
        raise thread_unsupported()


def _count(body: bytes | memoryview) -> CountTokensRequest:
    """A ``count_tokens`` body; a tool's or block's fields flatgate does not
    know change no count, and are read past (a message's own are refused),
    and what ``/v1/messages`` refuses of the top level is refused here too
    (``_refused``: a ``$`` key only where a key is, a ``thread``)."""
    try:
        req = _decode_count(body)
    except msgspec.ValidationError as exc:
        if not _unknown_field(exc):
            raise
        top = _decode_fields(body)
        _refused(top)
        _strip(top, {}, {})
        return _decode_count(_encode(top))
    data = bytes(body) if isinstance(body, memoryview) else body
    if b'"$' in data or b'"thread"' in data:  # the one pass reads past both
        _refused(_decode_fields(data))
    return req


def thread_unsupported() -> InvalidRequest:
    """The documented refusal of ``thread`` (the Message Threads beta), which
    the SDKs' tool runners answer by sending the whole conversation again."""
    return DetailedRequestError(
        "thread: flatgate keeps no threads; send the full conversation without `thread`.",
        param="thread",
        details={"error_code": "thread_unsupported_request"},
    )


def decode_messages(body: bytes | memoryview) -> MessagesRequest:
    """Decode and check a ``/v1/messages`` body; every failure is an
    ``InvalidRequest``. One pass for a body of known fields; a ``WithUnknown``
    for one with others."""
    req = _decoded(_messages, body)
    if req.thread and bytes(req.thread) != b"null":
        raise thread_unsupported()
    return req


def decode_count_tokens(body: bytes | memoryview) -> CountTokensRequest:
    """Decode and check a ``/v1/messages/count_tokens`` body (no ``max_tokens``)."""
    return _decoded(_count, body)


def decode_served(body: bytes | memoryview) -> tuple[MessagesRequest, Fields]:
    """A body as the stub serves it (``backends.anthropic.stub_request``):
    the request, and its top-level fields ``MessagesRequest`` does not know,
    as written, in the client's order (the caller takes or refuses them). A
    tool's, a block's and a message's unknown fields are read past
    (``_strip``'s ``read_past``: Anthropic's own API takes the fields it
    documents there, and the stub need not know them). One pass for a body
    of known fields, as the edge's; no check beyond the Structs', and
    msgspec's errors are raised as they are: the caller words them."""
    try:
        return _decode_known(body), {}
    except msgspec.ValidationError as exc:
        if not _unknown_field(exc):
            raise
    top = _decode_fields(body)
    unknown = _pop_unknown(top, _KNOWN_NAMES)
    _strip(top, {}, {}, read_past=True)
    return _decode_known(_encode(top)), unknown
