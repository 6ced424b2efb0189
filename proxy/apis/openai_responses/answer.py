"""A Responses answer, as msgspec Structs: the ``response`` object and its
output items, as far as flatgate reads them.

Owns the answer's shapes, read by every side that reads one: the
``openai-responses`` adapter reads a whole answer (``stream: false``:
``Answer``), the ``response`` of a stream's lifecycle events (``events``:
``Response``) and each output item (``OutputItem``); the edge reads a stored
response's ``output`` (``items.decode_stored_output``). Every field has a
default and no Struct forbids unknown fields: a server adds fields, part
types and item types, and an answer must not fail on one. An output item is
read here untagged, so that a part of a type flatgate does not know is
skipped, not refused; the request's items (``items.Item``), the same
objects when a client sends them back, are the edge's to hold strictly:
msgspec cannot make a tagged union lenient, so the two are read apart.

``Response`` is the object as a stream's lifecycle events carry it;
``Answer``, a subclass, adds the ``output`` a whole answer is read for
(each item's JSON as sent: a hosted tool's item is relayed as it is, the
others are read with ``OutputItem``). ``error`` is an object, or a bare
string from a server that says no more (``error_object`` makes it one, for
a whole answer and a stream alike). Pure: no I/O.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "Answer",
    "IncompleteDetails",
    "InputTokensDetails",
    "ItemPart",
    "OutputItem",
    "OutputTokensDetails",
    "Response",
    "ResponseError",
    "ResponseUsage",
    "decode_answer",
    "decode_output_item",
    "error_object",
]


class ItemPart(msgspec.Struct, gc=False):
    """A part of an output item: a message's ``output_text`` (with its
    ``logprobs`` as sent) or ``refusal``, a reasoning item's summary or text."""

    type: str = ""
    text: str = ""
    refusal: str = ""
    logprobs: msgspec.Raw = msgspec.Raw()  # empty: none


class OutputItem(msgspec.Struct, gc=False):
    """An output item, as far as the translators read one."""

    type: str = ""
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    summary: list[ItemPart] | None = None
    content: list[ItemPart] | None = None
    encrypted_content: str | None = None


class InputTokensDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


class OutputTokensDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class ResponseUsage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    input_tokens_details: InputTokensDetails | None = None
    output_tokens_details: OutputTokensDetails | None = None


class ResponseError(msgspec.Struct, gc=False):
    code: str | int | None = None
    message: str | None = None
    type: str | None = None


class IncompleteDetails(msgspec.Struct, gc=False):
    reason: str | None = None


class Response(msgspec.Struct, gc=False):
    """The ``response`` object, as a stream's lifecycle events carry it: its
    status, model, usage and failure (its ``output``, the stream's items
    again, is skipped unread: ``Answer`` reads it)."""

    status: str | None = None
    model: str | None = None
    usage: ResponseUsage | None = None
    # "response", or "response.compaction" for the answer of /responses/compact
    # (``compact``), read in the same pass.
    object: str | None = None
    # A string: the error body of a server that says no more.
    error: ResponseError | str | None = None
    incomplete_details: IncompleteDetails | None = None


class Answer(Response, gc=False):
    """A whole answer (or a stored response): the ``response`` object with its
    ``output`` items, each kept as sent (a hosted tool's item is relayed as it
    is). A subclass, not a second model: the one field a whole answer reads
    that a stream's events do not."""

    output: list[msgspec.Raw] | None = None


decode_answer = msgspec.json.Decoder(Answer).decode
decode_output_item = msgspec.json.Decoder(OutputItem).decode


def error_object(error: ResponseError | str | None) -> ResponseError | None:
    """A response's ``error`` as an object (a bare string is its message)."""
    return ResponseError(message=error) if isinstance(error, str) else error
