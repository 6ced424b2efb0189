"""A Responses request's items and their content parts, as msgspec Structs:
what ``input`` holds, what the store keeps, what an adapter writes.

Owns the item and part shapes of the Responses API's input, one set for
every side: the edge decodes a request's ``input`` with them
(``request.decode_request``) and reads stored items back
(``decode_items``, ``decode_stored_output``), the ``openai-responses``
adapter writes its ``input`` with them, and the stub reads the ``input`` it
serves with them. ``Item`` holds the fields of every item type (a message
may leave ``type`` out, so there is no tag to dispatch on); each part type is
a tagged Struct of its own (``Part``).

One model, two strictnesses; the switches, each used by one side only:

- **Unknown fields.** The parts (but ``InputAudio``, which the API does
  not have and the edge refuses by its type) and ``InputItem``, the
  request's item (a subclass of ``Item`` and nothing more), forbid unknown
  fields: the edge's one pass fails on a key of no
  name, and ``decode_scrubbed`` judges it (refused, or dropped when null or
  empty). ``Item`` itself is lenient: a stored item may hold a
  Responses-native backend's fields. The stub reads as OpenAI does, ignoring
  unknown keys: it drops them before its decode (``lenient.without_unknown``)
  when the strict one fails on one.
- **Absent fields.** Every Struct here is ``omit_defaults``: a field left at
  its default is not written when an adapter encodes an item; decoding is
  the same either way.

Pure: no I/O; the decoders are built once at import.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from flatgate.proxy.apis.openai_responses.answer import Answer

__all__ = [
    "MEDIA_PARTS",
    "TEXT_PARTS",
    "InputAudio",
    "InputFile",
    "InputImage",
    "InputItem",
    "InputText",
    "Item",
    "ItemRole",
    "OutputText",
    "Part",
    "ReasoningText",
    "Refusal",
    "SummaryText",
    "decode_items",
    "decode_stored_output",
]


# The parts and items forbid unknown fields, so that a body with one fails
# the one pass and is read again by ``scrub`` (a lenient struct would drop it
# in silence); unknown keys cost the one pass nothing.
class InputText(
    msgspec.Struct,
    tag_field="type",
    tag="input_text",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    text: str


class OutputText(
    msgspec.Struct,
    tag_field="type",
    tag="output_text",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    text: str
    # A previous answer's, echoed back: they ask the model for nothing.
    annotations: msgspec.Raw = msgspec.Raw()
    logprobs: msgspec.Raw = msgspec.Raw()


class Refusal(
    msgspec.Struct,
    tag_field="type",
    tag="refusal",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    refusal: str


class ReasoningText(
    msgspec.Struct,
    tag_field="type",
    tag="reasoning_text",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    text: str


class InputImage(
    msgspec.Struct,
    tag_field="type",
    tag="input_image",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    # One source: a URL (``https://...`` or a ``data:`` URL) or a file id.
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high", "original"] | None = None


class InputFile(
    msgspec.Struct,
    tag_field="type",
    tag="input_file",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    # One source: ``file_data`` (a ``data:`` URL), ``file_url`` or ``file_id``.
    file_data: str | None = None
    file_url: str | None = None
    file_id: str | None = None
    filename: str | None = None
    detail: Literal["auto", "low", "high"] | None = None


class InputAudio(msgspec.Struct, tag_field="type", tag="input_audio", gc=False):
    """Not a Responses input part (the API takes text, images and files;
    audio is Chat Completions'): known only to be refused by name."""


Part: TypeAlias = (
    InputText | OutputText | Refusal | ReasoningText | InputImage | InputFile | InputAudio
)
# A message's parts that are text, and those that are not.
TEXT_PARTS = (InputText, OutputText, Refusal)
MEDIA_PARTS = (InputImage, InputFile, InputAudio)


class SummaryText(
    msgspec.Struct,
    tag_field="type",
    tag="summary_text",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    text: str


# A message item's roles.
ItemRole: TypeAlias = Literal["user", "assistant", "system", "developer"]


class Item(msgspec.Struct, omit_defaults=True, gc=False):
    """One input item, of any type: the fields of every type it can be (a
    message with no ``type`` has no tag to dispatch on); the edge's
    ``request.decode_request`` holds each type to its own."""

    type: str | None = None
    role: ItemRole | None = None
    content: str | list[Part] | None = None
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    namespace: str | None = None
    arguments: str | None = None
    output: str | list[Part] | None = None
    summary: list[SummaryText] | None = None
    encrypted_content: str | None = None
    # A previous answer's, echoed back (an assistant message's ``phase``:
    # commentary or final answer): they ask the model for nothing.
    status: str | None = None
    phase: str | None = None
    # A ``compaction`` item's (``compact``), as the compact endpoint's answer
    # has it: who made it; it asks the model for nothing.
    created_by: str | None = None


class InputItem(Item, forbid_unknown_fields=True, gc=False):
    """A request's item: its unknown fields fail the one pass (a stored
    item, read as ``Item``, may hold a Responses-native backend's)."""


_items_decoder = msgspec.json.Decoder(list[Item])
_item_decoder = msgspec.json.Decoder(Item)
_answer_decoder = msgspec.json.Decoder(Answer)


def decode_items(data: bytes) -> list[Item]:
    """Stored input items (the edge's ``store.StoredResponses.input_items``), as items."""
    return _items_decoder.decode(data)


def decode_stored_output(data: bytes) -> list[Item]:
    """A stored response object's ``output`` items."""
    return [_item_decoder.decode(raw) for raw in _answer_decoder.decode(data).output or ()]
