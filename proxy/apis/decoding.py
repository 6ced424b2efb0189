"""How a caller's JSON body fails to decode, beyond msgspec's own errors: said
once for every vendor API's decoder (``openai_chat.request``,
``anthropic_messages.request``, ...).

Owns the failures a hostile body provokes that msgspec does not raise as a
``msgspec.DecodeError``, so that each decoder turns them into its 400 instead
of letting them out as a 500:

- nesting deeper than the decoder's recursion limit, in any value (an
  unknown field it skips and a ``msgspec.Raw`` it keeps are walked too):
  ``RecursionError``, at about ``sys.getrecursionlimit()`` levels;
- a string that is not UTF-8 (a stray byte, an overlong form, an encoded
  surrogate such as ``ED A0 80``): ``UnicodeDecodeError``, for a string msgspec
  decodes (an escaped lone surrogate, ``"\\ud800"``, is already its
  ``DecodeError``);
- and what msgspec does not check at all: the bytes of a ``msgspec.Raw``
  (tool parameters, ``response_format``, ``input_schema``, a ``tool_use``
  input), kept as the caller wrote them and carried on the wire as strings,
  must be UTF-8 (``is_utf8``). An unknown field is skipped unread and
  carried nowhere: its bytes are not checked (that would decode every
  non-ASCII body twice).

Also ``validation_text``: a msgspec validation message, with the caller's
value it quotes (an enum's, a tag's) cut as ``errors.shown`` cuts names.
Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.errors import ECHO_CHARS, shown
from flatgate.proxy.plumbing.validation import quoted_span

__all__ = ["UNDECODABLE", "is_utf8", "validation_text", "why_undecodable"]

# What decoding a body raises besides msgspec's errors (see the docstring).
UNDECODABLE = (RecursionError, UnicodeDecodeError)


def why_undecodable(exc: RecursionError | UnicodeDecodeError) -> str:
    """What is wrong with a body that raised one of ``UNDECODABLE``."""
    if isinstance(exc, UnicodeDecodeError):
        return f"a string in it is not valid UTF-8: {exc.reason}"
    return "it is nested too deeply"


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` is UTF-8 (no overlong forms, no surrogates): free for
    ASCII, one decode otherwise."""
    if data.isascii():
        return True
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def validation_text(exc: msgspec.ValidationError) -> str:
    """``str(exc)``, the value it quotes cut to ``ECHO_CHARS`` characters."""
    text = str(exc)
    span = quoted_span(text)
    if span is not None and span[1] - span[0] > ECHO_CHARS:
        start, end = span
        text = text[:start] + shown(text[start:end]) + text[end:]
    return text
