"""The ``anthropic`` backend's whole answer: a Messages API ``message`` into
chunk frames in one step.

For a request its client did not stream (``JsonAdapter.whole_for``) the
adapter asks for the whole answer (``stream: false``); ``AnthropicWhole``
keeps the body (``json_api.WholeAnswer``), decodes it as an
``events.Answer``, and at its end writes the frames
``stream.AnthropicStream`` writes for the same answer streamed,
with its mappings (imported, not copied), in as few chunks as the order of
the ``content`` blocks allows:

- a chunk holds, in the order a client folds a chunk (reasoning, its part,
  content, tool calls), at most one reasoning block, then the text that
  follows it, then the tool calls that follow that; the next block that
  cannot come after those begins the next chunk. The usual answers (text;
  thinking, text, tool calls) are one chunk;
- ``thinking`` -> the block's text as ``reasoning`` and its reasoning part
  (the text, the ``signature`` as ``opaque``, dialect Messages; ``opaque``
  empty without a signature); ``redacted_thinking`` -> a redacted part
  carrying its ``data``; ``text`` -> content (consecutive text blocks join,
  as their deltas would); ``tool_use`` -> a tool call (indices count tool
  blocks only) whose arguments are its ``input`` as the server wrote it
  (``"{}"`` when empty); other blocks (server tools, their results) and
  block fields (citations) are skipped, as the stream translator skips them;
- the last chunk ends the answer too (a text answer is one frame): the
  finish reason of ``stop_reason`` with the matched ``stop_sequence``, and
  the usage (``stream.usage_of``);
  the chunks carry the message's ``model`` (the configured one if it has
  none).

A 200 whose body is ``{"type": "error", "error": {...}}`` becomes the error
chunk an ``error`` event becomes (``backend_stream_error``). A body that is
neither (another ``type``, no ``stop_reason``, which a whole message always
has, or not JSON) is a ``ValueError``: ``WholeAnswer`` makes it a
``backend_protocol_error`` chunk. No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.anthropic_messages.events import Answer, ErrorDetail
from flatgate.proxy.backends.anthropic.stream import (
    AnthropicStream,
    error_text,
    finish_of,
    thought_part,
    usage_of,
)
from flatgate.proxy.backends.json_api import WholeAnswer, error_frame
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import ToolCallDelta, Usage
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["AnthropicWhole"]

_EMPTY = frozenset({b"", b"null", b"{}"})
_decode_message = msgspec.json.Decoder(Answer).decode


class _Chunk:
    """One chunk being filled: its reasoning block, text, then tool calls."""

    __slots__ = ("calls", "part", "reasoning", "text")

    def __init__(self) -> None:
        self.reasoning = ""
        self.part: ReasoningPart | None = None
        self.text: list[str] = []
        self.calls: list[ToolCallDelta] = []

    def __bool__(self) -> bool:
        return self.part is not None or bool(self.text or self.calls)

    def frame(
        self,
        w: ChunkWriter,
        finish_reason: FinishReason = FinishReason.NONE,
        usage: Usage | None = None,
        stop_sequence: str = "",
    ) -> bytes:
        return w.chunk(
            reasoning=self.reasoning,
            reasoning_part=self.part,
            content="".join(self.text),
            tool_calls=self.calls,
            finish_reason=finish_reason,
            usage=usage,
            stop_sequence=stop_sequence,
        )


class AnthropicWhole(WholeAnswer):
    """One whole Messages answer into chunk frames (see the module docstring);
    a body that streams anyway goes to ``AnthropicStream``."""

    __slots__ = ("_model",)

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id, lambda: AnthropicStream(request_id, model))
        self._model = model

    def _answer(self, body: bytes) -> bytes:
        message = _decode_message(body)
        if message.type == "error":
            err = message.error
            return error_frame(
                self._request_id,
                codes.BACKEND_STREAM_ERROR,
                error_text(err if isinstance(err, ErrorDetail) else None),
            )
        if message.type not in ("message", ""):
            raise ValueError(f"a body of type {message.type!r}, not a message")
        if not message.stop_reason:
            raise ValueError("a message with no stop_reason")
        w = ChunkWriter(self._request_id, message.model or self._model)
        out: list[bytes] = []
        now = _Chunk()
        tools = 0
        for block in message.content:
            kind = block.type
            if kind == "text":
                if not block.text:
                    continue
                if now.calls:
                    out.append(now.frame(w))
                    now = _Chunk()
                now.text.append(block.text)
            elif kind == "tool_use":
                raw = bytes(block.input)
                arguments = "{}" if raw.strip() in _EMPTY else raw.decode()
                now.calls.append(ToolCallDelta(tools, block.id or "", block.name or "", arguments))
                tools += 1
            elif kind in ("thinking", "redacted_thinking"):
                if now:
                    out.append(now.frame(w))
                    now = _Chunk()
                if kind == "thinking":
                    now.reasoning = block.thinking or ""
                    now.part = thought_part(now.reasoning, block.signature or "", False)
                else:
                    now.part = thought_part("", block.data or "", True)
        finish, stop_sequence = finish_of(message.stop_reason, message.stop_sequence)
        u = message.usage
        usage = None
        if u is not None:
            usage = usage_of(
                u.input_tokens,
                u.cache_read_input_tokens,
                u.cache_creation_input_tokens,
                u.output_tokens,
            )
        # The last chunk ends the answer too: a text answer is one frame.
        out.append(now.frame(w, finish, usage, stop_sequence))
        return b"".join(out)
