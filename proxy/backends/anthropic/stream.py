"""The ``anthropic`` backend's answer: a Messages API stream into chunk frames.

The adapter asks for a stream (``stream: true``) when the client streams, or
when the backend's ``whole_answers`` is off (a whole answer is then
assembled by the edge from the same frames; otherwise ``whole``
translates the backend's whole ``message``, with the mappings below, which
it imports). Events (``event:`` + ``data:``, each decoded once as an
``events.Event``):

- ``message_start``: the model and input usage;
- ``content_block_start``/``delta``/``stop``: ``text_delta`` -> content;
  a ``thinking`` block's ``thinking_delta`` -> reasoning, its
  ``signature_delta`` remembered, and at its ``content_block_stop`` one chunk
  with ``reasoning_part`` (the block's whole thinking as ``text``, the
  signature's bytes as ``opaque``, dialect Messages; ``opaque`` is empty when
  the server sent no signature); a ``redacted_thinking`` block -> at its stop
  a ``reasoning_part`` with its ``data`` as ``opaque`` and ``redacted``; a
  ``tool_use`` block -> a tool call whose ``input_json_delta`` fragments are
  its arguments (tool-call indices count tool blocks only, not Anthropic's
  block index; a call with no arguments gets ``"{}"``); other block types
  (server tools, citations) are skipped;
- ``message_delta``: the stop reason (and the stop sequence that matched,
  which the final chunk carries) and usage, both cumulative;
- ``message_stop`` ends the stream with the final chunk; ``ping``, once the
  first token has gone out, becomes an empty chunk (a heartbeat the edge
  relays as its own keep-alive), and is ignored before; unknown events are
  ignored; an ``error`` event (``overloaded_error`` after a 200)
  becomes an error chunk, as does a body that ends before a stop reason.

Usage: Anthropic counts the prompt in three parts that do not overlap
(``input_tokens`` after the last cache breakpoint, ``cache_read_input_tokens``,
``cache_creation_input_tokens``); ``prompt_tokens`` is their sum (what the
other APIs call the prompt), ``cached_tokens`` the reads and
``cache_write_tokens`` the writes.

Stop reasons: as ``events.STOP_REASONS`` maps them (end_turn, stop_sequence,
pause_turn -> STOP; max_tokens, model_context_window_exceeded -> LENGTH;
tool_use -> TOOL_CALLS; refusal -> CONTENT_FILTER); anything else -> STOP.

No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.anthropic_messages.events import STOP_REASONS, ErrorDetail, Event, Usage
from flatgate.proxy.backends.json_api import EventStream, count
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk import frames
from flatgate.proxy.wire.chunk.frames import ToolCallDelta
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = [
    "STOP_REASONS",
    "AnthropicStream",
    "error_text",
    "finish_of",
    "thought_part",
    "usage_of",
]

_DIALECT = int(ApiDialect.ANTHROPIC_MESSAGES)


def error_text(err: ErrorDetail | None) -> str:
    """The error chunk's message for a backend's ``error``."""
    err = err or ErrorDetail()
    return f"{err.type or 'error'}: {err.message or 'the backend failed'}"


def finish_of(stop_reason: str, stop_sequence: str | None) -> tuple[FinishReason, str]:
    """The finish reason of a stop reason (see the module docstring) and the
    stop sequence the final chunk carries (only with a stop)."""
    finish = STOP_REASONS.get(stop_reason, FinishReason.STOP)
    return finish, (stop_sequence or "") if finish is FinishReason.STOP else ""


def usage_of(
    uncached: int | None, read: int | None, written: int | None, output: int | None
) -> frames.Usage | None:
    """The final chunk's usage from Anthropic's counts (``None``: none came)."""
    if uncached is None and read is None and written is None and output is None:
        return None
    r, w = count(read), count(written)
    return frames.Usage(count(count(uncached) + r + w), count(output), r, 0, w)


def thought_part(text: str, opaque: str, redacted: bool) -> ReasoningPart:
    """The reasoning part a thinking block (its text and signature) or a
    redacted one (its data) ends in."""
    return ReasoningPart(text=text, opaque=opaque.encode(), dialect=_DIALECT, redacted=redacted)


_decode_event = msgspec.json.Decoder(Event).decode
_TEXT, _THINKING, _TOOL, _SKIP, _REDACTED = 0, 1, 2, 3, 4


class _Thought:
    """A thinking block so far: its text and its signature."""

    __slots__ = ("signature", "text")

    def __init__(self, text: str, signature: str) -> None:
        self.text = [text] if text else []
        self.signature = signature


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
        "_thoughts",
        "_tools",
        "_writer",
    )

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id)
        self._model = model
        self._writer: ChunkWriter | None = None
        # Anthropic's block index -> (kind, our tool-call index, arguments seen)
        self._blocks: dict[int, list[int]] = {}
        # Anthropic's block index -> the thinking (or redacted data) it holds.
        self._thoughts: dict[int, _Thought] = {}
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

    def _usage(self, u: Usage) -> None:
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
            out = self._stop(ev.index)
            self._spoke = self._spoke or bool(out)
            return out
        if kind == "message_start":
            if ev.message is not None:
                if ev.message.model:
                    self._model = ev.message.model
                if ev.message.usage is not None:
                    self._usage(ev.message.usage)
            return b""
        if kind == "message_delta":
            if ev.delta is not None and ev.delta.stop_reason:
                self._finish, self._stop_sequence = finish_of(
                    ev.delta.stop_reason, ev.delta.stop_sequence
                )
            if ev.usage is not None:
                self._usage(ev.usage)
            return b""
        if kind == "message_stop":
            if not self._finish:
                return self._fail(codes.BACKEND_STREAM_TRUNCATED, "message ended without a stop")
            return self._final()
        if kind == "error":
            return self._fail(codes.BACKEND_STREAM_ERROR, error_text(ev.error))
        if kind == "ping" and self._spoke:
            # A heartbeat: an empty chunk, so that the edge, which times the
            # gaps between the proxy's bytes, hears that the backend is alive
            # through a long silence (a tool's input being generated). Not
            # before the first token: the answer has not begun (an error may
            # still be an HTTP status, and the first-byte timeout applies).
            return self._out().chunk()
        return b""  # events this flatgate does not know

    def _start(self, ev: Event) -> bytes:
        block = ev.content_block
        if block is None:
            return b""
        w = self._out()
        kind = block.type
        if kind == "text":
            self._blocks[ev.index] = [_TEXT, 0, 0]
            return w.content(block.text) if block.text else b""
        if kind == "thinking":
            self._blocks[ev.index] = [_THINKING, 0, 0]
            self._thoughts[ev.index] = _Thought(block.thinking or "", block.signature or "")
            return w.reasoning(block.thinking) if block.thinking else b""
        if kind == "redacted_thinking":
            self._blocks[ev.index] = [_REDACTED, 0, 0]
            self._thoughts[ev.index] = _Thought("", block.data or "")
            return b""
        if kind == "tool_use":
            ours = self._tools
            self._tools += 1
            self._blocks[ev.index] = [_TOOL, ours, 0]
            delta = ToolCallDelta(ours, block.id or "", block.name or "")
            return w.chunk(tool_calls=(delta,))
        self._blocks[ev.index] = [_SKIP, 0, 0]
        return b""

    def _delta(self, ev: Event) -> bytes:
        d = ev.delta
        if d is None:
            return b""
        kind = d.type
        if kind == "text_delta":
            if not d.text:
                return b""
            self._spoke = True
            return self._hold(self._out(), d.text, 0)  # out with the text of its read
        if kind == "input_json_delta":
            block = self._blocks.get(ev.index)
            if block is None or block[0] != _TOOL or not d.partial_json:
                return b""
            block[2] = 1
            return self._out().arguments(block[1], d.partial_json)
        if kind == "thinking_delta":
            if not d.thinking:
                return b""
            thought = self._thoughts.get(ev.index)
            if thought is not None:
                thought.text.append(d.thinking)
            return self._out().reasoning(d.thinking)
        if kind == "signature_delta":
            thought = self._thoughts.get(ev.index)
            if thought is not None and d.signature:
                thought.signature += d.signature
            return b""
        return b""  # citations_delta, ...

    def _stop(self, index: int) -> bytes:
        block = self._blocks.get(index)
        if block is None:
            return b""
        if block[0] == _TOOL and not block[2]:
            return self._out().arguments(block[1], "{}")
        if block[0] in (_THINKING, _REDACTED):
            thought = self._thoughts.pop(index, None)
            if thought is None:
                return b""
            part = thought_part("".join(thought.text), thought.signature, block[0] == _REDACTED)
            return self._out().chunk(reasoning_part=part)
        return b""

    def _final(self) -> bytes:
        self.done = True
        report = usage_of(self._input, self._cache_read, self._cache_write, self._output)
        return self._out().chunk(
            finish_reason=self._finish, usage=report, stop_sequence=self._stop_sequence
        )
