"""Values the tables carry: ``ReasoningPart`` (requests and chunks) and
``ContentPart`` (a request message's parts).

A ``ReasoningPart`` is a piece of a model's reasoning. In a request, an
assistant turn of the history holds the reasoning to send back (a reasoning
model needs it on the next turn: Anthropic's ``thinking`` blocks with their
``signature``, OpenAI's ``reasoning`` items with ``encrypted_content``); in a
chunk, it is the end of one reasoning block, whose text came before as
``reasoning`` deltas. ``opaque`` is the provider's payload as the provider
sent it (its bytes, not base64-decoded), in the dialect ``dialect`` names
(``schema.ApiDialect``): only a backend of that dialect can use it.

Values only: no I/O.
"""

from __future__ import annotations

import msgspec

__all__ = ["ContentPart", "ReasoningPart"]


class ReasoningPart(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    # The reasoning's text (Anthropic's thinking) or summary (OpenAI's summary
    # parts, joined by blank lines), as the client was shown it.
    text: str = ""
    # The provider's opaque payload: Anthropic's signature (or a
    # redacted_thinking block's data), OpenAI's encrypted_content.
    opaque: bytes = b""
    # ``schema.ApiDialect``: the dialect ``opaque`` is in.
    dialect: int = 0
    # OpenAI's reasoning item id ("rs_..."); "" for Anthropic.
    id: str = ""
    # Anthropic's redacted_thinking: ``opaque`` is its data, no text.
    redacted: bool = False


class ContentPart(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """One part of a message's content (``LLMGateway.ContentPart``), for a
    message that holds more than text: an image, a document, audio, a file
    by id, or text where it stands among them.

    Its source is one of ``data`` (the raw bytes, never base64, with
    ``media_type``), ``url``, ``file_id``, ``text``, or (a document only) the
    ``span`` parts after it in the message's list. ``dialect``
    (``schema.ApiDialect``) is the client API it came in: the provider whose
    ``file_id`` it is, and the dialect of ``extras``.
    """

    # ``schema.PartKind``.
    kind: int = 0
    text: str = ""
    data: bytes = b""
    media_type: str = ""
    url: str = ""
    file_id: str = ""
    dialect: int = 0
    # Images: OpenAI's detail ("auto", "low", "high").
    detail: str = ""
    filename: str = ""
    # Anthropic's document title, context and citations switch.
    title: str = ""
    context: str = ""
    citations: bool = False
    # Document only: how many of the parts after it are its content.
    span: int = 0
    # The part's fields with no slot (Anthropic's cache_control), one JSON
    # object text in ``dialect``.
    extras: str = ""
