"""A ConverseStream answer into chunk frames (``ConverseStream``), and what
its whole twin (``converse_whole``) shares with it: usage, stop reasons,
reasoning parts.

The body is AWS's event stream (``eventstream``): one message per event, its
``:event-type`` header naming it, its payload the event's JSON
(``apis.bedrock_converse.answer``):

- ``contentBlockDelta``: ``text`` -> content (the deltas of one read go out
  as one chunk); ``reasoningContent.text`` -> reasoning, its ``signature``
  and ``redactedContent`` remembered, and at the block's
  ``contentBlockStop`` one chunk with ``reasoning_part`` (the whole text,
  the signature's bytes as ``opaque``, dialect Messages: the signature is
  Claude's, and a Messages client sends it back; a redacted block's bytes
  base64-encoded as ``opaque``, ``redacted``, as Anthropic spells them);
  ``toolUse.input`` fragments -> the tool call's arguments;
- ``contentBlockStart`` with ``toolUse`` -> a tool call (its id and name;
  tool-call indices count tool blocks, not Converse's block index; a call
  that gets no input has ``"{}"``); other starts (server tools' results,
  images) and citation deltas are skipped;
- ``messageStop``: the stop reason (``answer.STOP_REASONS``: end_turn,
  stop_sequence -> STOP; max_tokens, model_context_window_exceeded ->
  LENGTH; tool_use -> TOOL_CALLS; guardrail_intervened, content_filtered ->
  CONTENT_FILTER; malformed_model_output, malformed_tool_use -> an error
  chunk: the model's output could not be read); the final chunk waits for
  ``metadata`` (its usage), or the body's end;
- ``metadata``: usage. Converse counts the prompt as Anthropic does, in
  parts that do not overlap (``inputTokens`` after the cache,
  ``cacheReadInputTokens``, ``cacheWriteInputTokens``): ``prompt_tokens``
  is their sum, ``cached_tokens`` the reads, ``cache_write_tokens`` the
  writes;
- an exception message (``:message-type`` ``exception``:
  ``throttlingException``, ``modelStreamErrorException``,
  ``internalServerException``, ``serviceUnavailableException``,
  ``validationException``) or an ``error`` message -> one error chunk
  naming it; bytes that are not an event stream (a bad CRC, a length past
  the bounds) or an event that does not decode -> ``backend_protocol_error``;
  a body that ends before a stop reason -> ``backend_stream_truncated``.

Exactly one terminal chunk, as every translator. No I/O.
"""

from __future__ import annotations

import base64

import msgspec

from flatgate.proxy.apis.bedrock_converse.answer import (
    STOP_REASONS,
    BlockStartEvent,
    DeltaEvent,
    MessageStop,
    Metadata,
    StopEvent,
    StreamException,
    TokenUsage,
)
from flatgate.proxy.backends.bedrock.eventstream import (
    EventMessage,
    EventStreamError,
    EventStreamParser,
    event_type,
)
from flatgate.proxy.backends.json_api import count, error_frame
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk import frames
from flatgate.proxy.wire.chunk.frames import ToolCallDelta
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = ["ConverseStream", "finish_of", "redacted_part", "signed_part", "usage_of"]

_DIALECT = int(ApiDialect.ANTHROPIC_MESSAGES)
_decode_start = msgspec.json.Decoder(BlockStartEvent).decode
_decode_delta = msgspec.json.Decoder(DeltaEvent).decode
_decode_stop = msgspec.json.Decoder(StopEvent).decode
_decode_message_stop = msgspec.json.Decoder(MessageStop).decode
_decode_metadata = msgspec.json.Decoder(Metadata).decode
_decode_exception = msgspec.json.Decoder(StreamException).decode
_TEXT, _REASONING, _TOOL = 0, 1, 2


def finish_of(stop_reason: str) -> FinishReason:
    """The finish reason of a stop reason (ERROR: the output was malformed)."""
    return STOP_REASONS.get(stop_reason, FinishReason.STOP)


def usage_of(u: TokenUsage | None) -> frames.Usage | None:
    """The final chunk's usage (see the module docstring)."""
    if u is None:
        return None
    read, written = count(u.cache_read_input_tokens), count(u.cache_write_input_tokens)
    prompt = count(count(u.input_tokens) + read + written)
    return frames.Usage(prompt, count(u.output_tokens), read, 0, written)


def signed_part(text: str, signature: str) -> ReasoningPart:
    return ReasoningPart(text=text, opaque=signature.encode(), dialect=_DIALECT)


def redacted_part(data: bytes) -> ReasoningPart:
    return ReasoningPart(opaque=base64.b64encode(data), dialect=_DIALECT, redacted=True)


class _Block:
    __slots__ = ("args", "kind", "redacted", "signature", "text", "tool")

    def __init__(self, kind: int, tool: int = 0) -> None:
        self.kind = kind
        self.tool = tool
        self.args = False
        self.text: list[str] = []
        self.signature = ""
        self.redacted = b""


class ConverseStream:
    """One ConverseStream answer into chunk frames (see the module docstring)."""

    __slots__ = (
        "_blocks",
        "_finish",
        "_held",
        "_parser",
        "_request_id",
        "_stop_reason",
        "_tools",
        "_writer",
        "done",
    )

    def __init__(self, request_id: str, model: str) -> None:
        self._request_id = request_id
        self._writer = ChunkWriter(request_id, model)
        self._parser = EventStreamParser()
        self._blocks: dict[int, _Block] = {}
        self._tools = 0
        self._finish = FinishReason.NONE
        self._stop_reason = ""
        self._held: list[str] = []
        self.done = False

    def _fail(self, code: codes.ErrorCode, message: str) -> bytes:
        self.done = True
        return error_frame(self._request_id, code, message)

    def _release(self, out: list[bytes]) -> None:
        if self._held:
            text = "".join(self._held)
            self._held.clear()
            out.append(self._writer.content(text))

    def feed(self, piece: bytes) -> bytes:
        if self.done:
            return b""
        try:
            messages = self._parser.feed(piece)
        except EventStreamError as exc:
            return self._fail(codes.BACKEND_PROTOCOL_ERROR, str(exc))
        out: list[bytes] = []
        for msg in messages:
            try:
                frame = self._message(msg)
            except ValueError as exc:  # JSON, UTF-8, a shape
                self._release(out)
                frame = self._fail(codes.BACKEND_PROTOCOL_ERROR, f"backend sent a bad event: {exc}")
            if frame:
                self._release(out)
                out.append(frame)
            if self.done:
                break
        self._release(out)
        return b"".join(out)

    def end(self) -> bytes:
        if self.done:
            return b""
        if self._finish:
            return self._final(None)  # the stop came; its metadata did not
        if self._parser.pending:
            return self._fail(codes.BACKEND_STREAM_TRUNCATED, "backend ended inside an event")
        return self._fail(codes.BACKEND_STREAM_TRUNCATED, "backend ended the stream early")

    def _message(self, msg: EventMessage) -> bytes:
        headers = msg.headers
        kind = headers.get(":message-type", "event")
        if kind != "event":
            if kind not in ("exception", "error"):
                return b""  # a message type this flatgate does not know
            name = event_type(msg)
            if kind == "error":
                text = str(msg.headers.get(":error-message", "")) or "the backend failed"
                name = str(msg.headers.get(":error-code", "")) or "error"
            else:
                exc = _decode_exception(msg.payload) if msg.payload else StreamException()
                text = exc.original_message or exc.message or "the backend failed"
            return self._fail(codes.BACKEND_STREAM_ERROR, f"{name or 'exception'}: {text}")
        event = headers.get(":event-type")
        payload = msg.payload
        if event == "contentBlockDelta":
            return self._delta(_decode_delta(payload))
        if event == "contentBlockStart":
            return self._start(_decode_start(payload))
        if event == "contentBlockStop":
            return self._stop(_decode_stop(payload).content_block_index)
        if event == "messageStop":
            stop = _decode_message_stop(payload)
            self._stop_reason = stop.stop_reason
            self._finish = finish_of(stop.stop_reason)
            return b""
        if event == "metadata":
            meta = _decode_metadata(payload)
            if self._finish:
                return self._final(meta.usage)
            return b""
        return b""  # messageStart, and events this flatgate does not know

    def _start(self, ev: BlockStartEvent) -> bytes:
        use = ev.start.tool_use
        if use is None:
            return b""
        ours = self._tools
        self._tools += 1
        self._blocks[ev.content_block_index] = _Block(_TOOL, ours)
        return self._writer.chunk(tool_calls=(ToolCallDelta(ours, use.tool_use_id, use.name),))

    def _delta(self, ev: DeltaEvent) -> bytes:
        d = ev.delta
        at = ev.content_block_index
        if d.text is not None:
            if d.text:
                self._held.append(d.text)
            return b""
        if d.tool_use is not None:
            block = self._blocks.get(at)
            if block is None or block.kind != _TOOL or not d.tool_use.input:
                return b""
            block.args = True
            return self._writer.arguments(block.tool, d.tool_use.input)
        r = d.reasoning_content
        if r is not None:
            block = self._blocks.get(at)
            if block is None:
                block = self._blocks[at] = _Block(_REASONING)
            if r.text:
                block.text.append(r.text)
                return self._writer.reasoning(r.text)
            if r.signature:
                block.signature += r.signature
            if r.redacted_content:
                block.redacted += r.redacted_content
        return b""

    def _stop(self, index: int) -> bytes:
        block = self._blocks.pop(index, None)
        if block is None:
            return b""
        if block.kind == _TOOL:
            return b"" if block.args else self._writer.arguments(block.tool, "{}")
        if block.redacted:
            return self._writer.chunk(reasoning_part=redacted_part(block.redacted))
        part = signed_part("".join(block.text), block.signature)
        return self._writer.chunk(reasoning_part=part)

    def _final(self, usage: TokenUsage | None) -> bytes:
        if self._finish is FinishReason.ERROR:
            why = f"the model's output could not be read ({self._stop_reason})"
            return self._fail(codes.BACKEND_STREAM_ERROR, why)
        self.done = True
        return self._writer.chunk(finish_reason=self._finish, usage=usage_of(usage))
