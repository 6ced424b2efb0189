"""The stub's Bedrock protocol: Bedrock Runtime's Converse and InvokeModel.

Four endpoints, each a ``Wire`` of its own path (``BedrockWire.endpoints``:
the stub's server matches a path's ``{model}`` segment, which holds the
model id, and gives the wire the path, decoded, as the ``:path``
pseudo-header):

- ``POST /model/{model}/converse`` and ``/converse-stream``: Converse, read
  and written by ``converse_stub`` (its checks, its answers and event-stream
  messages);
- ``POST /model/{model}/invoke`` and ``/invoke-with-response-stream``: for
  Anthropic's models, the Messages body in Bedrock's envelope: it must carry
  ``anthropic_version`` (``bedrock-2023-05-31``, or a dated version: the
  anthropic SDK's ``AnthropicBedrock`` sends its own), may carry ``anthropic_beta``
  (a list: the betas the Messages API would read from its header), and must
  not carry ``model`` or ``stream`` (Bedrock's "extraneous key" 400); the
  rest is read by the ``anthropic`` stub's own parsing
  (``stub_request.decode_messages_request``, ``to_stub_request``), with the
  URL's model, and answered by its own rendering (``AnthropicWire``): the
  ``message`` whole, or each of its stream's events as a ``chunk`` event
  whose payload is ``{"bytes": base64(the event's JSON)}`` (``ping`` left
  out, ``message_stop`` with Bedrock's ``amazon-bedrock-invocationMetrics``);
- ``/invoke`` for a Titan Text Embeddings or Cohere Embed model id: their
  bodies as Bedrock checks them (``inputText``, ``dimensions`` 256, 512 or
  1024, ``normalize``, ``embeddingTypes``; ``texts`` (1 to 96),
  ``input_type``, ``truncate``, ``embedding_types``, ``output_dimension``),
  answered with ``dialect.vector``'s deterministic vectors (Titan
  ``embedding``, ``embeddingsByType`` and ``inputTextTokenCount``; Cohere
  ``embeddings_floats``, or ``embeddings_by_type`` when ``embedding_types`` is
  given). They do not stream: the stream endpoint refuses them.

Errors are Bedrock's: ``{"message"}`` with ``x-amzn-errortype``
(``converse_stub.error_reply``). The faults: ``rate_limit`` a 429
``ThrottlingException`` (no ``Retry-After``, as Bedrock sends none), ``overloaded`` a
503 ``ServiceUnavailableException``, ``auth`` a 403
``UnrecognizedClientException``, ``reject`` a 400 ``ValidationException``,
``fail`` and a whole answer's ``error`` a 500 ``InternalServerException``, a
stream's ``error`` a ``modelStreamErrorException`` message.

Authorization, with ``[stub] api_key`` set: ``Authorization: Bearer <key>``
(a Bedrock API key), or a SigV4 signature made with the secret access key
``<key>`` (any access key id, any region; service ``bedrock``), checked by
botocore's signer over the body once it is read (``verify``: ``auth.verify``);
a missing credential is a 403 ``MissingAuthenticationTokenException``, a
wrong key ``UnrecognizedClientException``, a wrong signature
``InvalidSignatureException``. No I/O.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import msgspec

from flatgate.proxy.apis.anthropic_messages.extras import split_betas
from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.anthropic.stub_request import (
    Invalid,
    decode_messages_request,
    to_stub_request,
)
from flatgate.proxy.backends.bedrock.auth import verify
from flatgate.proxy.backends.bedrock.converse_stub import (
    ConverseRendering,
    error_reply,
    parse_converse,
    render_whole,
)
from flatgate.proxy.backends.bedrock.embeddings import TITAN, family
from flatgate.proxy.backends.bedrock.eventstream import (
    CONTENT_TYPE,
    encode_frame,
    encode_headers,
)
from flatgate.proxy.backends.dialect import (
    NO_POSTS,
    Answer,
    Canned,
    HeaderFn,
    Rejected,
    Rendering,
    Reply,
    StubRequest,
    deltas_of,
    id_header,
    split_model,
    vector,
)
from flatgate.proxy.wire.chunk import frames
from flatgate.proxy.wire.schema import JSON, FinishReason, Role

__all__ = ["ANTHROPIC_VERSION", "MODEL_PATH", "BedrockWire"]

# The envelope's version AWS documents; a dated Messages API version (what
# the anthropic SDK's AnthropicBedrock sends: its own API version) is taken too.
ANTHROPIC_VERSION = "bedrock-2023-05-31"
_DATED = re.compile(r"\d{4}-\d{2}-\d{2}")
# The endpoints' path, by operation ({model}: the model id, escaped).
MODEL_PATH = "/model/{model}/"
_TARGET = re.compile(r"/model/(.+)/([a-z-]+)")
_enc = msgspec.json.encode
_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_CHUNK = encode_headers(
    [(":event-type", "chunk"), (":content-type", JSON), (":message-type", "event")]
)
_STREAM_ERROR = encode_headers(
    [
        (":exception-type", "modelStreamErrorException"),
        (":content-type", JSON),
        (":message-type", "exception"),
    ]
)
_MESSAGE_STOP = b'{"type":"message_stop"}'
_TITAN_DIMENSIONS = (256, 512, 1024)


def _invalid(message: str) -> Rejected:
    return Rejected(error_reply(400, "ValidationException", message))


def _extraneous(key: str) -> Rejected:
    return _invalid(
        f"Malformed input request: #: extraneous key [{key}] is not permitted, "
        "please reformat your input and try again."
    )


def _model(header: HeaderFn) -> str:
    """The URL's model id (the server gives the path decoded), with any
    fault suffix."""
    m = _TARGET.fullmatch(header(":path") or "")
    return m.group(1) if m else ""


def _request_id(header: HeaderFn) -> str:
    return header("x-request-id") or ""


class _Bedrock:
    """What every endpoint shares: errors, faults, authorization."""

    path = ""
    request_id_header = "x-amzn-requestid"
    tool_id_prefix = "tooluse_"
    always_streams = False
    posts = NO_POSTS

    def route(self, method: str, path: str) -> Reply:
        if _TARGET.fullmatch(path):
            return error_reply(405, "UnknownOperationException", f"{method} is not allowed")
        return error_reply(404, "UnknownOperationException", "Unknown operation")

    def authorize(self, header: HeaderFn, api_key: str) -> Reply | None:
        given = (header("authorization") or "").strip()
        scheme, _, token = given.partition(" ")
        if scheme == "AWS4-HMAC-SHA256":
            return None  # checked with the body (``verify``)
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip(), api_key):
            return None
        if not given:
            return error_reply(
                403, "MissingAuthenticationTokenException", "Missing Authentication Token"
            )
        return error_reply(
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        )

    def verify(self, header: HeaderFn, body: bytes, api_key: str) -> Reply | None:
        """A SigV4 signature checked over the body (``None``: good, or a key).
        The server gives the path decoded, and a signature covers it as it
        was sent: the model id as the clients escape it is tried, botocore's
        way (every character but ``-_.~``) and the anthropic SDKs' (Python's,
        and Claude Code's, keep ``:``)."""
        if not (header("authorization") or "").startswith("AWS4-HMAC-SHA256"):
            return None
        path = header(":path") or ""
        query = header(":query")
        m = _TARGET.fullmatch(path)
        tried = [path]
        if m is not None:
            escaped = (quote(m.group(1), safe=safe) for safe in ("", ":;"))
            tried = list(dict.fromkeys(f"/model/{e}/{m.group(2)}" for e in escaped))
        why = ""
        for sent in tried:
            url = f"http://{header('host') or ''}{sent}" + (f"?{query}" if query else "")
            why = verify("POST", url, header, body, api_key)
            if not why:
                return None
        return error_reply(403, "InvalidSignatureException", why)

    def fault(self, fault: str, req: StubRequest) -> Reply:
        if fault == "rate_limit":
            # As Bedrock's: no Retry-After (the gateway tells its caller its cooldown).
            return error_reply(
                429, "ThrottlingException", "Too many requests, please wait before trying again."
            )
        if fault == "overloaded":
            return error_reply(
                503, "ServiceUnavailableException", "Bedrock is unable to process your request."
            )
        if fault == "auth":
            return error_reply(
                403,
                "UnrecognizedClientException",
                "The security token included in the request is invalid. (stub fault: auth)",
            )
        if fault == "reject":
            return _invalid("Input is too long for requested model. (stub fault: reject)").reply
        return error_reply(
            500, "InternalServerException", "Internal server error (stub fault: fail)"
        )

    def failed(self, req: StubRequest, header: HeaderFn) -> Reply:
        return error_reply(
            500, "InternalServerException", "Internal server error (stub fault: error)"
        )

    def _reply(self, req: StubRequest, body: bytes, usage: frames.Usage | None = None) -> Reply:
        headers = [("content-type", JSON), *id_header(self.request_id_header, req.request_id)]
        if usage is not None:
            headers += [
                ("x-amzn-bedrock-input-token-count", str(usage.prompt_tokens)),
                ("x-amzn-bedrock-output-token-count", str(usage.completion_tokens)),
            ]
        return Reply(200, headers, body)

    def complete(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Reply:
        raise NotImplementedError

    def stream(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Rendering:
        raise NotImplementedError

    def canned(self, count: int) -> Canned:
        req = StubRequest("canned", "stub-canned", (), 0, "", self.always_streams)
        ans = Answer(tuple(deltas_of("tok " * count)), FinishReason.STOP, frames.Usage(0, count))
        if self.always_streams:
            r = self.stream(req, ans, _no_header)
            body = r.opening() + b"".join(r.steps()) + r.closing()
            reply = Reply(200, [("content-type", CONTENT_TYPE)], body)
        else:
            reply = self.complete(req, ans, _no_header)
        return lambda body, header: reply


def _no_header(name: str) -> str | None:
    return None


# -- Converse ---------------------------------------------------------------


class ConverseWire(_Bedrock):
    """``/model/{model}/converse``."""

    path = MODEL_PATH + "converse"

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        return parse_converse(
            body,
            model=_model(header),
            request_id=_request_id(header),
            stream=self.always_streams,
        )

    def complete(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Reply:
        return self._reply(req, render_whole(req, ans))

    def stream(self, req: StubRequest, ans: Answer, header: HeaderFn) -> ConverseRendering:
        return ConverseRendering(req, ans)


class ConverseStreamWire(ConverseWire):
    """``/model/{model}/converse-stream``."""

    path = MODEL_PATH + "converse-stream"
    always_streams = True


# -- InvokeModel -------------------------------------------------------------


class _TitanIn(msgspec.Struct, forbid_unknown_fields=True):
    inputText: str
    dimensions: int = 1024
    normalize: bool = True
    embeddingTypes: list[str] | None = None


class _CohereIn(msgspec.Struct, forbid_unknown_fields=True):
    texts: list[str]
    input_type: str
    truncate: str | None = None
    embedding_types: list[str] | None = None
    output_dimension: int | None = None


_decode_titan = msgspec.json.Decoder(_TitanIn).decode
_decode_cohere = msgspec.json.Decoder(_CohereIn).decode
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]+)`")


def _embeddings(body: bytes, model: str, kind: str, request_id: str) -> StubRequest:
    """An embeddings body as Bedrock checks it, read into the request the
    answer is written from (its inputs and dimensions in ``params``)."""
    try:
        if kind == TITAN:
            titan = _decode_titan(body)
            if titan.dimensions not in _TITAN_DIMENSIONS:
                raise _invalid(
                    f"Malformed input request: #/dimensions: {titan.dimensions} is not a "
                    "valid enum value, please reformat your input and try again."
                )
            texts, dimensions, by_type = [titan.inputText], titan.dimensions, False
        else:
            cohere = _decode_cohere(body)
            if not 1 <= len(cohere.texts) <= 96:
                raise _invalid("Malformed input request: #/texts: expected 1 to 96 texts")
            texts, by_type = cohere.texts, cohere.embedding_types is not None
            dimensions = cohere.output_dimension or 1024
    except msgspec.ValidationError as exc:
        unknown = _UNKNOWN.search(str(exc))
        if unknown:
            raise _extraneous(unknown.group(1)) from None
        raise _invalid(f"Malformed input request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise _invalid(f"Malformed input request: {exc}") from None
    name, fault, after = split_model(model)
    return StubRequest(
        request_id,
        name,
        ((Role.User, " ".join(texts)),),
        0,
        "",
        False,
        fault=fault,
        fault_after=after,
        params={"embed": kind, "texts": texts, "dimensions": dimensions, "by_type": by_type},
    )


def _floats(data: bytes) -> list[float]:
    return list(memoryview(data).cast("f"))


def _embedded(req: StubRequest) -> bytes:
    """The vectors of an embeddings request, in its family's answer."""
    params = req.params
    dimensions: int = params["dimensions"]
    texts: list[str] = params["texts"]
    vectors = [
        _floats(vector(b"t" + t.encode("utf-8", "surrogatepass"), dimensions)) for t in texts
    ]
    if params["embed"] == TITAN:
        return _enc(
            {
                "embedding": vectors[0],
                "embeddingsByType": {"float": vectors[0]},
                "inputTextTokenCount": req.prompt_tokens,
            }
        )
    if params["by_type"]:
        return _enc(
            {"id": req.request_id or "stub", "embeddings": {"float": vectors},
             "response_type": "embeddings_by_type", "texts": texts}
        )  # fmt: skip
    return _enc(
        {"id": req.request_id or "stub", "embeddings": vectors,
         "response_type": "embeddings_floats", "texts": texts}
    )  # fmt: skip


def _messages(body: bytes, header: HeaderFn, model: str, stream: bool) -> StubRequest:
    """An Anthropic model's envelope (see the module docstring)."""
    try:
        fields = _members(body)
    except msgspec.DecodeError:
        raise _invalid(
            "Malformed input request, please reformat your input and try again."
        ) from None
    for key in ("model", "stream"):
        if key in fields:
            raise _extraneous(key)
    version = fields.pop("anthropic_version", None)
    if version is None:
        raise _invalid(
            "Malformed input request: #: required key [anthropic_version] not found, "
            "please reformat your input and try again."
        )
    try:
        named = msgspec.json.decode(version, type=str)
    except msgspec.ValidationError:
        named = ""
    if named != ANTHROPIC_VERSION and not _DATED.fullmatch(named):
        raise _invalid(f"Invalid API version: {bytes(version).decode(errors='replace')}")
    betas: list[str] = []
    if "anthropic_beta" in fields:
        try:
            betas = msgspec.json.decode(fields.pop("anthropic_beta"), type=list[str])
        except msgspec.ValidationError:
            raise _invalid(
                "Malformed input request: #/anthropic_beta: expected a list of strings"
            ) from None
    try:
        parsed = decode_messages_request(_enc({"model": model, **fields}))
        req = to_stub_request(parsed, _request_id(header), ",".join(split_betas(",".join(betas))))
    except Invalid as exc:
        raise _invalid(str(exc)) from None
    return dataclasses.replace(req, stream=stream)


def _chunks(sse: bytes, ans: Answer) -> bytes:
    """The anthropic stub's server-sent events as InvokeModelWithResponseStream's
    ``chunk`` messages (``ping`` left out)."""
    out: list[bytes] = []
    for event in sse.split(b"\n\n"):
        if not event or event.startswith(b"event: ping"):
            continue
        data = event[event.index(b"data: ") + 6 :]
        if data == _MESSAGE_STOP:
            u = ans.usage
            metrics = {
                "inputTokenCount": u.prompt_tokens,
                "outputTokenCount": u.completion_tokens,
                "invocationLatency": 0,
                "firstByteLatency": 0,
            }
            data = _enc({"type": "message_stop", "amazon-bedrock-invocationMetrics": metrics})
        out.append(encode_frame(_CHUNK, _enc({"bytes": base64.b64encode(data).decode()})))
    return b"".join(out)


class _ChunkRendering:
    """The anthropic stub's rendering, each write's events as chunks."""

    content_type = CONTENT_TYPE

    __slots__ = ("_answer", "_sse")

    def __init__(self, sse: Any, ans: Answer) -> None:
        self._sse = sse
        self._answer = ans

    def opening(self) -> bytes:
        return _chunks(self._sse.opening(), self._answer)

    def steps(self) -> Iterator[bytes]:
        ans = self._answer
        for step in self._sse.steps():
            yield _chunks(step, ans)

    def closing(self) -> bytes:
        return _chunks(self._sse.closing(), self._answer)

    def error(self) -> bytes:
        payload = {"message": "The stub's model failed mid-stream (the error fault)."}
        return encode_frame(_STREAM_ERROR, _enc(payload))


class InvokeWire(_Bedrock):
    """``/model/{model}/invoke``: Anthropic's models, and embeddings."""

    path = MODEL_PATH + "invoke"

    def __init__(self) -> None:
        self._anthropic = AnthropicWire()

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        model = _model(header)
        kind = family(split_model(model)[0])
        if kind:
            if self.always_streams:
                raise _invalid("The model is unsupported for streaming.")
            return _embeddings(body, model, kind, _request_id(header))
        return _messages(body, header, model, self.always_streams)

    def complete(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Reply:
        if "embed" in req.params:
            return self._reply(req, _embedded(req), frames.Usage(req.prompt_tokens, 0))
        message = self._anthropic.complete(req, ans, header)
        return self._reply(req, message.body, ans.usage)

    def stream(self, req: StubRequest, ans: Answer, header: HeaderFn) -> _ChunkRendering:
        return _ChunkRendering(self._anthropic.stream(req, ans, header), ans)


class InvokeStreamWire(InvokeWire):
    """``/model/{model}/invoke-with-response-stream``."""

    path = MODEL_PATH + "invoke-with-response-stream"
    always_streams = True


class BedrockWire(ConverseWire):
    """The ``bedrock`` protocol's stub: its four endpoints (the first, Converse,
    is also what the server asks of the protocol's wire itself)."""

    def __init__(self) -> None:
        self.endpoints = (ConverseWire(), ConverseStreamWire(), InvokeWire(), InvokeStreamWire())
