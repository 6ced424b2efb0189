"""Anthropic request -> ``CompletionRequest`` FlatBuffer: the Messages edge's hot path.

Owns ``write_messages``: a decoded ``MessagesRequest`` (or the prompt of a
``CountTokensRequest``) as a ``CompletionRequest`` buffer, through the edges'
shared writer (``wire.request.writer.RequestWriter``). The mapping, message by
message:

- ``system`` (a string, or text blocks joined) is the first message, role
  System; text blocks of which one carries ``cache_control`` are one System
  message each, so that an Anthropic backend rebuilds them, breakpoints
  where the client put them;
- a system message in ``messages`` is a System message at its position;
  its ``output_config`` (a per-message effort) is mapped onto the request's
  own (``apis.anthropic_messages.effort``: the effort in force for the
  answer, in the extras' ``output_config``), and a system message of an
  effort alone (no content) is no message;
- a user turn's ``tool_result`` blocks are Tool messages, in order (the call
  id, the text: a string or text blocks joined, ``is_error``), then its text
  blocks, joined, are one User message (Anthropic requires the results
  first, so the order is kept);
- a user turn with an ``image`` or a ``document`` block is written the same
  way, but its User message is content parts (``apis.anthropic_messages.parts``:
  each text, image and document block in order, dialect
  ``ANTHROPIC_MESSAGES``), and a ``tool_result`` holding an image or a
  document is a Tool message of parts; a block's ``cache_control`` and its
  fields with no slot (a text's ``citations``, unknown ones) then travel on
  its own part's ``extras``, so that an Anthropic backend puts each on the
  block it came on; the ``tool_result`` block's own breakpoint and fields
  stay ``$cache_control`` and ``$blocks`` entries. Base64 was decoded as the
  body was parsed; the bytes are held to their declared media type here
  (a 400 ``invalid_media`` naming the block);
- an assistant turn is one Assistant message: its text blocks joined, its
  ``tool_use`` blocks as tool calls (the ``input`` object, as the caller wrote
  it, is the call's arguments), its ``thinking`` and ``redacted_thinking``
  blocks, in order, as its ``ReasoningPart``s (dialect
  ``ANTHROPIC_MESSAGES``; ``opaque``: the signature's, or the redacted
  data's, UTF-8 bytes; only an Anthropic backend can use them, and it
  verifies them); a turn left with nothing is dropped;
- text blocks are joined with nothing between them, as the OpenAI edge joins
  text parts: the text reaches the backend exactly as sent.

Then: ``tools`` (``input_schema`` is the parameters' JSON Schema, as written),
``tool_choice`` (auto -> Auto, any -> Required, tool -> Function with its
name, none -> None; ``disable_parallel_tool_use`` -> ``parallel_tool_calls =
false``; written only when tools exist), ``stop_sequences`` -> ``stop``,
``metadata.user_id`` -> ``user``, ``max_tokens``, ``temperature``, ``top_p``,
``top_k``, ``stream`` (with ``include_usage``: the Messages API always reports
usage). A block in a role that cannot hold it (an image from the
assistant, a ``tool_use`` from the user) is refused as it is met
(``request.misplaced``). The fields with no slot, the block-level ``cache_control``
breakpoints (by the wire message each went into), a tool's and a content
block's own fields (``$tools`` by the tool's index, ``$blocks`` by the wire
message and the block an Anthropic backend builds from it) and the
``anthropic-beta`` header are the extras (``extras.write_extras``, which
spells them; written before the messages, which are therefore walked first). A message's text blocks
are joined, so a block field (a ``citations``) can go only on a message's
only text block: on one of several, or on an empty one, it is refused
naming it (``messages.2.content.0.citations``), never put on the wrong text.
A top-level system block with one is its own System message, as one with a
breakpoint is.

A ``CountTokensRequest``'s buffer is then verified as whoever reads a
``messages`` request verifies it (``bounds.within_wire``: the proxy's
verifier, its object and depth bounds), so ``count_tokens``, which the edge
answers itself, counts no prompt that ``messages`` would be refused (400
``malformed_request`` naming ``messages``, as the edge refuses it for
``/v1/messages``): one definition of the limits, not a second copy of them
here. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from flatgate.edge_translator.bounds import within_wire
from flatgate.edge_translator.errors import InvalidRequest
from flatgate.proxy.apis.anthropic_messages.blocks import (
    AnyChoice,
    AutoChoice,
    NoneChoice,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
)
from flatgate.proxy.apis.anthropic_messages.effort import output_config_in_force
from flatgate.proxy.apis.anthropic_messages.extras import CacheMark, Placed, write_extras
from flatgate.proxy.apis.anthropic_messages.parts import MEDIA, block_parts, has_media
from flatgate.proxy.apis.anthropic_messages.request import (
    CountTokensRequest,
    Fields,
    MessagesRequest,
    WithUnknown,
    misplaced,
    not_an_object,
    not_utf8,
)
from flatgate.proxy.apis.decoding import is_utf8
from flatgate.proxy.wire.parts import ContentPart, ReasoningPart
from flatgate.proxy.wire.request.writer import Call, RequestWriter, ToolSpec, WireMessage
from flatgate.proxy.wire.schema import ApiDialect, Role, ToolChoiceMode

__all__ = ["tool_choice_of", "write_messages"]

_USER = int(Role.User)
_ASSISTANT = int(Role.Assistant)
_TOOL = int(Role.Tool)
_SYSTEM = int(Role.System)
_ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
_THINKING = (ThinkingBlock, RedactedThinkingBlock)
_EMPTY_USER: WireMessage = (_USER, b"", b"", b"", (), False)
_AT_MESSAGES = "messages"
_NULL = b"null"
# A block's fields with no wire slot, by (message index, block index): the
# top-level system's message index is -1 (``WithUnknown.block_fields``).
Extra = dict[tuple[int, int], Fields] | None


def _fields(b: object, i: int, j: int, extra: Extra) -> Fields | None:
    """Block ``j`` of message ``i``'s fields for ``$blocks``: its
    ``citations`` (unless null) and those flatgate does not know."""
    found = extra.get((i, j)) if extra else None
    cites = b.citations if type(b) is TextBlock else None
    if cites and bytes(cites) != _NULL:
        found = {"citations": cites, **(found or {})}
    return found or None


def _unplaceable(where: str, fields: Fields) -> InvalidRequest:
    path = f"{where}.{next(iter(fields))}"
    return InvalidRequest(
        f"{path}: flatgate joins a message's text blocks into one text, so a field of one "
        "of several text blocks, or of an empty one, has no block to go on: send it on the "
        "message's only text block",
        param=path,
    )


def _text_fields(
    pending: tuple[int, Fields] | None, texts: int, data: bytes, i: int
) -> Fields | None:
    """The fields of a message's text, if they can go on the one text block
    an Anthropic backend builds from it (``_unplaceable`` otherwise)."""
    if pending is None:
        return None
    j, fields = pending
    if texts > 1 or not data:
        raise _unplaceable(f"messages.{i}.content.{j}" if i >= 0 else f"system.{j}", fields)
    return fields


def tool_choice_of(req: CountTokensRequest) -> tuple[int, str, bool | None]:
    """(mode, forced tool name, parallel_tool_calls) on the wire; nothing
    without tools (a choice among no tools is no choice)."""
    choice = req.tool_choice
    if choice is None or not req.tools:
        return ToolChoiceMode.Unset, "", None
    kind = type(choice)
    if kind is NoneChoice:
        return ToolChoiceMode.None_, "", None
    single = False if choice.disable_parallel_tool_use else None  # type: ignore[union-attr]
    if kind is AutoChoice:
        return ToolChoiceMode.Auto, "", single
    if kind is AnyChoice:
        return ToolChoiceMode.Required, "", single
    assert kind is ToolChoice
    return ToolChoiceMode.Function, choice.name, single  # type: ignore[union-attr]


def _tool_result(
    out: list[WireMessage],
    b: ToolResultBlock,
    i: int,
    j: int,
    *,
    marks: list[CacheMark],
    placed: list[Placed],
    extra: Extra,
) -> None:
    """A ``tool_result`` block as a Tool message: its text (a string or text
    blocks joined), or, when it holds an image or a document, its parts."""
    call_id = b.tool_use_id.encode()
    failed = bool(b.is_error)
    content = b.content
    if content is None:
        out.append((_TOOL, b"", b"", call_id, (), failed))
    elif isinstance(content, str):
        out.append((_TOOL, content.encode(), b"", call_id, (), failed))
    elif has_media(content):  # type: ignore[arg-type]
        parts: list[ContentPart] = []
        for k, part in enumerate(content):
            block_parts(part, f"messages.{i}.content.{j}.content.{k}", parts)
        out.append((_TOOL, b"", b"", call_id, (), failed, (), parts))
    else:
        text = "".join(part.text for part in content)  # type: ignore[union-attr]
        out.append((_TOOL, text.encode(), b"", call_id, (), failed))
    if b.cache_control:
        marks.append((_AT_MESSAGES, len(out) - 1, b.cache_control))
    found = _fields(b, i, j, extra) if extra else None
    if found:
        placed.append((len(out) - 1, "tool_result", 0, found))


def _user_parts(
    out: list[WireMessage],
    blocks: list[object],
    i: int,
    *,
    marks: list[CacheMark],
    placed: list[Placed],
    extra: Extra,
) -> None:
    """A user turn that holds an image or a document: its tool results as
    Tool messages, then one User message of its other blocks' parts, in
    order (each block's breakpoint and fields on its own part's extras)."""
    parts: list[ContentPart] = []
    for j, b in enumerate(blocks):
        kind = type(b)
        if kind is ToolResultBlock:
            _tool_result(out, b, i, j, marks=marks, placed=placed, extra=extra)  # type: ignore[arg-type]
        elif kind is TextBlock or kind in MEDIA:
            found = extra.get((i, j)) if extra else None
            block_parts(b, f"messages.{i}.content.{j}", parts, found)  # type: ignore[arg-type]
        else:
            raise misplaced(b, f"messages.{i}.content.{j}")  # type: ignore[arg-type]
    out.append((_USER, b"", b"", b"", (), False, (), parts))


def _user(
    out: list[WireMessage],
    blocks: list[object],
    i: int,
    marks: list[CacheMark],
    *,
    placed: list[Placed],
    extra: Extra,
) -> None:
    if has_media(blocks):
        _user_parts(out, blocks, i, marks=marks, placed=placed, extra=extra)
        return
    texts = []
    results = False
    pending = None  # a text block's breakpoint: on the message the texts become
    text_fields = None
    for j, b in enumerate(blocks):
        kind = type(b)
        if kind is TextBlock:
            texts.append(b.text)  # type: ignore[attr-defined]
            if b.cache_control:  # type: ignore[attr-defined]
                pending = b.cache_control  # type: ignore[attr-defined]
            if b.citations or extra:  # type: ignore[attr-defined]
                found = _fields(b, i, j, extra)
                if found:
                    text_fields = (j, found)
        elif kind is ToolResultBlock:
            results = True
            _tool_result(out, b, i, j, marks=marks, placed=placed, extra=extra)  # type: ignore[arg-type]
        else:  # a tool_use or thinking block (images and documents: _user_parts)
            raise misplaced(b, f"messages.{i}.content.{j}")  # type: ignore[arg-type]
    data = "".join(texts).encode()
    fields = _text_fields(text_fields, len(texts), data, i) if text_fields else None
    if data:
        out.append((_USER, data))
    elif not results:
        out.append(_EMPTY_USER)  # keep the turn: the backend says what an empty one means
    if pending is not None:
        marks.append((_AT_MESSAGES, len(out) - 1, pending))
    if fields:
        placed.append((len(out) - 1, "text", 0, fields))


def _reasoning(b: object) -> ReasoningPart:
    if type(b) is ThinkingBlock:
        return ReasoningPart(b.thinking, b.signature.encode(), _ANTHROPIC)
    return ReasoningPart(opaque=b.data.encode(), dialect=_ANTHROPIC, redacted=True)  # type: ignore[attr-defined]


def _assistant(
    out: list[WireMessage],
    blocks: list[object],
    i: int,
    marks: list[CacheMark],
    *,
    placed: list[Placed],
    extra: Extra,
) -> None:
    texts = []
    calls: list[Call] = []
    reasoning: list[ReasoningPart] = []
    mark = None
    text_fields = None
    pending: list[tuple[str, int, Fields]] = []  # (block kind, n, fields)
    for j, b in enumerate(blocks):
        kind = type(b)
        if kind is TextBlock:
            texts.append(b.text)  # type: ignore[attr-defined]
            if b.citations or extra:  # type: ignore[attr-defined]
                found = _fields(b, i, j, extra)
                if found:
                    text_fields = (j, found)
        elif kind is ToolUseBlock:
            args = bytes(b.input)  # type: ignore[attr-defined]
            if not args.lstrip().startswith(b"{"):
                raise not_an_object(f"messages.{i}.content.{j}.input")
            if not is_utf8(args):
                raise not_utf8(f"messages.{i}.content.{j}.input")
            if extra and (found := extra.get((i, j))):
                pending.append(("tool_use", len(calls), found))  # by its call's index
            calls.append((b.id.encode(), b.name.encode(), args))  # type: ignore[attr-defined]
        elif kind in _THINKING:
            if extra and (found := extra.get((i, j))):
                pending.append(("thinking", len(reasoning), found))  # by its part's index
            reasoning.append(_reasoning(b))
            continue
        else:  # a tool_result, an image or a document
            raise misplaced(b, f"messages.{i}.content.{j}")  # type: ignore[arg-type]
        if b.cache_control:  # type: ignore[attr-defined]
            mark = b.cache_control  # type: ignore[attr-defined]
    data = "".join(texts).encode()
    fields = _text_fields(text_fields, len(texts), data, i) if text_fields else None
    if reasoning:
        out.append((_ASSISTANT, data, b"", b"", calls, False, reasoning))
    elif calls:
        out.append((_ASSISTANT, data, b"", b"", calls, False))
    elif data:
        out.append((_ASSISTANT, data))
    else:
        return  # a turn left with nothing
    if mark is not None:
        marks.append((_AT_MESSAGES, len(out) - 1, mark))
    if fields:
        pending.append(("text", 0, fields))
    if pending:
        w = len(out) - 1
        placed += [(w, *p) for p in pending]


def _system(
    out: list[WireMessage],
    blocks: list[object],
    i: int,
    marks: list[CacheMark],
    *,
    placed: list[Placed],
    extra: Extra,
) -> None:
    """A system message mid-conversation: its text at its position."""
    texts = []
    mark = None
    text_fields = None
    for j, b in enumerate(blocks):
        if type(b) is not TextBlock:
            raise misplaced(b, f"messages.{i}.content.{j}")  # type: ignore[arg-type]
        texts.append(b.text)
        if b.cache_control:
            mark = b.cache_control
        if b.citations or extra:
            found = _fields(b, i, j, extra)
            if found:
                text_fields = (j, found)
    data = "".join(texts).encode()
    fields = _text_fields(text_fields, len(texts), data, i) if text_fields else None
    out.append((_SYSTEM, data) if data else (_SYSTEM, b"", b"", b"", (), False))
    if mark is not None:
        marks.append((_AT_MESSAGES, len(out) - 1, mark))
    if fields:
        placed.append((len(out) - 1, "text", 0, fields))


def _top_system(
    out: list[WireMessage],
    blocks: list[TextBlock],
    marks: list[CacheMark],
    placed: list[Placed],
    extra: Extra,
) -> None:
    """Top-level system blocks: joined into one System message, or, when one
    carries a breakpoint or fields for ``$blocks``, one System message per
    block (so that an Anthropic backend gets the blocks, breakpoints and
    fields where the client put them)."""
    texts = []
    marked = False
    for k, b in enumerate(blocks):
        texts.append(b.text)
        if b.cache_control or ((b.citations or extra) and _fields(b, -1, k, extra)):
            marked = True
    if not marked:
        data = "".join(texts).encode()
        if data:
            out.append((_SYSTEM, data))
        return
    for k, b in enumerate(blocks):
        data = b.text.encode()
        fields = _text_fields((k, f), 1, data, -1) if (f := _fields(b, -1, k, extra)) else None
        out.append((_SYSTEM, data) if data else (_SYSTEM, b"", b"", b"", (), False))
        if b.cache_control:
            marks.append(("system", len(out) - 1, b.cache_control))
        if fields:
            placed.append((len(out) - 1, "text", 0, fields))


def write_messages(
    req: CountTokensRequest,
    *,
    provider: int,
    model_name: str,
    tenant: str = "",
    request_id: str = "",
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """``req`` as a ``CompletionRequest`` buffer (a ``CountTokensRequest``:
    its prompt alone, no sampling parameters, verified as the proxy would);
    ``headers``: the client's headers an Anthropic backend must get
    (``anthropic-beta``), for the extras."""
    full = req if isinstance(req, MessagesRequest) else None
    unknown = full if type(full) is WithUnknown else None
    extra = unknown.block_fields if unknown is not None else None
    marks: list[CacheMark] = []
    placed: list[Placed] = []
    wire: list[WireMessage] = []
    add = wire.append
    system = req.system
    if system:
        if type(system) is str:
            add((_SYSTEM, system.encode()))
        else:
            _top_system(wire, system, marks, placed, extra)  # type: ignore[arg-type]
    for i, m in enumerate(req.messages):
        content = m.content
        role = m.role
        if type(content) is str:
            if role == "user":
                add((_USER, content.encode()) if content else _EMPTY_USER)
            elif role == "assistant":
                if content:
                    add((_ASSISTANT, content.encode()))
            elif content or not m.output_config:
                _system(wire, [TextBlock(content)], i, marks, placed=placed, extra=None)
        elif role == "user":
            _user(wire, content, i, marks, placed=placed, extra=extra)  # type: ignore[arg-type]
        elif role == "assistant":
            _assistant(wire, content, i, marks, placed=placed, extra=extra)  # type: ignore[arg-type]
        elif content or not m.output_config:
            _system(wire, content, i, marks, placed=placed, extra=extra)  # type: ignore[arg-type]
    tools = req.tools
    specs: list[ToolSpec] = []
    if tools:
        for k, t in enumerate(tools):
            specs.append(
                (
                    t.name.encode(),
                    (t.description or "").encode(),
                    bytes(t.input_schema),
                    bool(t.strict),
                )
            )
            if t.cache_control:
                marks.append(("tools", k, t.cache_control))

    w = RequestWriter()
    choice, choice_name, parallel = tool_choice_of(req)
    meta = full.metadata if full is not None else None
    in_force = output_config_in_force(full) if full is not None else None
    extras = (
        write_extras(full, marks, headers, placed, in_force)
        if full is not None
        and (
            in_force is not None
            or marks
            or placed
            or headers
            or full.thinking
            or full.output_config
            or full.context_management
            or full.service_tier
            or full.container
            or full.mcp_servers
            or full.cache_control
            or type(full) is WithUnknown
        )
        else b""
    )
    w.strings(
        request_id=request_id,
        model_name=model_name,
        tenant=tenant,
        user=(meta and meta.user_id) or "",
        tool_choice_name=choice_name,
        response_format=b"",
        extras=extras,
    )
    w.messages(wire)
    if specs:
        w.tools(specs)
    if full is None:
        return within_wire(
            w.finish(provider=provider, tool_choice=choice, parallel_tool_calls=parallel),
            "messages",
        )
    if full.stop_sequences:
        stops = [s.encode() for s in full.stop_sequences if s]
        if stops:
            w.stops(stops)
    stream = bool(full.stream)
    return w.finish(
        provider=provider,
        tool_choice=choice,
        max_tokens=full.max_tokens,
        temperature=full.temperature,
        top_p=full.top_p,
        top_k=full.top_k or 0,
        stream=stream,
        include_usage=stream,
        parallel_tool_calls=parallel,
        extras_dialect=_ANTHROPIC if extras else 0,
    )
