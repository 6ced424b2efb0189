"""The OpenAI embeddings request, as a msgspec Struct: the one model of it,
which the edge decodes with (``decode``), the ``openai`` and
``openai-responses`` adapters write the request they send upstream with
(``backends.embeddings``), and the stub reads the requests it serves with
(``decode_served``).

Owns what ``POST /v1/embeddings`` accepts: ``model``; ``input`` as a string,
a list of strings, a list of token ids (one input), or a list of token-id
lists; ``encoding_format`` (``float``, the default, or ``base64``: how the
edge renders the vectors, never sent on); ``dimensions``; ``user``. Wrong
types and out-of-range values become ``InvalidRequest`` with OpenAI's
``param`` naming the field (``input.[2]``, ``dimensions``); an empty input
(``""``, ``[]``, an empty string or token list in the list), a list mixing
strings and token ids, or more than ``MAX_INPUTS`` inputs is a 400 naming
``input``.

Every other top-level field travels in the request's extras
(``EmbeddingRequest.extras``, dialect ``OpenAIChat``) as the client's own
bytes, in the client's order; the backend then carries or refuses it. A key
starting with ``$`` is flatgate's own and refused. A body holding only known
fields is decoded in one pass (the struct forbids unknown fields); one that
holds others is decoded again, leniently, with its top-level fields as JSON
text. A body nested too deeply, or with text that is not UTF-8
(``decoding``), is ``invalid_json``.

Each side's strictness is a switch on the one Struct, not a second one: the
edge's one pass decodes ``_Strict``, a subclass that forbids unknown fields;
the stub reads with ``EmbeddingRequest`` itself, which ignores them, as
OpenAI's server does (``decode_served``: msgspec's errors are raised as they
come, for the stub to say in its own words); the adapters write it with its
defaults omitted (``omit_defaults``, which no decode reads), in its fields'
order, and write no field the edge does not read.

Pure: no I/O. The decoders are built once at import.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

import msgspec

from flatgate.proxy.apis.errors import InvalidRequest
from flatgate.proxy.apis.openai_chat.request import (
    BODY_ERRORS,
    extras_object,
    raise_invalid_body,
)
from flatgate.proxy.wire.embeddings import MAX_DIMENSIONS, MAX_INPUTS

__all__ = ["Decoded", "EmbeddingRequest", "Item", "decode", "decode_served"]

# A token id is an int32 on the wire, never negative.
TokenId: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
# msgspec takes one array type per union: a list's items are told apart after
# the decode (``_inputs``).
Item: TypeAlias = str | TokenId | list[TokenId]


class EmbeddingRequest(msgspec.Struct, omit_defaults=True, gc=False):
    """``POST /v1/embeddings`` as far as flatgate carries it."""

    model: str
    input: str | list[Item]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[int, msgspec.Meta(ge=1, le=MAX_DIMENSIONS)] | None = None
    user: str | None = None


class _Strict(EmbeddingRequest, forbid_unknown_fields=True, gc=False):
    """The one-pass decode: a body with a field of no name above fails it."""


_KNOWN = frozenset(EmbeddingRequest.__struct_fields__)
_strict = msgspec.json.Decoder(_Strict).decode
_lenient = msgspec.json.Decoder(EmbeddingRequest).decode
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_UNKNOWN = "Object contains unknown field"


class Decoded(msgspec.Struct, frozen=True, gc=False):
    """A decoded, checked request: its inputs as texts or as token-id lists
    (exactly one of the two is non-empty), and its extras' JSON object
    (``b""`` for none)."""

    req: EmbeddingRequest
    texts: tuple[str, ...]
    tokens: tuple[tuple[int, ...], ...]
    extras: bytes

    @property
    def model(self) -> str:
        return self.req.model

    @property
    def count(self) -> int:
        return len(self.texts) or len(self.tokens)

    @property
    def base64(self) -> bool:
        return self.req.encoding_format == "base64"


def _empty(param: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{param}': an input must not be empty.", param=param)


def _inputs(value: str | list[Item]) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """``input`` as texts or token-id lists; ``InvalidRequest`` naming it
    when it is empty, mixed or too long."""
    if isinstance(value, str):
        if not value:
            raise _empty("input")
        return (value,), ()
    if not value:
        raise InvalidRequest(
            "Invalid value for 'input': it must not be an empty list.", param="input"
        )
    first = value[0]
    if isinstance(first, int):
        if not all(isinstance(v, int) for v in value):
            raise _mixed()
        return (), (tuple(value),)  # type: ignore[arg-type]
    if len(value) > MAX_INPUTS:
        raise InvalidRequest(
            f"Invalid value for 'input': at most {MAX_INPUTS} inputs per request, "
            f"got {len(value)}.",
            param="input",
        )
    if isinstance(first, str):
        for i, v in enumerate(value):
            if not isinstance(v, str):
                raise _mixed()
            if not v:
                raise _empty(f"input.[{i}]")
        return tuple(value), ()  # type: ignore[arg-type]
    tokens = []
    for i, v in enumerate(value):
        if not isinstance(v, list):
            raise _mixed()
        if not v:
            raise _empty(f"input.[{i}]")
        tokens.append(tuple(v))
    return (), tuple(tokens)


def _mixed() -> InvalidRequest:
    return InvalidRequest(
        "Invalid type for 'input': expected a string, a list of strings, a list of token "
        "ids, or a list of token-id lists, each list of one kind.",
        param="input",
    )


def _extras(fields: dict[str, msgspec.Raw] | None) -> bytes:
    """The fields the request does not know, as one JSON object in the
    client's order (``b""`` for none). ``fields`` is read only for a body
    with a field of no name, which is a top-level one: the request holds no
    object below it."""
    return extras_object([], fields, _KNOWN) if fields else b""


def decode(body: bytes | memoryview) -> Decoded:
    """Decode and validate a request body, with its extras; every failure is
    an ``InvalidRequest``."""
    try:
        fields = None
        try:
            req: EmbeddingRequest = _strict(body)
        except msgspec.ValidationError as exc:
            if not str(exc).startswith(_UNKNOWN):
                raise
            fields = _fields(body)
            req = _lenient(body)
    except BODY_ERRORS as exc:
        raise_invalid_body(exc)
    texts, tokens = _inputs(req.input)
    return Decoded(req, texts, tokens, _extras(fields))


def decode_served(body: bytes | memoryview) -> EmbeddingRequest:
    """The request as a server of the API reads it (the stub): the edge's
    Struct and types, fields of no name ignored. msgspec's errors are
    raised as they come."""
    return _lenient(body)
