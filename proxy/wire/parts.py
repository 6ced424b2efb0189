"""Values both root tables carry: ``ReasoningPart``.

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

__all__ = ["ReasoningPart"]


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
