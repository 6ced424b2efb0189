"""Chunk frames -> Anthropic Messages JSON: the streamed events and the
aggregated non-streaming ``message``.

Owns the response side of the Messages API as the official SDKs read it:

- ``EventRenderer.feed(chunk)`` returns the SSE bytes one decoded ``Chunk``
  becomes. Every event is an ``event:`` line and a ``data`` object whose
  ``type`` matches, in exactly this order: ``message_start`` (``usage``: the
  input tokens when the first chunk already carries them, else the
  request's estimate the endpoint gives); then for
  each content block, indices 0, 1, 2, ...: ``content_block_start``, its
  deltas, ``content_block_stop``, one block at a time (reasoning is a
  ``thinking`` block with ``thinking_delta``s, text a ``text`` block with
  ``text_delta``s, a tool call a ``tool_use`` block with
  ``input_json_delta``s; a block is closed before the next one opens; a
  chunk's ``reasoning_part`` ends the thinking block with a
  ``signature_delta``, or is a whole ``redacted_thinking`` block); then
  ``message_delta`` (``stop_reason``, ``stop_sequence``, and the final
  ``usage``: ``input_tokens``, cumulative ``output_tokens``,
  ``cache_creation_input_tokens`` and ``cache_read_input_tokens`` when some
  were written or read) and ``message_stop``. A signature is the part's
  ``opaque`` when its dialect is Anthropic's, else empty.
- ``MessageAggregator`` folds every chunk of a non-streaming answer into one
  ``message`` (``id``, ``type``, ``role``, ``content`` blocks in the order
  they began, ``model``, ``stop_reason``, ``stop_sequence``, ``usage``).
- An error chunk raises the ``FlatgateError`` it carries (``errors.chunk_error``):
  the caller ends the stream with ``errors.error_event``.

Stop reasons: Stop -> ``end_turn``, or ``stop_sequence`` when the final chunk
names the sequence that matched; Length -> ``max_tokens``; ToolCalls ->
``tool_use``; ContentFilter -> ``refusal``. Usage: the wire's prompt tokens
include the cached ones and those written to the cache, Anthropic's
``input_tokens`` do not. The Messages API
requires the counts: a backend that reported none gives 0 (and the app counts
it in ``flatgate_edge_usage_unknown_total``).

The ``message``, its content blocks and every ``usage`` are the Messages
API's own Structs (``events.Answer``, ``events.ContentBlock``,
``events.Usage``: the ones the ``anthropic`` backend decodes its server's
answer with); the events around them are byte templates of the same JSON. A
text delta inside an open text block (the per-token path) is a pre-encoded
head, the msgspec-encoded text and a fixed tail, written with
``Encoder.encode_into`` into one reused ``bytearray``. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.edge_translator.anthropic.errors import error_event
from flatgate.edge_translator.errors import ProxyFailed, chunk_error
from flatgate.edge_translator.openai.render import Streamed
from flatgate.proxy.apis.anthropic_messages.events import STOP_REASON_OF, Answer, ContentBlock
from flatgate.proxy.apis.anthropic_messages.events import Usage as AnswerUsage
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = ["PING", "EventRenderer", "MessageAggregator", "stop_reason_name"]

PING = b'event: ping\ndata: {"type":"ping"}\n\n'

_ERROR = FinishReason.ERROR
_ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)

_encoder = msgspec.json.Encoder()
_encode = _encoder.encode
_encode_into = _encoder.encode_into

# Block kinds.
_TEXT, _THINKING, _TOOL, _REDACTED = 1, 2, 3, 4
_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_DELTA_KIND = {
    _TEXT: b',"delta":{"type":"text_delta","text":',
    _THINKING: b',"delta":{"type":"thinking_delta","thinking":',
    _TOOL: b',"delta":{"type":"input_json_delta","partial_json":',
}
_DELTA_END = b"}}\n\n"
_START_HEAD = b'event: content_block_start\ndata: {"type":"content_block_start","index":'
_TEXT_BLOCK = b',"content_block":{"type":"text","text":""}}\n\n'
_THINKING_BLOCK = b',"content_block":{"type":"thinking","thinking":"","signature":""}}\n\n'
_SIGNATURE = b',"delta":{"type":"signature_delta","signature":'
_STOP_HEAD = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":'
_MESSAGE_DELTA = b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
_STOP_SEQUENCE = b',"stop_sequence":'
_DELTA_USAGE = b'},"usage":'
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def stop_reason_name(chunk: Chunk) -> str | None:
    """Anthropic's ``stop_reason`` for a final chunk (``None`` while it goes on)."""
    if chunk.finish_reason == FinishReason.STOP and chunk.stop_sequence:
        return "stop_sequence"
    return STOP_REASON_OF.get(chunk.finish_reason)


def _uncached(u: Usage) -> int:
    """Anthropic's ``input_tokens``: the prompt's tokens neither read from
    nor written to the cache (the wire's ``prompt_tokens`` include both)."""
    return u.prompt_tokens - u.cached_tokens - u.cache_write_tokens


def _usage_out(u: Usage | None) -> AnswerUsage:
    """``message_delta``'s usage: cumulative, the input's too when known."""
    if u is None:
        return AnswerUsage(output_tokens=0)
    return AnswerUsage(
        _uncached(u),
        u.completion_tokens,
        u.cache_write_tokens or None,
        u.cached_tokens or None,
    )


def signature_of(part: ReasoningPart) -> str:
    """The signature (or redacted data) an Anthropic client is given for
    ``part``: its payload when Anthropic wrote it, else none (another
    provider's payload means nothing to an Anthropic backend)."""
    return part.opaque.decode() if part.dialect == _ANTHROPIC else ""


class EventRenderer(Streamed):
    """The Messages SSE events of one streamed answer, chunk by chunk
    (finished once the final chunk is rendered through ``message_stop``)."""

    __slots__ = (
        "_id",
        "_index",
        "_input",
        "_kind",
        "_model",
        "_started",
        "_text_head",
        "_tools",
    )

    def __init__(self, *, message_id: str, model: str, input_tokens: int = 0) -> None:
        Streamed.__init__(self)
        self._id = message_id
        self._model = model
        # ``message_start``'s input tokens when the first chunk has no usage:
        # the request's estimate.
        self._input = input_tokens
        self._started = False
        # The open block: its kind (0: none) and index; the next index is len.
        self._kind = 0
        self._index = -1
        self._text_head = b""
        # The wire's tool-call index -> the block index of that call.
        self._tools: dict[int, int] = {}

    @property
    def complete(self) -> bool:
        return self._done

    def end(self) -> bytes:
        """Nothing: ``feed`` renders the final chunk through ``message_stop``."""
        return b""

    def fail(self, err: FlatgateError) -> bytes:
        return error_event(err)

    def feed(self, chunk: Chunk) -> bytes:
        """The SSE bytes for one chunk (possibly several events).

        An error chunk raises the ``FlatgateError`` it carries.
        """
        content = chunk.content
        if (
            self._kind == _TEXT
            and content
            and not chunk.finish_reason
            and not chunk.reasoning
            and not chunk.tool_calls
            and chunk.reasoning_part is None
        ):
            buf = self._buf
            buf[:] = self._text_head
            _encode_into(content, buf, -1)
            buf += _DELTA_END
            return bytes(buf)
        return self._feed(chunk)

    def _feed(self, chunk: Chunk) -> bytes:
        finish = chunk.finish_reason
        if chunk.error is not None or finish == _ERROR:
            raise chunk_error(chunk.error)
        out: list[bytes] = []
        if chunk.usage is not None:
            self._usage = chunk.usage
        if not self._started:
            self._started = True
            out.append(self._message_start(chunk))
        if chunk.reasoning:
            if self._kind != _THINKING:
                self._open(_THINKING, _THINKING_BLOCK, out)
            out.append(self._delta(self._index, _THINKING, chunk.reasoning))
        part = chunk.reasoning_part
        if part is not None:
            self._end_reasoning(part, out)
        if chunk.content:
            if self._kind != _TEXT:
                self._open(_TEXT, _TEXT_BLOCK, out)
                self._text_head = _DELTA_HEAD + str(self._index).encode() + _DELTA_KIND[_TEXT]
            out.append(self._delta(self._index, _TEXT, chunk.content))
        for call in chunk.tool_calls:
            index = self._tools.get(call.index)
            if index is None:
                block = (
                    b',"content_block":{"type":"tool_use","id":%b,"name":%b,"input":{}}}\n\n'
                    % (
                        _encode(call.id),
                        _encode(call.name),
                    )
                )
                self._open(_TOOL, block, out)
                index = self._tools[call.index] = self._index
            # A fragment for a call whose block another has closed (servers
            # stream calls one after the other; this one interleaved) still
            # goes to its own block: the SDKs accumulate by index.
            if call.arguments:
                out.append(self._delta(index, _TOOL, call.arguments))
        if finish:
            self._close(out)
            self._done = True
            out.append(
                _MESSAGE_DELTA
                + _encode(stop_reason_name(chunk))
                + _STOP_SEQUENCE
                + _encode(chunk.stop_sequence or None)
                + _DELTA_USAGE
                + _encode(_usage_out(self._usage))
                + b"}\n\n"
            )
            out.append(_MESSAGE_STOP)
        return b"".join(out)

    def _message_start(self, chunk: Chunk) -> bytes:
        if chunk.model:
            self._model = chunk.model
        u = self._usage
        usage = (
            AnswerUsage(self._input, 0)
            if u is None
            else AnswerUsage(_uncached(u), 0, u.cache_write_tokens or None, u.cached_tokens or None)
        )
        return (
            b'event: message_start\ndata: {"type":"message_start","message":{"id":'
            + _encode(self._id)
            + b',"type":"message","role":"assistant","model":'
            + _encode(self._model)
            + b',"content":[],"stop_reason":null,"stop_sequence":null,"usage":'
            + _encode(usage)
            + b"}}\n\n"
        )

    def _end_reasoning(self, part: ReasoningPart, out: list[bytes]) -> None:
        """A reasoning block ended: a redacted one is a whole
        ``redacted_thinking`` block; another closes the open thinking block
        (one opened, empty, when its text never came) with its
        ``signature_delta``. A part with nothing but an id (another
        provider's "one began") is nothing here."""
        if part.redacted:
            block = b',"content_block":{"type":"redacted_thinking","data":%b}}\n\n' % _encode(
                signature_of(part)
            )
            self._open(_REDACTED, block, out)
            self._close(out)
            return
        if not part.opaque and not part.text and self._kind != _THINKING:
            return
        if self._kind != _THINKING:
            self._open(_THINKING, _THINKING_BLOCK, out)
            if part.text:  # its text came with no deltas: the whole of it here
                out.append(self._delta(self._index, _THINKING, part.text))
        out.append(
            _DELTA_HEAD
            + str(self._index).encode()
            + _SIGNATURE
            + _encode(signature_of(part))
            + _DELTA_END
        )
        self._close(out)

    def _delta(self, index: int, kind: int, text: str) -> bytes:
        return _DELTA_HEAD + str(index).encode() + _DELTA_KIND[kind] + _encode(text) + _DELTA_END

    def _close(self, out: list[bytes]) -> None:
        if self._kind:
            out.append(_STOP_HEAD + str(self._index).encode() + b"}\n\n")
            self._kind = 0

    def _open(self, kind: int, block: bytes, out: list[bytes]) -> None:
        self._close(out)
        self._index += 1
        self._kind = kind
        out.append(_START_HEAD + str(self._index).encode() + block)


_decode_any = msgspec.json.decode


def _tool_input(parts: list[str]) -> msgspec.Raw:
    """A call's arguments as the ``input`` object the Messages API requires."""
    text = "".join(parts).strip()
    if not text:
        return msgspec.Raw(b"{}")
    data = text.encode()
    try:
        ok = isinstance(_decode_any(data), dict)
    except (msgspec.DecodeError, RecursionError):  # nested too deeply to check
        ok = False
    if not ok:
        raise ProxyFailed(
            "The backend's tool call arguments are not a JSON object, which the Messages "
            "API requires as a tool_use block's input.",
            code=codes.BACKEND_PROTOCOL_ERROR,
        )
    return msgspec.Raw(data)


class _Block:
    __slots__ = ("closed", "id", "kind", "name", "parts", "signature")

    def __init__(self, kind: int, id_: str = "", name: str = "") -> None:
        self.kind = kind
        self.id = id_
        self.name = name
        self.parts: list[str] = []
        # A reasoning block: its signature (a redacted one's data), and
        # whether its end came (the next reasoning is another block).
        self.signature = ""
        self.closed = False

    def out(self) -> ContentBlock:
        if self.kind == _TEXT:
            return ContentBlock("text", text="".join(self.parts))
        if self.kind == _THINKING:
            return ContentBlock("thinking", thinking="".join(self.parts), signature=self.signature)
        if self.kind == _REDACTED:
            return ContentBlock("redacted_thinking", data=self.signature)
        return ContentBlock("tool_use", id=self.id, name=self.name, input=_tool_input(self.parts))


class MessageAggregator:
    """Folds the chunks of a non-streaming answer into one ``message``."""

    __slots__ = ("_blocks", "_id", "_model", "_stop", "_tools", "_usage")

    def __init__(self, *, message_id: str, model: str) -> None:
        self._id = message_id
        self._model = model
        # Blocks in the order they began.
        self._blocks: list[_Block] = []
        self._tools: dict[int, _Block] = {}
        self._usage: Usage | None = None
        self._stop: Chunk | None = None

    @property
    def finished(self) -> bool:
        return self._stop is not None

    @property
    def complete(self) -> bool:
        return self._stop is not None

    @property
    def usage(self) -> Usage | None:
        return self._usage

    def _part(self, kind: int, text: str) -> None:
        blocks = self._blocks
        if not blocks or blocks[-1].kind != kind or blocks[-1].closed:
            blocks.append(_Block(kind))
        blocks[-1].parts.append(text)

    def _end_reasoning(self, part: ReasoningPart) -> None:
        """As ``EventRenderer._end_reasoning``, folded into the blocks."""
        blocks = self._blocks
        if part.redacted:
            block = _Block(_REDACTED)
        elif blocks and blocks[-1].kind == _THINKING and not blocks[-1].closed:
            block = blocks[-1]
        elif part.opaque or part.text:
            block = _Block(_THINKING)
            if part.text:
                block.parts.append(part.text)
        else:
            return
        if block is not (blocks[-1] if blocks else None):
            blocks.append(block)
        block.signature = signature_of(part)
        block.closed = True

    def feed(self, chunk: Chunk) -> None:
        """Take one chunk; an error chunk raises the ``FlatgateError`` it carries."""
        if chunk.error is not None or chunk.finish_reason == _ERROR:
            raise chunk_error(chunk.error)
        if chunk.model:
            self._model = chunk.model
        if chunk.reasoning:
            self._part(_THINKING, chunk.reasoning)
        if chunk.reasoning_part is not None:
            self._end_reasoning(chunk.reasoning_part)
        if chunk.content:
            self._part(_TEXT, chunk.content)
        for call in chunk.tool_calls:
            block = self._tools.get(call.index)
            if block is None:
                block = self._tools[call.index] = _Block(_TOOL, call.id, call.name)
                self._blocks.append(block)
            if call.arguments:
                block.parts.append(call.arguments)
        if chunk.usage is not None:
            self._usage = chunk.usage
        if chunk.finish_reason:
            self._stop = chunk

    def body(self) -> bytes:
        """The ``message`` JSON body."""
        content = [block.out() for block in self._blocks]
        stop = self._stop
        u = self._usage
        usage = (
            AnswerUsage(0, 0)
            if u is None
            else AnswerUsage(
                _uncached(u),
                u.completion_tokens,
                u.cache_write_tokens or None,
                u.cached_tokens or None,
            )
        )
        message = Answer(
            self._id,
            "message",
            "assistant",
            self._model,
            content,
            stop_reason_name(stop) if stop is not None else None,
            (stop.stop_sequence or None) if stop is not None else None,
            usage,
        )
        return _encode(message)
