"""Converse's answers, as msgspec Structs: the whole answer (``Converse``),
the events of a stream (``ConverseStream``: one JSON payload per
event-stream message, its ``:event-type`` header naming which), the
exceptions a stream or an error response carries, and the stop reasons.

The one model of them: the ``bedrock`` backend reads its server's answer
with them (``backends.bedrock.converse_stream``, ``converse_whole``) and the
stub writes its answers with them (``backends.bedrock.converse_stub``).

Decoding is lenient, as a server's answer must be: every field has a
default, and unknown fields (the ``p`` padding AWS puts in every stream
event, a newer service's members) are ignored. Stop reasons:
``STOP_REASONS`` maps each of the service model's ``StopReason`` values to a
finish reason (end_turn, stop_sequence -> STOP; max_tokens,
model_context_window_exceeded -> LENGTH; tool_use -> TOOL_CALLS;
guardrail_intervened, content_filtered -> CONTENT_FILTER;
malformed_model_output, malformed_tool_use -> ERROR: the model's output
could not be read, so the answer is not a finished one); ``STOP_REASON_OF``
writes a finish reason back. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.bedrock_converse.blocks import Message
from flatgate.proxy.wire.schema import FinishReason

__all__ = [
    "EXCEPTION_EVENTS",
    "STOP_REASONS",
    "STOP_REASON_OF",
    "BlockDelta",
    "BlockStart",
    "BlockStartEvent",
    "Converse",
    "DeltaEvent",
    "ErrorBody",
    "MessageStart",
    "MessageStop",
    "Metadata",
    "Metrics",
    "Output",
    "ReasoningDelta",
    "StopEvent",
    "StreamException",
    "TokenUsage",
    "ToolUseDelta",
    "ToolUseStart",
]

STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "guardrail_intervened": FinishReason.CONTENT_FILTER,
    "content_filtered": FinishReason.CONTENT_FILTER,
    "malformed_model_output": FinishReason.ERROR,
    "malformed_tool_use": FinishReason.ERROR,
}
STOP_REASON_OF: dict[int, str] = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CONTENT_FILTER: "content_filtered",
}
# The exception events of a ConverseStream (``:exception-type``), each with
# the HTTP status the same exception has as a response.
EXCEPTION_EVENTS: dict[str, int] = {
    "internalServerException": 500,
    "modelStreamErrorException": 424,
    "validationException": 400,
    "throttlingException": 429,
    "serviceUnavailableException": 503,
}


class _Shape(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    pass


class TokenUsage(_Shape):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_input_tokens: int | None = None
    cache_write_input_tokens: int | None = None


class Metrics(_Shape):
    latency_ms: int = 0


class Output(_Shape):
    message: Message | None = None


class Converse(_Shape):
    """The whole answer (``ConverseResponse``)."""

    output: Output = msgspec.field(default_factory=Output)
    stop_reason: str = ""
    usage: TokenUsage | None = None
    metrics: Metrics | None = None
    additional_model_response_fields: msgspec.Raw = msgspec.Raw()
    trace: msgspec.Raw = msgspec.Raw()


# -- the stream's events (each event-stream message's payload) -------------


class MessageStart(_Shape):
    role: str = "assistant"


class ToolUseStart(_Shape):
    tool_use_id: str = ""
    name: str = ""
    type: str | None = None


class BlockStart(_Shape):
    tool_use: ToolUseStart | None = None
    # toolResult, image: server tools' and image output's starts.
    tool_result: msgspec.Raw = msgspec.Raw()
    image: msgspec.Raw = msgspec.Raw()


class BlockStartEvent(_Shape):
    start: BlockStart = msgspec.field(default_factory=BlockStart)
    content_block_index: int = 0


class ToolUseDelta(_Shape):
    input: str = ""


class ReasoningDelta(_Shape):
    """A union: the reasoning's text, its signature, or its redacted bytes."""

    text: str | None = None
    signature: str | None = None
    redacted_content: bytes | None = None


class BlockDelta(_Shape):
    text: str | None = None
    tool_use: ToolUseDelta | None = None
    reasoning_content: ReasoningDelta | None = None
    citation: msgspec.Raw = msgspec.Raw()


class DeltaEvent(_Shape):
    delta: BlockDelta = msgspec.field(default_factory=BlockDelta)
    content_block_index: int = 0


class StopEvent(_Shape):
    """``contentBlockStop``."""

    content_block_index: int = 0


class MessageStop(_Shape):
    stop_reason: str = ""
    additional_model_response_fields: msgspec.Raw = msgspec.Raw()


class Metadata(_Shape):
    usage: TokenUsage | None = None
    metrics: Metrics | None = None
    trace: msgspec.Raw = msgspec.Raw()


class StreamException(_Shape):
    """An exception event's payload (any of ``EXCEPTION_EVENTS``)."""

    message: str = ""
    original_status_code: int | None = None
    original_message: str | None = None


class ErrorBody(msgspec.Struct, omit_defaults=True, gc=False):
    """An error response's body: ``{"message": ...}`` (some services'
    ``Message``); its type is the ``x-amzn-errortype`` header's."""

    message: str = ""
    Message: str = ""
