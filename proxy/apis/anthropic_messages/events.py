"""The Messages API's answer, as msgspec Structs: the whole ``message``, the
stream's events, usage and errors.

The one model of them, and of its stop reasons (``STOP_REASONS`` read,
``STOP_REASON_OF`` written): the ``anthropic`` backend decodes its server's
answer with them (``backends.anthropic.stream``,
``backends.anthropic.whole``), the edge's renderer writes a whole
``message`` and its usage with them (``edge_translator.anthropic.render``),
the edge's errors are written with ``ErrorBody``
(``edge_translator.anthropic.errors``), and the stub answers with them
(``backends.anthropic.stub``). The events the edge and the stub
write per token stay byte templates of the same JSON (their speed is the
point), and so does the envelope of each event the stub writes.

Decoding is lenient, as it must be for a server's answer: every field has a
default, a block's and an event's ``type`` is a plain string (a block type
or an event this flatgate does not know is skipped by its reader, never an
error), and fields it does not read are ignored. One flat ``Event`` holds
what any event may carry, so that a ``content_block_delta`` costs one
decode. Encoding takes two switches:

- ``omit_defaults`` on ``Usage``, ``ContentBlock`` and ``ErrorDetail``: what
  is left at its default (``None``) is not written, so a text block is
  ``{"type", "text"}`` and a usage has the counts it was given;
- ``Answer`` has none (a message always shows ``stop_reason`` and
  ``stop_sequence``, null or not), and its ``error``, read from a 200 whose
  body is an error, defaults to ``msgspec.UNSET``: never written.

Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.wire.schema import FinishReason

__all__ = [
    "STOP_REASONS",
    "STOP_REASON_OF",
    "Answer",
    "ContentBlock",
    "Delta",
    "ErrorBody",
    "ErrorDetail",
    "Event",
    "Usage",
]


# A stop reason, read: end_turn, stop_sequence, pause_turn -> STOP (a paused
# turn has ended; the caller continues it by sending the conversation back);
# max_tokens, model_context_window_exceeded -> LENGTH; tool_use -> TOOL_CALLS;
# refusal -> CONTENT_FILTER (its reader takes any other as STOP).
STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "pause_turn": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}
# A finish reason, written (``stop_sequence`` when a sequence matched is its
# writer's: that takes the match).
STOP_REASON_OF: dict[int, str] = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CONTENT_FILTER: "refusal",
}


class Usage(msgspec.Struct, omit_defaults=True, gc=False):
    """A message's ``usage``: ``message_start``'s, ``message_delta``'s
    (cumulative), a whole message's."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class ContentBlock(msgspec.Struct, omit_defaults=True, gc=False):
    """A content block of an answer (a whole message's, a
    ``content_block_start``'s), any type: ``text``, ``thinking`` (its
    ``signature``), ``redacted_thinking`` (its ``data``), ``tool_use`` (its
    ``input`` as the server wrote it; empty: absent); others are skipped."""

    type: str = ""
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    name: str | None = None
    input: msgspec.Raw = msgspec.Raw()


class Delta(msgspec.Struct, gc=False):
    """A ``content_block_delta``'s ``delta`` (``text_delta``,
    ``input_json_delta``, ``thinking_delta``, ``signature_delta``, ...) or a
    ``message_delta``'s (the stop reason, and the stop sequence matched)."""

    type: str = ""
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    signature: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None


class ErrorDetail(msgspec.Struct, omit_defaults=True, gc=False):
    """The ``error`` of an error body or ``error`` event: its type, message
    and Anthropic's ``details`` (``error_code``)."""

    type: str | None = None
    message: str | None = None
    details: dict[str, object] | None = None


class ErrorBody(msgspec.Struct, tag_field="type", tag="error", omit_defaults=True, gc=False):
    """An error answer, ``{"type": "error", "error": {...}}`` (and the
    ``request_id`` the edge adds)."""

    error: ErrorDetail
    request_id: str | None = None


class Answer(msgspec.Struct, gc=False):
    """A whole answer, the ``message`` object (``message_start``'s too); a
    200 whose body is an error reads as one of type ``error``."""

    id: str = ""
    type: str = ""
    role: str = ""
    model: str | None = None
    content: list[ContentBlock] = []
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: Usage | None = None
    error: ErrorDetail | msgspec.UnsetType | None = msgspec.UNSET


class Event(msgspec.Struct, gc=False):
    """One stream event's ``data``: its ``type`` and whatever it carries
    (``message_start``: ``message``; ``content_block_start``: ``index``,
    ``content_block``; ``content_block_delta``: ``index``, ``delta``;
    ``message_delta``: ``delta``, ``usage``; ``error``: ``error``)."""

    type: str = ""
    index: int = 0
    message: Answer | None = None
    content_block: ContentBlock | None = None
    delta: Delta | None = None
    usage: Usage | None = None
    error: ErrorDetail | None = None
