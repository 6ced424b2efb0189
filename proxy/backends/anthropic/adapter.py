"""The ``anthropic`` backend: Anthropic's Messages API.

Request: ``POST {url}/messages`` with ``x-api-key`` and ``anthropic-version``;
``stream: true`` (``accept: text/event-stream``; the answer:
``anthropic_stream``) when the client streams, the backend's
``whole_answers`` is off or ``max_tokens`` is over ``LONGEST_WHOLE_TOKENS``
(ten minutes of output, past which Anthropic advises streaming), else ``stream: false`` (``accept:
application/json``; the answer, one ``message``: ``anthropic_whole``). The
conversation is mapped:

- the leading system and developer messages become top-level ``system`` text
  blocks, in order; a system message after the first other message does too,
  unless the request is of the Messages dialect and its client's
  ``anthropic-beta`` names a ``mid-conversation-system-...`` beta: then it is
  sent in place, as a ``{"role": "system"}`` message (as the client sent it);
- tool results become ``tool_result`` blocks (``is_error`` when the wire
  says the call failed), and every result answering one assistant turn goes
  into the one user message that follows it (results first, then any user
  text);
- assistant tool calls become ``tool_use`` blocks whose ``input`` is the parsed
  arguments (empty arguments are ``{}``; arguments that are not a JSON object
  cannot be sent and are refused with ``untranslatable_request``);
- consecutive messages of one role are merged (the API requires turns to
  alternate); no empty text block is sent, and a message left with no blocks
  is dropped;
- tools: ``name``, ``description``, ``input_schema`` (the parameters as
  sent), ``strict`` when true;
- ``tool_choice``: auto, none, required -> ``any``, a named function ->
  ``tool``; sent only when tools exist; ``parallel_tool_calls = false`` ->
  ``disable_parallel_tool_use``;
- an assistant turn's reasoning parts of the Messages dialect go first in
  its content: ``thinking`` blocks with their ``signature`` (the part's
  opaque bytes), or ``redacted_thinking`` blocks with their ``data``;
  reasoning of another dialect (an OpenAI encrypted item) cannot be read by
  Anthropic and is left out;
- a message's content parts (images, documents, files, text among them)
  are content blocks in order (``parts``: ``image`` and ``document`` blocks
  with ``base64``, ``url``, ``file``, ``text`` and ``content`` sources, a
  part's Messages extras merged into its block), a user's as its content, a
  tool result's as the ``tool_result``'s content; the Files API beta is
  added to ``anthropic-beta`` when a file source is written; a system or
  assistant message takes its text parts only; what Anthropic cannot take
  (audio, another provider's file id) is refused naming the part unless
  ``drop_unsupported``;
- ``stop`` -> ``stop_sequences``; ``max_tokens`` (the backend's
  ``default_max_tokens`` when the request has none: Anthropic requires it);
  ``temperature``, ``top_p``, ``top_k``; ``user`` -> ``metadata.user_id``.
- Left out: seed, presence/frequency penalties, n, response_format, metadata.

The body is written with the one model of the Messages API
(``apis.anthropic_messages``: the Structs the edge decodes a client's
request with, ``omit_defaults`` on the ones it writes). Its key order is the
model's (``model``, ``messages``, ``system``, ``tools``, ``tool_choice``,
``max_tokens``, ...), then the merged fields below.

The client's extras (``backends.extras``), when they are of the Messages
dialect (read by ``extras.read_extras``, the module that spells them):
flatgate's own keys (``$``) are applied, never sent as fields:

- ``$headers``: the client's ``anthropic-beta`` goes out as that header,
  after the backend's configured one (comma-joined, each beta once); no other
  header is taken;
- ``$cache_control``: each ``{"at", "index", "cache_control"}`` puts its
  ``cache_control`` object (``ttl`` and all, as sent) on the last content
  block built from wire message ``index`` (``at`` ``system`` or
  ``messages``: the wire's messages, system ones included), or on tool
  ``index`` (``at`` ``tools``);
- ``$tools`` and ``$blocks``: a tool's and a content block's own fields
  (``defer_loading``, a text's ``citations``, ...) spliced into that tool or
  block as the client wrote them (``placing.place``);

every other key is merged at the top level (``thinking``, ``output_config``,
``context_management``, ``service_tier``, ``container``, ``mcp_servers``:
as sent), never over ``model``, ``messages``, ``stream`` or ``max_tokens``;
the client's ``tools`` (server tools, as sent) follow the function tools.
Extras of another dialect: no field of theirs maps to the Messages API (not
even ``reasoning.effort``: a thinking budget is not an effort), so each is
named and, unless mapped to nothing on purpose, refused unless the backend
sets ``drop_unsupported`` (``extras.report_all``); hosted tools are left out.

What is left out is named in ``Outbound.omitted``.

Embeddings: none (Anthropic's API has no such endpoint): ``embeddings`` is
false, and ``prepare_embeddings`` raises ``Untranslatable`` saying so. No I/O.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import msgspec

from flatgate.proxy.apis.anthropic_messages.blocks import (
    AnyChoice,
    AutoChoice,
    Block,
    Choice,
    Message,
    MessageRole,
    Metadata,
    NoneChoice,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
)
from flatgate.proxy.apis.anthropic_messages.extras import Extras, ExtrasError, split_betas
from flatgate.proxy.apis.anthropic_messages.extras import read_extras as read_messages_extras
from flatgate.proxy.apis.anthropic_messages.request import MessagesRequest
from flatgate.proxy.backends.anthropic.config import AnthropicConfig
from flatgate.proxy.backends.anthropic.parts import part_blocks, text_of
from flatgate.proxy.backends.anthropic.placing import Made, mark, place
from flatgate.proxy.backends.anthropic.stream import STOP_REASONS, AnthropicStream
from flatgate.proxy.backends.anthropic.whole import AnthropicWhole
from flatgate.proxy.backends.base import Inbound, Outbound, Probe, Translator, Untranslatable
from flatgate.proxy.backends.extras import Fields, read_extras, report_all, splice
from flatgate.proxy.backends.json_api import JsonAdapter, object_arguments
from flatgate.proxy.wire.embeddings import EmbeddingInput
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import BETA_HEADER, JSON, SSE, ApiDialect, ToolChoiceMode

__all__ = [
    "LONGEST_WHOLE_TOKENS",
    "NO_EMBEDDINGS",
    "STOP_REASONS",
    "AnthropicAdapter",
    "AnthropicStream",
    "AnthropicWhole",
    "encode_request",
]

# Why an embeddings request is refused here.
NO_EMBEDDINGS = "the anthropic protocol has no embeddings API"


# The body's fields the adapter writes (a client's own value of one, in the
# extras, wins: the adapter's is then left out).
_WRITES = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "stream",
        "system",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "tools",
        "tool_choice",
        "metadata",
    }
)
_ANY_OBJECT = msgspec.Raw(b'{"type":"object"}')
_encode = msgspec.json.Encoder().encode
_DIALECT = int(ApiDialect.ANTHROPIC_MESSAGES)
# Never taken from Messages extras: the adapter's own (and max_tokens, which
# the body must have, a slot of the schema).
_OWN = frozenset({"model", "messages", "stream", "max_tokens"})


def _read(req: Request, omitted: list[str], drop: bool) -> Extras | None:
    """The request's Messages extras (``None``: of another dialect, each of
    its fields named or refused: ``report_all``)."""
    fields: Fields = read_extras(req.extras)
    if req.extras_dialect != _DIALECT:
        report_all(fields, req.extras_dialect, omitted, drop)
        return None
    try:
        out = read_messages_extras(fields, _OWN)
    except ExtrasError as exc:
        raise Untranslatable(str(exc)) from None
    omitted += out.unknown  # a newer edge's keys: named, not guessed at
    return out


def _opaque(part: ReasoningPart, where: str) -> str:
    try:
        return part.opaque.decode()
    except UnicodeDecodeError:
        raise Untranslatable(f"{where}: a reasoning signature that is not UTF-8") from None


def _thinking(parts: list[ReasoningPart], where: str, omitted: list[str]) -> list[Block | None]:
    """An assistant turn's reasoning as the blocks that open its content, by
    part (``None``: a part left out)."""
    blocks: list[Block | None] = []
    for j, part in enumerate(parts):
        if part.dialect != _DIALECT or not part.opaque:
            omitted.append("reasoning")
            blocks.append(None)
        elif part.redacted:
            blocks.append(RedactedThinkingBlock(_opaque(part, f"{where}.reasoning[{j}]")))
        else:
            blocks.append(ThinkingBlock(part.text, _opaque(part, f"{where}.reasoning[{j}]")))
    return blocks


def _messages(
    req: Request,
    omitted: list[str],
    in_place: bool,
    made: list[Made] | None,
    *,
    betas: list[str],
    drop: bool,
) -> tuple[list[TextBlock], list[Message]]:
    """The top-level system blocks and the messages; with ``made``, the
    blocks built from each wire message (``Made``); a message's content
    parts are ``parts``'s (``betas``: the betas they need)."""
    system: list[TextBlock] = []
    out: list[Message] = []
    begun = False  # whether a message other than a system one has come

    def add(role: MessageRole, blocks: list[Block]) -> None:
        if not blocks:
            return
        if out and out[-1].role == role:
            content = out[-1].content
            assert not isinstance(content, str)  # the adapter's are lists
            content.extend(blocks)
            if role == "user" and isinstance(blocks[0], ToolResultBlock):
                # The API wants a turn's tool results before any text in it.
                content.sort(key=lambda block: not isinstance(block, ToolResultBlock))
        else:
            out.append(Message(role, [*blocks]))  # a copy: not ``made``'s list

    for i, m in enumerate(req.messages):
        role = m.role
        blocks: list[Block] = []
        thinking: list[Block | None] = []
        content = m.content
        parts = m.parts
        if m.name:
            omitted.append("name")  # the Messages API has no participant names
        if parts and role not in ("tool", "user"):
            content = text_of(parts, f"messages[{i}]", omitted, drop)
            parts = None
        if role in ("system", "developer"):
            if content:
                text = TextBlock(content)
                blocks.append(text)
                if in_place and begun:
                    add("system", blocks)
                else:
                    system.append(text)
        elif role == "tool":
            begun = True
            # Left out when empty or false (as the API's defaults).
            inner: str | list[Block] | None = m.content or None
            if parts:
                at = f"messages[{i}]"
                inner = part_blocks(parts, at, omitted=omitted, betas=betas, drop=drop) or None
            blocks.append(
                ToolResultBlock(m.tool_call_id, inner, True if m.is_error else None)  # type: ignore[arg-type]
            )
            add("user", blocks)
        elif role == "assistant":
            begun = True
            where = f"messages[{i}]"
            if m.reasoning:
                thinking = _thinking(m.reasoning, where, omitted)
                blocks = [b for b in thinking if b is not None]
            if content:
                blocks.append(TextBlock(content))
            for call in m.tool_calls or ():
                fn = call.function
                blocks.append(ToolUseBlock(call.id, fn.name, object_arguments(fn.arguments, where)))
            add("assistant", blocks)
        else:
            begun = True
            if parts:
                at = f"messages[{i}]"
                blocks = part_blocks(parts, at, omitted=omitted, betas=betas, drop=drop)
                add("user", blocks)
            elif content:
                blocks.append(TextBlock(content))
                add("user", blocks)
        if made is not None:
            made.append((blocks, thinking))
    return system, out


def _left_out(req: Request, omitted: list[str]) -> None:
    """The schema's fields the Messages API has no place for, named (one
    test each, no table built per request: this runs on every one)."""
    if req.seed is not None:
        omitted.append("seed")
    if req.presence_penalty is not None:
        omitted.append("presence_penalty")
    if req.frequency_penalty is not None:
        omitted.append("frequency_penalty")
    if req.n > 1:
        omitted.append("n")
    if req.response_format:
        omitted.append("response_format")
    if req.metadata:
        omitted.append("metadata")


def _tool_choice(req: Request) -> Choice | None:
    """The tool choice (with tools only): auto, none, required -> any, a
    named function -> tool; ``parallel_tool_calls = false`` ->
    ``disable_parallel_tool_use`` (on auto when no choice is given)."""
    single = True if req.parallel_tool_calls is False else None
    mode = req.tool_choice
    if mode == ToolChoiceMode.Auto:
        return AutoChoice(single)
    if mode == ToolChoiceMode.None_:
        return NoneChoice()
    if mode == ToolChoiceMode.Required:
        return AnyChoice(single)
    if mode == ToolChoiceMode.Function:
        return ToolChoice(req.tool_choice_name, single)
    return AutoChoice(True) if single else None


def encode_request(
    req: Request,
    *,
    model: str,
    default_max_tokens: int = 4096,
    omitted: list[str] | None = None,
    betas: list[str] | None = None,
    drop_unsupported: bool = False,
    whole: bool = False,
    stream_field: bool = True,
) -> bytes:
    """The Messages API JSON body for ``req``; ``Untranslatable`` if it cannot
    be. What it leaves out is appended to ``omitted``, the client's betas (for
    the ``anthropic-beta`` header) to ``betas``. A field of another dialect's
    extras with no mapping is refused unless ``drop_unsupported``. ``whole``:
    the answer is asked for whole (``stream: false``), else streamed;
    ``stream_field`` false: no ``stream`` at all (Bedrock's InvokeModel, whose
    operation says it)."""
    if omitted is None:
        omitted = []
    _left_out(req, omitted)
    extras = _read(req, omitted, drop_unsupported) if req.extras else None
    placing = extras is not None and bool(extras.marks or extras.blocks)
    made: list[Made] | None = [] if placing else None
    in_place = extras is not None and extras.mid_system
    found: list[str] = []  # the betas the content parts need
    system, messages = _messages(req, omitted, in_place, made, betas=found, drop=drop_unsupported)
    tools: list[ToolDef] | None = None
    choice = None
    if req.tools:
        tools = [
            ToolDef(
                t.function.name,
                t.function.description or None,
                t.function.parameters or _ANY_OBJECT,
                None,
                True if t.function.strict else None,
            )
            for t in req.tools
        ]
        choice = _tool_choice(req)
    merged: list[tuple[str, bytes]] = []
    if extras is not None:
        if extras.tools:
            # The client's own (server tools, as sent), written as they are.
            tools = [*(tools or ()), *extras.tools]  # type: ignore[list-item]
        if made is not None:
            mark(extras.marks, made, tools)
        if made is not None or extras.tool_fields:
            place(
                extras.tool_fields,
                extras.blocks,
                made=made or [],
                contents=[system, *(m.content for m in messages if isinstance(m.content, list))],
                tools=tools,
                omitted=omitted,
            )
        if betas is not None:
            betas += extras.betas
        merged = extras.fields
    if betas is not None:
        betas += found
    out = MessagesRequest(
        model=model,
        messages=messages,
        system=system or None,
        tools=tools,
        tool_choice=choice,
        max_tokens=req.max_tokens or default_max_tokens,
        stop_sequences=req.stop or None,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k or None,
        metadata=Metadata(req.user) if req.user else None,
        stream=(not whole) if stream_field else None,
    )
    for name, _ in merged:
        if name in _WRITES:  # the client's own value wins
            setattr(out, name, None)
    return splice(_encode(out), merged)


# The largest max_tokens asked for whole: what Anthropic's SDKs reckon ten
# minutes of output (128,000 tokens an hour); a larger one is streamed.
LONGEST_WHOLE_TOKENS = 21_333


class AnthropicAdapter(JsonAdapter):
    protocol = "anthropic"
    path = "/messages"
    # Anthropic's API has no embeddings endpoint.
    embeddings = False

    def __init__(self, config: AnthropicConfig) -> None:
        super().__init__(config)
        parts = urlsplit(config.url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._default_max = config.default_max_tokens
        self._version = [("anthropic-version", config.anthropic_version)]
        # The configured anthropic-beta (the client's are added after it).
        self._betas: list[str] = []
        for name, value in config.headers.items():
            if name.lower() == BETA_HEADER:
                self._betas += split_betas(value)
        self._static = [(k, v) for k, v in self.extra if k.lower() != BETA_HEADER]

    def credential(self, key: str) -> list[tuple[str, str]]:
        return [("x-api-key", key)]

    def fixed(self) -> list[tuple[str, str]]:
        return self._version

    # JsonAdapter's prepare with no ``encode``: the encoder also gathers the
    # anthropic-beta values that go in the headers.
    def prepare(self, call: Inbound[Request]) -> Outbound:
        req = call.request()
        omitted: list[str] = []
        betas = list(self._betas)
        whole = self.whole_for(req)
        payload = encode_request(
            req,
            model=self.model or req.model_name,
            default_max_tokens=self._default_max,
            omitted=omitted,
            betas=betas,
            drop_unsupported=self._drop,
            whole=whole,
        )
        accept = JSON if whole else SSE
        headers = [("content-type", JSON), ("accept", accept), ("x-request-id", call.request_id)]
        headers += self._version
        headers += self.auth
        if self.forward and call.authorization:
            headers.append(("authorization", call.authorization))
        headers += self._static
        if betas:
            headers.append((BETA_HEADER, ",".join(dict.fromkeys(betas))))
        return Outbound(self.url, headers, payload, tuple(dict.fromkeys(omitted)), whole)

    def prepare_embeddings(self, call: Inbound[EmbeddingInput]) -> Outbound:
        raise Untranslatable(NO_EMBEDDINGS)

    def embeddings_answer(
        self, body: bytes, request_id: str, model: str, max_bytes: int | None = None
    ) -> bytes:
        raise ValueError(NO_EMBEDDINGS)

    def whole_for(self, req: Request) -> bool:
        """As every JSON backend's, but never for an answer that may run past
        ten minutes: Anthropic advises streaming those (its SDKs refuse them
        whole, reckoning 128,000 output tokens an hour)."""
        budget = req.max_tokens or self._default_max
        return budget <= LONGEST_WHOLE_TOKENS and super().whole_for(req)

    def translator(self, request_id: str, model: str, whole: bool = False) -> Translator:
        if whole:
            return AnthropicWhole(request_id, self.model or model)
        return AnthropicStream(request_id, self.model or model)

    def probe(self) -> Probe:
        if self.health:
            return super().probe()
        return Probe(self._origin, [], connect_only=True)
