"""The errors a client API's request is refused with, below the edge and the
backends, and OpenAI's error shape.

The vendor APIs' models (``proxy.apis``) raise these, so they are defined
here, below every layer that decodes a vendor API's request. Each is a
``FlatgateError`` (``proxy.errors.root``) with its default code: the 400,
``InvalidRequest``, and a 400 with Anthropic's ``details`` object,
``DetailedRequestError``. ``openai_body`` renders any FlatgateError in
OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``
(``openai_detail``: the inner object, also what a mid-stream error event
carries). A message quotes what the caller sent (a model or tool name)
through ``shown``, at most ``ECHO_CHARS`` of it. No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError

__all__ = [
    "ECHO_CHARS",
    "DetailedRequestError",
    "InvalidRequest",
    "openai_body",
    "openai_detail",
    "shown",
]


class _Detail(msgspec.Struct, omit_defaults=False):
    message: str
    type: str
    param: str | None
    code: str | None


class _Body(msgspec.Struct):
    error: _Detail


_encode = msgspec.json.Encoder().encode

# The most of a caller's text an error message quotes.
ECHO_CHARS = 256


def shown(text: str) -> str:
    """``text`` as an error message quotes it: its first ``ECHO_CHARS``
    characters, and an ellipsis when there were more."""
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "\u2026"


def openai_detail(err: FlatgateError) -> dict[str, str | None]:
    """The inner ``error`` object of ``err`` in OpenAI's shape (also what a
    mid-stream error event carries)."""
    return {"message": err.message, "type": err.type, "param": err.param, "code": err.code.code}


def openai_body(err: FlatgateError) -> bytes:
    """The JSON response body of ``err`` in OpenAI's shape, ``{"error": {...}}``."""
    return _encode(_Body(_Detail(err.message, err.type, err.param, err.code.code)))


class InvalidRequest(FlatgateError):
    default = codes.INVALID_REQUEST


class DetailedRequestError(InvalidRequest):
    """A 400 whose Anthropic error carries ``details`` (its ``error_code``
    and what else Anthropic documents for it)."""

    def __init__(self, message: str, *, param: str | None, details: dict[str, object]) -> None:
        super().__init__(message, param=param)
        self.details = details
