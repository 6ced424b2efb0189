"""The Converse request body for a wire ``Request`` (``encode_converse``),
for Bedrock's ``/model/{modelId}/converse`` and ``/converse-stream`` (the
same body; the model id is the URL's, never the body's).

The conversation is mapped:

- system and developer messages, wherever they stand, become top-level
  ``system`` text blocks in order (Converse has no system turn);
- user text is a ``text`` block; a message's content parts are blocks in
  order (``converse_parts``: images and documents as bytes or ``s3://``
  locations, audio, cache points); a system or assistant message takes its
  text parts only;
- an assistant turn: its reasoning parts of the Messages dialect first
  (Claude's thinking: ``reasoningContent.reasoningText`` with its
  ``signature``, the part's opaque bytes as text; a redacted one:
  ``reasoningContent.redactedContent``, the part's opaque text
  base64-decoded, as Converse sends it back base64-encoded), reasoning of
  another dialect (an OpenAI encrypted item) left out and named
  ``reasoning``; then its text, then a ``toolUse`` block per call, whose
  ``input`` is the parsed arguments (empty arguments are ``{}``; arguments
  that are not a JSON object are refused naming the message);
- a tool's result is a ``toolResult`` block (``status: error`` when the
  wire says the call failed; its text, or its parts, as the result's
  content) in the user turn that follows, results before the turn's text;
- consecutive messages of one role are merged (Converse wants turns to
  alternate); no empty text block is sent, and a message left with no blocks
  is dropped; a participant ``name`` has no field and is named in omitted;
- tools: ``toolSpec`` with ``name``, ``description``, ``inputSchema.json``
  (the parameters as sent, ``{"type": "object"}`` when none) and ``strict``
  when true;
- ``tool_choice``: auto -> ``auto``, required -> ``any``, a named function
  -> ``tool``; none -> the tools are not sent at all (the model cannot call
  what it is not given), unless the history holds tool calls or results,
  which Converse accepts only with a ``toolConfig``: then it is refused
  naming ``tool_choice`` (dropped: sent as auto). ``parallel_tool_calls =
  false`` has no Converse field: refused naming it (dropped: left out);
- ``inferenceConfig``: ``maxTokens`` (the request's, else
  ``max_tokens_default`` when one is given), ``temperature`` (Converse takes
  0 to 1: above is refused naming it), ``topP``, ``stopSequences`` (the
  ``stop`` list);
- ``top_k`` has no Converse field: it goes in
  ``additionalModelRequestFields`` as ``top_k`` (the name Claude, Mistral
  and Cohere models take there);
- ``response_format``: a ``json_schema`` -> ``outputConfig.textFormat``
  (the schema as a JSON string, its ``name`` and ``description``); ``text``
  means nothing; ``json_object`` has no Converse form and is refused naming
  ``response_format``;
- ``metadata`` -> ``requestMetadata`` (its keys and values in the
  characters the service allows, else refused naming ``metadata.<key>``);
  ``user`` -> ``requestMetadata.user`` likewise;
- ``seed``, ``presence_penalty``, ``frequency_penalty`` and ``n`` > 1 have
  no Converse field: each is refused naming it.

The client's extras: of the Messages dialect, ``thinking`` goes in
``additionalModelRequestFields`` as sent (how Claude takes it through
Converse), the client's ``anthropic-beta`` values there as
``anthropic_beta``, ``output_config.effort`` -> ``outputConfig.effort``,
``$cache_control`` marks -> a ``cachePoint`` after the last block built from
the marked message (or after the marked tool, or the system blocks); any
other field of theirs (server ``tools``, ``service_tier``, ...) is judged
by ``backends.extras.report_all``, a tool's or a block's own fields
(``defer_loading``, a text's ``citations``) by ``extras.placed``, as
``tools.<field>`` and ``messages.content.<field>`` (named, or refused
unless dropped); a cache mark on nothing Converse is sent is refused, as
at an ``anthropic`` backend. Extras of another dialect: none of their fields
has a Converse form, and all are judged the same way.

A field refused is an ``Untranslatable`` naming it, unless ``drop`` (the
backend's ``drop_unsupported``): then it is left out and named in
``omitted``. The body is written with the one model of the API
(``apis.bedrock_converse``), so blobs are base64 as the service's JSON
protocol wants. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import struct

import msgspec

from flatgate.proxy.apis.anthropic_messages.extras import Extras, ExtrasError
from flatgate.proxy.apis.anthropic_messages.extras import read_extras as read_messages_extras
from flatgate.proxy.apis.bedrock_converse.blocks import (
    ContentBlock,
    Message,
    ReasoningContent,
    ReasoningText,
    SystemBlock,
    ToolResultBlock,
    ToolResultContent,
    ToolUseBlock,
)
from flatgate.proxy.apis.bedrock_converse.request import (
    ANY,
    AUTO,
    ConverseRequest,
    InferenceConfig,
    JsonSchema,
    OutputConfig,
    OutputFormat,
    OutputStructure,
    SpecificTool,
    ToolChoice,
    ToolConfig,
    ToolDef,
    ToolInputSchema,
    ToolSpec,
)
from flatgate.proxy.backends.base import Untranslatable, refuse
from flatgate.proxy.backends.bedrock.converse_parts import Parts, cache_point, part_blocks
from flatgate.proxy.backends.extras import Fields, placed, read_extras, report_all, unsupported
from flatgate.proxy.backends.json_api import object_arguments
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import ApiDialect, ToolChoiceMode

__all__ = ["encode_converse"]

_MESSAGES = int(ApiDialect.ANTHROPIC_MESSAGES)
_ANY_OBJECT = msgspec.Raw(b'{"type":"object"}')
_encode = msgspec.json.Encoder().encode
# The service's pattern for a requestMetadata value (and, here, its key).
_METADATA_MAX = 256
_METADATA = re.compile(rf"[a-zA-Z0-9\s:_@$#=/+,\-.]{{0,{_METADATA_MAX}}}")
# Never taken from Messages extras: the request's own.
_OWN = frozenset({"model", "messages", "stream", "max_tokens"})
_F32 = struct.Struct("<f")


class _ResponseFormat(msgspec.Struct, gc=False):
    type: str = ""
    json_schema: _JsonSchemaFormat | None = None


class _JsonSchemaFormat(msgspec.Struct, gc=False):
    schema: msgspec.Raw = msgspec.Raw()
    name: str | None = None
    description: str | None = None


class _OutputConfigExtra(msgspec.Struct, gc=False):
    effort: str | None = None


@functools.lru_cache(maxsize=512)
def _f32(value: float | None) -> float | None:
    """A float32 of the wire as the shortest decimal that is it (the
    client's 0.9, not 0.8999999761581421); a request's few values repeat,
    so each is worked out once."""
    if value is None:
        return None
    packed = _F32.pack(value)
    for digits in range(6, 10):
        short = float(f"{value:.{digits}g}")
        if _F32.pack(short) == packed:
            return short
    return value


def _reasoning(parts: list[ReasoningPart], where: str, omitted: list[str]) -> list[ContentBlock]:
    blocks = []
    for j, part in enumerate(parts):
        at = f"{where}.reasoning[{j}]"
        if part.dialect != _MESSAGES or not part.opaque:
            omitted.append("reasoning")
        elif part.redacted:
            try:
                data = base64.b64decode(part.opaque, validate=True)
            except binascii.Error:
                raise Untranslatable(f"{at}: redacted reasoning that is not base64") from None
            blocks.append(ContentBlock(reasoning_content=ReasoningContent(redacted_content=data)))
        else:
            try:
                signature = part.opaque.decode()
            except UnicodeDecodeError:
                raise Untranslatable(f"{at}: a reasoning signature that is not UTF-8") from None
            text = ReasoningText(part.text, signature)
            blocks.append(ContentBlock(reasoning_content=ReasoningContent(reasoning_text=text)))
    return blocks


def _result_content(blocks: list[ContentBlock]) -> list[ToolResultContent]:
    """A tool result's blocks as its content (a cache point has no place in one)."""
    out = []
    for b in blocks:
        if b.text is not None:
            out.append(ToolResultContent(text=b.text))
        elif b.image is not None:
            out.append(ToolResultContent(image=b.image))
        elif b.document is not None:
            out.append(ToolResultContent(document=b.document))
    return out


class _Conversation:
    """The system blocks and messages so far, and the blocks each wire
    message became (for cache points placed after them)."""

    __slots__ = ("made", "messages", "system", "tool_blocks", "track")

    def __init__(self, track: bool) -> None:
        self.system: list[SystemBlock] = []
        self.messages: list[Message] = []
        # Wire message index -> (the list its blocks went into, the last
        # one); kept only when ``track`` (the request has extras, which may
        # place cache points).
        self.made: dict[int, tuple[list[ContentBlock] | list[SystemBlock], object]] = {}
        self.track = track
        self.tool_blocks = False  # whether the history holds tool calls or results

    def add(self, i: int, role: str, blocks: list[ContentBlock]) -> None:
        if not blocks:
            return
        msgs = self.messages
        if msgs and msgs[-1].role == role:
            content = msgs[-1].content
            content.extend(blocks)
            if role == "user" and blocks[0].tool_result is not None:
                # Converse wants a turn's tool results before any text in it.
                content.sort(key=lambda b: b.tool_result is None)
        else:
            content = [*blocks]
            msgs.append(Message(role, content))
        if self.track:
            self.made[i] = (content, blocks[-1])


def _conversation(req: Request, omitted: list[str], out: Parts) -> _Conversation:
    conv = _Conversation(bool(req.extras))
    msgs = conv.messages
    made = conv.made if conv.track else None
    for i, m in enumerate(req.messages):
        role = m.role
        content = m.content
        parts = m.parts
        if m.name:
            omitted.append("name")  # Converse has no participant names
        if (
            parts is None
            and m.reasoning is None
            and not m.tool_calls
            and role in {"user", "assistant"}
        ):
            # The common message, text alone: no walk through ``add``.
            if content:
                block = ContentBlock(text=content)
                if msgs and msgs[-1].role == role:
                    msgs[-1].content.append(block)
                else:
                    msgs.append(Message(role, [block]))
                if made is not None:
                    made[i] = (msgs[-1].content, block)
            continue
        where = f"messages[{i}]"
        if parts and role not in ("tool", "user"):
            content = out.text_of(parts, where)
            parts = None
        if role in ("system", "developer"):
            if content:
                system = SystemBlock(text=content)
                conv.system.append(system)
                if made is not None:
                    made[i] = (conv.system, system)
        elif role == "tool":
            conv.tool_blocks = True
            if parts:
                inner = _result_content(part_blocks(parts, where, out, tool_result=True))
            else:
                inner = [ToolResultContent(text=m.content)] if m.content else []
            result = ToolResultBlock(m.tool_call_id, inner, "error" if m.is_error else None)
            conv.add(i, "user", [ContentBlock(tool_result=result)])
        elif role == "assistant":
            blocks = _reasoning(m.reasoning, where, omitted) if m.reasoning else []
            if content:
                blocks.append(ContentBlock(text=content))
            for call in m.tool_calls or ():
                conv.tool_blocks = True
                fn = call.function
                use = ToolUseBlock(call.id, fn.name, object_arguments(fn.arguments, where))
                blocks.append(ContentBlock(tool_use=use))
            conv.add(i, "assistant", blocks)
        elif parts:
            conv.add(i, "user", part_blocks(parts, where, out))
        elif content:
            conv.add(i, "user", [ContentBlock(text=content)])
    return conv


def _tools(req: Request, conv: _Conversation, omitted: list[str], drop: bool) -> ToolConfig | None:
    if not req.tools:
        return None
    mode = req.tool_choice
    choice: ToolChoice | None = None
    if mode == ToolChoiceMode.None_:
        if not conv.tool_blocks:
            return None  # no tools: none can be called
        refuse(
            "tool_choice",
            "'none' with tool calls in the history (Converse has no 'none' choice and "
            "needs the tools to read the history)",
            omitted,
            drop,
        )
    elif mode == ToolChoiceMode.Auto:
        choice = AUTO
    elif mode == ToolChoiceMode.Required:
        choice = ANY
    elif mode == ToolChoiceMode.Function:
        choice = ToolChoice(tool=SpecificTool(req.tool_choice_name))
    if req.parallel_tool_calls is False:
        refuse("parallel_tool_calls", "Converse has no such switch", omitted, drop)
    tools = [
        ToolDef(
            tool_spec=ToolSpec(
                t.function.name,
                ToolInputSchema(t.function.parameters or _ANY_OBJECT),
                t.function.description or None,
                True if t.function.strict else None,
            )
        )
        for t in req.tools
    ]
    return ToolConfig(tools, choice)


def _output_config(req: Request, omitted: list[str], drop: bool) -> OutputConfig | None:
    if not req.response_format:
        return None
    try:
        rf = msgspec.json.decode(req.response_format, type=_ResponseFormat)
    except msgspec.DecodeError:
        raise Untranslatable("response_format: not a response format object") from None
    if rf.type == "text":
        return None
    if rf.type == "json_schema" and rf.json_schema is not None and rf.json_schema.schema:
        js = rf.json_schema
        schema = bytes(js.schema).decode()
        structure = OutputStructure(JsonSchema(schema, js.name, js.description))
        return OutputConfig(text_format=OutputFormat("json_schema", structure))
    refuse(
        "response_format",
        f"'{rf.type}' has no Converse form (only a json_schema)",
        omitted,
        drop,
    )
    return None


def _fits(text: str) -> bool:
    """Whether ``requestMetadata`` takes ``text`` (its keys and values
    repeat from request to request: each is matched once, and only what
    can fit, at most 256 characters, is remembered)."""
    return len(text) <= _METADATA_MAX and _matches(text)


@functools.lru_cache(maxsize=1024)
def _matches(text: str) -> bool:
    return _METADATA.fullmatch(text) is not None


def _metadata(req: Request, omitted: list[str], drop: bool) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for key, value in req.metadata.items():
        if key and _fits(key) and _fits(value):
            out[key] = value
        else:
            refuse(f"metadata.{key}"[:64], "a key or value Converse cannot take", omitted, drop)
    if req.user and "user" not in out:
        if _fits(req.user):
            out["user"] = req.user
        else:
            refuse("user", "characters Converse's requestMetadata cannot take", omitted, drop)
    return out or None


def _left_out(req: Request, omitted: list[str], drop: bool) -> None:
    """The schema's fields with no Converse field: refused (or named)."""
    why = "Converse has no such field"
    if req.seed is not None:
        refuse("seed", why, omitted, drop)
    if req.presence_penalty is not None:
        refuse("presence_penalty", why, omitted, drop)
    if req.frequency_penalty is not None:
        refuse("frequency_penalty", why, omitted, drop)
    if req.n > 1:
        refuse("n", "Converse writes one answer", omitted, drop)


def _messages_extras(req: Request, omitted: list[str], drop: bool) -> Extras | None:
    fields: Fields = read_extras(req.extras)
    if req.extras_dialect != _MESSAGES:
        report_all(fields, req.extras_dialect, omitted, drop)
        return None
    try:
        extras = read_messages_extras(fields, _OWN)
    except ExtrasError as exc:
        raise Untranslatable(str(exc)) from None
    omitted += extras.unknown
    return extras


def _place_marks(extras: Extras, conv: _Conversation, tools: ToolConfig | None) -> None:
    """Each ``$cache_control`` mark as a cache point after what it marks."""
    for mark in extras.marks:
        where = f"extras.$cache_control[{mark.at}][{mark.index}]"
        point = cache_point(mark.cache_control, where)
        if mark.at == "tools":
            if tools is None or not 0 <= mark.index < len(tools.tools):
                raise Untranslatable(f"{where}: marks no tool Converse is sent")
            tools.tools.insert(_after_tool(tools, mark.index), ToolDef(cache_point=point))
            continue
        made = conv.made.get(mark.index)
        if made is None:
            raise Untranslatable(f"{where}: marks no message Converse is sent")
        blocks, last = made
        at = next(k for k, b in enumerate(blocks) if b is last) + 1
        if blocks is conv.system:
            conv.system.insert(at, SystemBlock(cache_point=point))
        else:
            blocks.insert(at, ContentBlock(cache_point=point))  # type: ignore[arg-type]


def _after_tool(tools: ToolConfig, index: int) -> int:
    """Where a cache point after the ``index``-th function tool goes."""
    seen = -1
    for k, t in enumerate(tools.tools):
        if t.tool_spec is not None:
            seen += 1
            if seen == index:
                return k + 1
    return len(tools.tools)


def _apply(
    extras: Extras, omitted: list[str], drop: bool, additional: dict[str, msgspec.Raw]
) -> OutputConfig | None:
    """The Messages extras' fields Converse carries; the rest judged."""
    rest: Fields = {}
    config = None
    for name, raw in extras.fields:
        if name == "thinking":
            additional["thinking"] = msgspec.Raw(raw)
        elif name == "output_config":
            try:
                oc = msgspec.json.decode(raw, type=_OutputConfigExtra)
            except msgspec.DecodeError:
                raise Untranslatable("extras.output_config: not an object") from None
            members = set(msgspec.json.decode(raw, type=dict[str, msgspec.Raw]))
            for other in sorted(members - {"effort"}):
                unsupported(f"output_config.{other}", omitted, drop)
            if oc.effort:
                config = OutputConfig(effort=oc.effort)
        else:
            rest[name] = msgspec.Raw(raw)
    if extras.betas:
        additional["anthropic_beta"] = msgspec.Raw(_encode(list(dict.fromkeys(extras.betas))))
    if extras.tools:
        rest["tools"] = msgspec.Raw(b"[" + b",".join(bytes(t) for t in extras.tools) + b"]")
    for tool in extras.tool_fields:
        placed("tools", tool.fields, "", omitted, drop)
    for block in extras.blocks:
        placed("messages.content", block.fields, block.block, omitted, drop)
    if rest:
        report_all(rest, _MESSAGES, omitted, drop)
    return config


def encode_converse(
    req: Request, omitted: list[str], drop: bool, *, max_tokens_default: int | None
) -> bytes:
    """The Converse JSON body for ``req`` (see the module docstring);
    ``Untranslatable`` when it cannot be written. What is left out is
    appended to ``omitted``; ``drop``: leave out what would be refused."""
    _left_out(req, omitted, drop)
    if req.temperature is not None and req.temperature > 1:
        refuse("temperature", "Converse takes 0 to 1", omitted, drop)
        temperature = None
    else:
        temperature = req.temperature
    conv = _conversation(req, omitted, Parts(omitted, drop))
    tools = _tools(req, conv, omitted, drop)
    additional: dict[str, msgspec.Raw] = {}
    if req.top_k:
        additional["top_k"] = msgspec.Raw(str(req.top_k).encode())
    output = _output_config(req, omitted, drop)
    if req.extras:
        extras = _messages_extras(req, omitted, drop)
        if extras is not None:
            if extras.marks:
                _place_marks(extras, conv, tools)
            effort = _apply(extras, omitted, drop, additional)
            if effort is not None:
                if output is None:
                    output = effort
                else:
                    output.effort = effort.effort
    max_tokens = req.max_tokens or max_tokens_default
    top_p = _f32(req.top_p)
    inference = InferenceConfig(max_tokens or None, _f32(temperature), top_p, req.stop or None)
    body = ConverseRequest(
        messages=conv.messages,
        system=conv.system or None,
        inference_config=inference if inference != InferenceConfig() else None,
        tool_config=tools,
        request_metadata=_metadata(req, omitted, drop),
        output_config=output,
    )
    if additional:
        body.additional_model_request_fields = msgspec.Raw(_encode(additional))
    return _encode(body)
