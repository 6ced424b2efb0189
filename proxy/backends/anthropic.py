"""The ``anthropic`` backend: Anthropic's Messages API.

Request: ``POST {url}/messages`` with ``x-api-key``, ``anthropic-version`` and
``stream: true``. The conversation is mapped:

- system and developer messages become top-level ``system`` text blocks, in order;
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
- ``tool_choice``: auto, none, required -> ``any``, a named function ->
  ``tool``; sent only when tools exist; ``parallel_tool_calls = false`` ->
  ``disable_parallel_tool_use``;
- an assistant turn's reasoning parts of the Messages dialect go first in
  its content: ``thinking`` blocks with their ``signature`` (the part's
  opaque bytes), or ``redacted_thinking`` blocks with their ``data``;
  reasoning of another dialect (an OpenAI encrypted item) cannot be read by
  Anthropic and is left out;
- ``stop`` -> ``stop_sequences``; ``max_tokens`` (the backend's
  ``default_max_tokens`` when the request has none: Anthropic requires it);
  ``temperature``, ``top_p``, ``top_k``; ``user`` -> ``metadata.user_id``.
- Left out: seed, presence/frequency penalties, n, response_format, metadata.
- The client's extras (``backends.extras``): Messages ones are merged at the
  top level (never over ``model``, ``messages`` or ``stream``); no other
  dialect's field maps to the Messages API (not even ``reasoning.effort``:
  a thinking budget is not an effort), so they are left out, hosted tools
  included.

What is left out is named in ``Outbound.omitted``.

Stream (``event:`` + ``data:``), into chunk frames:

- ``message_start``: the model and input usage (prompt tokens = input + cache
  reads + cache writes; cached tokens = cache reads);
- ``content_block_start``/``delta``/``stop``: ``text_delta`` -> content,
  ``thinking_delta`` -> reasoning, a ``tool_use`` block -> a tool call whose
  ``input_json_delta`` fragments are its arguments (tool-call indices count
  tool blocks only, not Anthropic's block index; a call with no arguments gets
  ``"{}"``); other block types (signatures, server tools) are skipped;
- ``message_delta``: the stop reason (and the stop sequence that matched,
  which the final chunk carries) and usage, both cumulative;
- ``message_stop`` ends the stream with the final chunk; ``ping``, once the
  first token has gone out, becomes an empty chunk (a heartbeat the edge
  relays as its own keep-alive), and is ignored before; unknown events are
  ignored; an ``error`` event (``overloaded_error`` after a 200)
  becomes an error chunk, as does a body that ends before a stop reason.

Stop reasons: end_turn, stop_sequence, pause_turn -> STOP (a paused turn has
ended; the caller continues it by sending the conversation back);
max_tokens, model_context_window_exceeded -> LENGTH; tool_use -> TOOL_CALLS;
refusal -> CONTENT_FILTER; anything else -> STOP.

No I/O.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import msgspec

from flatgate.proxy.backends.base import (
    Probe,
    Untranslatable,
)
from flatgate.proxy.backends.extras import read_extras, report_all, splice
from flatgate.proxy.backends.json_api import EventStream, JsonAdapter, usage
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.chunk.frames import ToolCallDelta
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import ApiDialect, FinishReason, ToolChoiceMode

__all__ = ["STOP_REASONS", "AnthropicAdapter", "AnthropicStream", "encode_request"]

STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "pause_turn": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}

# -- the request ---------------------------------------------------------------


class _Text(msgspec.Struct, tag="text", tag_field="type", gc=False):
    text: str


class _ToolUse(msgspec.Struct, tag="tool_use", tag_field="type", gc=False):
    id: str
    name: str
    input: msgspec.Raw


class _ToolResult(msgspec.Struct, tag="tool_result", tag_field="type", omit_defaults=True):
    tool_use_id: str
    content: str = ""
    is_error: bool = False


class _Thinking(msgspec.Struct, tag="thinking", tag_field="type", gc=False):
    thinking: str
    signature: str


class _RedactedThinking(msgspec.Struct, tag="redacted_thinking", tag_field="type", gc=False):
    data: str


_Block = _Text | _ToolUse | _ToolResult | _Thinking | _RedactedThinking


class _Message(msgspec.Struct, gc=False):
    role: str
    content: list[_Block]


class _Tool(msgspec.Struct, omit_defaults=True, gc=False):
    name: str
    input_schema: msgspec.Raw
    description: str = ""


class _ToolChoice(msgspec.Struct, omit_defaults=True, gc=False):
    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class _Metadata(msgspec.Struct, gc=False):
    user_id: str


class _MessagesRequest(msgspec.Struct, omit_defaults=True, gc=False):
    model: str
    max_tokens: int
    messages: list[_Message]
    # Required: omit_defaults would drop it if it had a default.
    stream: bool
    system: list[_Text] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    tools: list[_Tool] | None = None
    tool_choice: _ToolChoice | None = None
    metadata: _Metadata | None = None


_FIELDS = frozenset(_MessagesRequest.__struct_fields__)


_EMPTY_OBJECT = msgspec.Raw(b"{}")
_ANY_OBJECT = msgspec.Raw(b'{"type":"object"}')
_CHOICE_TYPES: dict[int, str] = {
    ToolChoiceMode.Auto: "auto",
    ToolChoiceMode.None_: "none",
    ToolChoiceMode.Required: "any",
    ToolChoiceMode.Function: "tool",
}
_encode = msgspec.json.Encoder().encode
_decode_any = msgspec.json.decode
_DIALECT = int(ApiDialect.ANTHROPIC_MESSAGES)
# Never taken from Messages extras: the adapter's own (and max_tokens, which
# the body must have, a slot of the schema).
_OWN = frozenset({"model", "messages", "stream", "max_tokens"})


def _arguments(text: str, where: str) -> msgspec.Raw:
    if not text.strip():
        return _EMPTY_OBJECT
    data = text.encode()
    try:
        value = _decode_any(data)
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        raise Untranslatable(f"{where}: tool-call arguments are not a JSON object")
    return msgspec.Raw(data)


def _opaque(part: ReasoningPart, where: str) -> str:
    try:
        return part.opaque.decode()
    except UnicodeDecodeError:
        raise Untranslatable(f"{where}: a reasoning signature that is not UTF-8") from None


def _thinking(parts: list[ReasoningPart], where: str, omitted: list[str]) -> list[_Block]:
    """An assistant turn's reasoning as the blocks that open its content."""
    blocks: list[_Block] = []
    for j, part in enumerate(parts):
        if part.dialect != _DIALECT or not part.opaque:
            omitted.append("reasoning")
        elif part.redacted:
            blocks.append(_RedactedThinking(_opaque(part, f"{where}.reasoning[{j}]")))
        else:
            blocks.append(_Thinking(part.text, _opaque(part, f"{where}.reasoning[{j}]")))
    return blocks


def _messages(req: Request, omitted: list[str]) -> tuple[list[_Text], list[_Message]]:
    system: list[_Text] = []
    out: list[_Message] = []

    def add(role: str, blocks: list[_Block]) -> None:
        if not blocks:
            return
        if out and out[-1].role == role:
            content = out[-1].content
            content.extend(blocks)
            if role == "user" and isinstance(blocks[0], _ToolResult):
                # The API wants a turn's tool results before any text in it.
                content.sort(key=lambda block: not isinstance(block, _ToolResult))
        else:
            out.append(_Message(role, blocks))

    for i, m in enumerate(req.messages):
        role = m.role
        if role in ("system", "developer"):
            if m.content:
                system.append(_Text(m.content))
        elif role == "tool":
            add("user", [_ToolResult(m.tool_call_id, m.content or "", m.is_error)])
        elif role == "assistant":
            where = f"messages[{i}]"
            blocks: list[_Block] = _thinking(m.reasoning, where, omitted) if m.reasoning else []
            if m.content:
                blocks.append(_Text(m.content))
            for call in m.tool_calls or ():
                fn = call.function
                blocks.append(_ToolUse(call.id, fn.name, _arguments(fn.arguments, where)))
            add("assistant", blocks)
        elif m.content:
            add("user", [_Text(m.content)])
    return system, out


def _left_out(req: Request, omitted: list[str]) -> None:
    for name, given in (
        ("seed", req.seed is not None),
        ("presence_penalty", req.presence_penalty is not None),
        ("frequency_penalty", req.frequency_penalty is not None),
        ("n", req.n > 1),
        ("response_format", bool(req.response_format)),
        ("metadata", bool(req.metadata)),
    ):
        if given:
            omitted.append(name)


def _extras(req: Request, omitted: list[str]) -> list[tuple[str, bytes]]:
    fields = read_extras(req.extras)
    if req.extras_dialect == _DIALECT:
        return [(k, bytes(v)) for k, v in fields.items() if k not in _OWN]
    report_all(fields, req.extras_dialect, omitted)
    return []


def encode_request(
    req: Request,
    *,
    model: str,
    default_max_tokens: int = 4096,
    omitted: list[str] | None = None,
) -> bytes:
    """The Messages API JSON body for ``req``; ``Untranslatable`` if it cannot
    be. What it leaves out is appended to ``omitted``."""
    if omitted is None:
        omitted = []
    _left_out(req, omitted)
    system, messages = _messages(req, omitted)
    tools = None
    choice = None
    if req.tools:
        tools = [
            _Tool(t.function.name, t.function.parameters or _ANY_OBJECT, t.function.description)
            for t in req.tools
        ]
        kind = _CHOICE_TYPES.get(req.tool_choice)
        single = True if req.parallel_tool_calls is False else None
        if kind is not None:
            name = req.tool_choice_name if kind == "tool" else None
            choice = _ToolChoice(kind, name, single if kind != "none" else None)
        elif single:
            choice = _ToolChoice("auto", None, True)
    out = _MessagesRequest(
        model=model,
        max_tokens=req.max_tokens or default_max_tokens,
        messages=messages,
        stream=True,
        system=system or None,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k or None,
        stop_sequences=req.stop or None,
        tools=tools,
        tool_choice=choice,
        metadata=_Metadata(req.user) if req.user else None,
    )
    extra = _extras(req, omitted) if req.extras else []
    for name, _ in extra:
        if name in _FIELDS:  # the client's own value wins
            setattr(out, name, None)
    return splice(_encode(out), extra)


# -- the stream ----------------------------------------------------------------


class _Usage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


class _MessageHead(msgspec.Struct, gc=False):
    model: str | None = None
    usage: _Usage | None = None


class _BlockHead(msgspec.Struct, gc=False):
    type: str = ""
    id: str | None = None
    name: str | None = None
    text: str | None = None
    thinking: str | None = None


class _Delta(msgspec.Struct, gc=False):
    type: str = ""
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None


class _Error(msgspec.Struct, gc=False):
    type: str | None = None
    message: str | None = None


class _Event(msgspec.Struct, gc=False):
    type: str = ""
    index: int = 0
    message: _MessageHead | None = None
    content_block: _BlockHead | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _Error | None = None


_decode_event = msgspec.json.Decoder(_Event).decode
_TEXT, _THINKING, _TOOL, _SKIP = 0, 1, 2, 3


class AnthropicStream(EventStream):
    """One Messages stream into chunk frames (see the module docstring)."""

    __slots__ = (
        "_blocks",
        "_cache_read",
        "_cache_write",
        "_finish",
        "_input",
        "_model",
        "_output",
        "_spoke",
        "_stop_sequence",
        "_tools",
        "_writer",
    )

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id)
        self._model = model
        self._writer: ChunkWriter | None = None
        # Anthropic's block index -> (kind, our tool-call index, arguments seen)
        self._blocks: dict[int, list[int]] = {}
        self._tools = 0
        self._finish = FinishReason.NONE
        self._stop_sequence = ""
        # Whether a frame with something in it has gone out (pings before it
        # are not relayed).
        self._spoke = False
        # Usage, each count as last reported (message_delta's are cumulative).
        self._input: int | None = None
        self._cache_read: int | None = None
        self._cache_write: int | None = None
        self._output: int | None = None

    def _out(self) -> ChunkWriter:
        w = self._writer
        if w is None:
            w = self._writer = ChunkWriter(self._request_id, self._model)
        return w

    def _ended(self) -> bytes:
        if self._finish:
            return self._final()  # the stop reason came; only message_stop is missing
        return super()._ended()

    def _usage(self, u: _Usage) -> None:
        if u.input_tokens is not None:
            self._input = u.input_tokens
        if u.cache_read_input_tokens is not None:
            self._cache_read = u.cache_read_input_tokens
        if u.cache_creation_input_tokens is not None:
            self._cache_write = u.cache_creation_input_tokens
        if u.output_tokens is not None:
            self._output = u.output_tokens

    def _event(self, name: bytes, data: bytes) -> bytes:
        ev = _decode_event(data)
        kind = ev.type
        if kind == "content_block_delta":
            out = self._delta(ev)
            self._spoke = self._spoke or bool(out)
            return out
        if kind == "content_block_start":
            out = self._start(ev)
            self._spoke = self._spoke or bool(out)
            return out
        if kind == "content_block_stop":
            block = self._blocks.get(ev.index)
            if block is not None and block[0] == _TOOL and not block[2]:
                return self._out().arguments(block[1], "{}")
            return b""
        if kind == "message_start":
            if ev.message is not None:
                if ev.message.model:
                    self._model = ev.message.model
                if ev.message.usage is not None:
                    self._usage(ev.message.usage)
            return b""
        if kind == "message_delta":
            if ev.delta is not None and ev.delta.stop_reason:
                self._finish = STOP_REASONS.get(ev.delta.stop_reason, FinishReason.STOP)
                if self._finish is FinishReason.STOP and ev.delta.stop_sequence:
                    self._stop_sequence = ev.delta.stop_sequence
            if ev.usage is not None:
                self._usage(ev.usage)
            return b""
        if kind == "message_stop":
            if not self._finish:
                return self._fail(codes.BACKEND_STREAM_TRUNCATED, "message ended without a stop")
            return self._final()
        if kind == "error":
            err = ev.error or _Error()
            message = f"{err.type or 'error'}: {err.message or 'the backend failed'}"
            return self._fail(codes.BACKEND_STREAM_ERROR, message)
        if kind == "ping" and self._spoke:
            # A heartbeat: an empty chunk, so that the edge, which times the
            # gaps between the proxy's bytes, hears that the backend is alive
            # through a long silence (a tool's input being generated). Not
            # before the first token: the answer has not begun (an error may
            # still be an HTTP status, and the first-byte timeout applies).
            return self._out().chunk()
        return b""  # events this flatgate does not know

    def _start(self, ev: _Event) -> bytes:
        block = ev.content_block
        if block is None:
            return b""
        w = self._out()
        if block.type == "text":
            self._blocks[ev.index] = [_TEXT, 0, 0]
            return w.content(block.text) if block.text else b""
        if block.type == "thinking":
            self._blocks[ev.index] = [_THINKING, 0, 0]
            return w.reasoning(block.thinking) if block.thinking else b""
        if block.type == "tool_use":
            ours = self._tools
            self._tools += 1
            self._blocks[ev.index] = [_TOOL, ours, 0]
            delta = ToolCallDelta(ours, block.id or "", block.name or "")
            return w.chunk(tool_calls=(delta,))
        self._blocks[ev.index] = [_SKIP, 0, 0]
        return b""

    def _delta(self, ev: _Event) -> bytes:
        d = ev.delta
        if d is None:
            return b""
        if d.type == "text_delta":
            return self._out().content(d.text) if d.text else b""
        if d.type == "input_json_delta":
            block = self._blocks.get(ev.index)
            if block is None or block[0] != _TOOL or not d.partial_json:
                return b""
            block[2] = 1
            return self._out().arguments(block[1], d.partial_json)
        if d.type == "thinking_delta":
            return self._out().reasoning(d.thinking) if d.thinking else b""
        return b""  # signature_delta, citations_delta, ...

    def _final(self) -> bytes:
        self.done = True
        counts = (self._input, self._cache_read, self._cache_write, self._output)
        report = None
        if any(c is not None for c in counts):
            cached = self._cache_read or 0
            prompt = (self._input or 0) + cached + (self._cache_write or 0)
            report = usage(prompt, self._output, cached, 0)
        return self._out().chunk(
            finish_reason=self._finish, usage=report, stop_sequence=self._stop_sequence
        )


class AnthropicAdapter(JsonAdapter):
    protocol = "anthropic"
    path = "/messages"

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        parts = urlsplit(config.url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._default_max = config.default_max_tokens
        self._version = [("anthropic-version", config.anthropic_version)]

    def credential(self, key: str) -> list[tuple[str, str]]:
        return [("x-api-key", key)]

    def fixed(self) -> list[tuple[str, str]]:
        return self._version

    def encode(self, req: Request, model: str, omitted: list[str]) -> bytes:
        return encode_request(
            req, model=model, default_max_tokens=self._default_max, omitted=omitted
        )

    def translator(self, request_id: str, model: str) -> AnthropicStream:
        return AnthropicStream(request_id, self.model or model)

    def probe(self) -> Probe:
        if self.health:
            return super().probe()
        return Probe(self._origin, [], connect_only=True)
