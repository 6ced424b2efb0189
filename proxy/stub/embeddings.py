"""The stub's embeddings: ``POST /v1/embeddings`` in the ``fbs`` and OpenAI protocols.

Owns what the stub answers to an embeddings request, whatever the protocol:

- ``EmbeddingsAsk``: what a protocol reads out of the request: the inputs
  (texts, or token-id lists), the dimensions (``DEFAULT_DIMENSIONS`` when not
  given), the fault its model name asks for (``echo@fail``, as for chat;
  ``split_model``) and, in OpenAI's protocol, whether base64 was asked for;
- ``vector`` (``backends.dialect``'s, which the ``bedrock`` stub's Titan
  and Cohere answers share): a deterministic vector per input, derived from
  the input (its text, or its token ids) and the dimension;
- prompt tokens, counted as the chat echo counts them: a text's
  whitespace-delimited words, a token list's ids;
- the protocols: ``FbsEmbeddings`` (an ``EmbeddingRequest`` in, one
  ``EmbeddingResponse`` out, ``application/x-flatbuffers``; errors flatgate's
  own JSON) and ``OpenAIEmbeddings`` (OpenAI's JSON: ``input`` a string, a
  list of strings, a token-id list or a list of them, ``encoding_format``
  ``float`` (the default) or ``base64``, ``dimensions``, read with the one
  model of the request, ``apis.openai_embeddings.request``, fields of no
  name ignored (``decode_served``), and within its bounds; errors in
  OpenAI's shape with ``param``), each with its answers to the faults
  (``server.StubServer`` applies them as to a non-streamed chat request).

Pure: no I/O.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from flatgate.proxy.apis.openai_embeddings.request import Item, decode_served
from flatgate.proxy.backends.dialect import (
    STUB_MAX_BODY,
    HeaderFn,
    Rejected,
    Reply,
    StubRequest,
    id_header,
    split_model,
    vector,
)
from flatgate.proxy.backends.fbs.stub import FbsWire
from flatgate.proxy.backends.openai.stub import OpenAIWire, error_reply
from flatgate.proxy.backends.openai.stub_request import (
    Invalid,
    below_minimum,
    in_openai_words,
    missing,
    not_json,
    number_at,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.codes import error_body
from flatgate.proxy.plumbing.validation import quoted_span, read_validation
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.embeddings import (
    MAX_DIMENSIONS,
    MAX_INPUTS,
    read_embedding_request,
    write_embedding_response,
)
from flatgate.proxy.wire.schema import EMBEDDINGS_PATH, FLATBUFFERS, JSON

__all__ = [
    "DEFAULT_DIMENSIONS",
    "EMBEDDINGS",
    "Embeddings",
    "EmbeddingsAsk",
    "FbsEmbeddings",
    "OpenAIEmbeddings",
    "vector",
]

# The dimensions of a vector when the request gives none (OpenAI's
# text-embedding-3-small and ada-002).
DEFAULT_DIMENSIONS = 1536


@dataclass(frozen=True, slots=True)
class EmbeddingsAsk:
    """An embeddings request, in any protocol (see the module docstring)."""

    request_id: str
    model: str
    texts: tuple[str, ...]
    tokens: tuple[tuple[int, ...], ...]
    dimensions: int
    fault: str = ""
    # OpenAI: ``encoding_format: "base64"``.
    base64: bool = False

    @property
    def count(self) -> int:
        return len(self.texts) or len(self.tokens)

    @property
    def prompt_tokens(self) -> int:
        if self.texts:
            return sum(len(t.split()) for t in self.texts)
        return sum(len(ids) for ids in self.tokens)

    def stub_request(self) -> StubRequest:
        """The request as the chat wires' fault answers take it."""
        return StubRequest(self.request_id, self.model, (), 0, "", False, fault=self.fault)

    def values(self) -> bytes:
        """Every input's vector, in input order (little-endian float32)."""
        d = self.dimensions
        if self.texts:
            seeds = [b"t" + t.encode("utf-8", "surrogatepass") for t in self.texts]
        else:
            seeds = [b"i" + _ids(ids) for ids in self.tokens]
        return b"".join(vector(s, d) for s in seeds)


def _ids(ids: tuple[int, ...]) -> bytes:
    packed = array("i", ids)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


class Embeddings(Protocol):
    """One protocol's embeddings (what ``server.StubServer`` calls)."""

    def route(self, method: str) -> Reply:
        """A method other than POST on the path: 405."""
        ...

    def parse(self, body: bytes, header: HeaderFn) -> EmbeddingsAsk:
        """The request, validated; raises ``Rejected`` with the protocol's error."""
        ...

    def fault(self, fault: str, ask: EmbeddingsAsk) -> Reply:
        """The answer of a fault before the head (``dialect.BEFORE_HEAD``)."""
        ...

    def failed(self, ask: EmbeddingsAsk) -> Reply:
        """The ``error`` fault: the protocol's server error."""
        ...

    def answer(self, ask: EmbeddingsAsk) -> Reply:
        """The vectors."""
        ...


def _fbs_error(code: codes.ErrorCode, message: str, status: int = 0) -> Reply:
    return Reply(status or code.status, [("content-type", JSON)], error_body(code, message))


class FbsEmbeddings:
    """``EmbeddingRequest`` in, ``EmbeddingResponse`` out (see the module docstring)."""

    def __init__(self) -> None:
        self._chat = FbsWire()

    def route(self, method: str) -> Reply:
        return _fbs_error(codes.METHOD_NOT_ALLOWED, "use POST")

    def parse(self, body: bytes, header: HeaderFn) -> EmbeddingsAsk:
        try:
            req = read_embedding_request(body, max_bytes=STUB_MAX_BODY)
        except MalformedBuffer as exc:
            raise Rejected(_fbs_error(codes.MALFORMED_REQUEST, str(exc))) from None
        model, fault, _ = split_model(req.model_name)
        return EmbeddingsAsk(
            request_id=req.request_id,
            model=model,
            texts=req.texts,
            tokens=req.tokens,
            dimensions=req.dimensions or DEFAULT_DIMENSIONS,
            fault=fault,
        )

    def fault(self, fault: str, ask: EmbeddingsAsk) -> Reply:
        return self._chat.fault(fault, ask.stub_request())

    def failed(self, ask: EmbeddingsAsk) -> Reply:
        return _fbs_error(codes.INTERNAL_ERROR, "stub fault: error", 500)

    def answer(self, ask: EmbeddingsAsk) -> Reply:
        prompt = ask.prompt_tokens
        body = write_embedding_response(
            model=ask.model,
            count=ask.count,
            dimensions=ask.dimensions,
            values=ask.values(),
            prompt_tokens=prompt,
            total_tokens=prompt,
            request_id=ask.request_id,
        )
        headers = [("content-type", FLATBUFFERS), *id_header("x-request-id", ask.request_id)]
        return Reply(200, headers, body)


_enc = msgspec.json.encode
_FORMATS = "'float' and 'base64'"


def _invalid_input(where: str = "input") -> Invalid:
    return Invalid(f"'$.{where}' is invalid. Please check the API reference.", where, None)


def _token_ids(values: list[int], where: str) -> tuple[int, ...]:
    if not values:
        raise _invalid_input(where)
    return tuple(values)


def _inputs(value: str | list[Item]) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """``(texts, tokens)`` of OpenAI's ``input`` (one of the two empty); its
    token ids are the model's (``TokenId``)."""
    if isinstance(value, str):
        if not value:
            raise _invalid_input()
        return (value,), ()
    if not value:
        raise _invalid_input()
    if len(value) > MAX_INPUTS:
        raise Invalid(
            f"'$.input' is too long: at most {MAX_INPUTS} inputs.", "input", "invalid_value"
        )
    first = value[0]
    if isinstance(first, str):
        texts = []
        for j, v in enumerate(value):
            if not isinstance(v, str) or not v:
                raise _invalid_input(f"input[{j}]")
            texts.append(v)
        return tuple(texts), ()
    if isinstance(first, list):
        tokens = []
        for j, v in enumerate(value):
            if not isinstance(v, list):
                raise _invalid_input(f"input[{j}]")
            tokens.append(_token_ids(v, f"input[{j}]"))
        return (), tuple(tokens)
    ids = []
    for j, v in enumerate(value):
        if not isinstance(v, int):
            raise _invalid_input(f"input[{j}]")
        ids.append(v)
    return (), (tuple(ids),)


def _refused(message: str, body: bytes) -> Invalid:
    """What the request's Struct refused (msgspec's ``message``), in OpenAI's words."""
    v = read_validation(message)
    path, reason = v.path, v.reason
    if v.missing:
        return missing(v.where(field=v.missing))
    if path in (("model",), ("input",)) and reason.endswith("got `null`"):
        return missing(str(path[0]))
    if path[:1] == ("input",) and len(path) > 1:
        return _invalid_input(v.where())
    if path == ("encoding_format",) and reason.startswith("Invalid enum value '"):
        span = quoted_span(message)
        fmt = message[span[0] : span[1]] if span else ""
        return Invalid(
            f"Invalid value: '{fmt}'. Supported values are: {_FORMATS}.",
            "encoding_format",
            "invalid_value",
        )
    if path == ("dimensions",) and (" >= " in reason or " <= " in reason):
        dimensions = number_at(body, "dimensions")
        if dimensions < 1:
            return below_minimum("dimensions", dimensions)
        return Invalid(
            f"Invalid 'dimensions': at most {MAX_DIMENSIONS}.", "dimensions", "invalid_value"
        )
    return in_openai_words(message)


def _read_openai(body: bytes, request_id: str) -> EmbeddingsAsk:
    try:
        doc = decode_served(body)
    except msgspec.ValidationError as exc:
        raise _refused(str(exc), body) from None
    except msgspec.DecodeError:
        raise not_json() from None
    if not doc.model:
        raise missing("model")
    texts, tokens = _inputs(doc.input)
    model, fault, _ = split_model(doc.model)
    return EmbeddingsAsk(
        request_id=request_id,
        model=model,
        texts=texts,
        tokens=tokens,
        dimensions=doc.dimensions or DEFAULT_DIMENSIONS,
        fault=fault,
        base64=doc.encoding_format == "base64",
    )


def _floats(values: memoryview) -> list[float]:
    numbers = array("f")
    numbers.frombytes(values)
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers.tolist()


class OpenAIEmbeddings:
    """OpenAI's embeddings API (see the module docstring)."""

    def __init__(self) -> None:
        self._chat = OpenAIWire()

    def route(self, method: str) -> Reply:
        return error_reply(405, f"Method {method} is not allowed for {EMBEDDINGS_PATH}.")

    def parse(self, body: bytes, header: HeaderFn) -> EmbeddingsAsk:
        try:
            return _read_openai(body, header("x-request-id") or "")
        except Invalid as exc:
            reply = error_reply(exc.status, exc.message, param=exc.param, code=exc.vendor_code)
            raise Rejected(reply) from None

    def fault(self, fault: str, ask: EmbeddingsAsk) -> Reply:
        if fault == "reject":
            return error_reply(
                400,
                "This model's maximum context length is 8192 tokens, however you requested "
                "more tokens. Please reduce your prompt. (stub fault: reject)",
                param="input",
                code="context_length_exceeded",
            )
        return self._chat.fault(fault, ask.stub_request())

    def failed(self, ask: EmbeddingsAsk) -> Reply:
        return self._chat.failed(ask.stub_request(), lambda _: None)

    def answer(self, ask: EmbeddingsAsk) -> Reply:
        values = ask.values()
        step = 4 * ask.dimensions
        view = memoryview(values)
        data: list[dict[str, Any]] = []
        for i in range(ask.count):
            piece = view[i * step : (i + 1) * step]
            # msgspec writes a buffer as its base64 text.
            embedding: memoryview | list[float] = piece if ask.base64 else _floats(piece)
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        prompt = ask.prompt_tokens
        doc = {
            "object": "list",
            "data": data,
            "model": ask.model,
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
        }
        headers = [("content-type", JSON), *id_header("x-request-id", ask.request_id)]
        return Reply(200, headers, _enc(doc))


# The embeddings wires, by the name a protocol gives its own
# (``BackendProtocol.embeddings``).
EMBEDDINGS: dict[str, type[Embeddings]] = {"fbs": FbsEmbeddings, "openai": OpenAIEmbeddings}
