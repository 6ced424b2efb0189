"""What the app calls for the Gemini API: ``GeminiApi``, this API's
``client_api.ClientApi``, on ``POST /{v1beta,v1}/models/{model}:generateContent``
and ``:streamGenerateContent``, and ``CountTokens``, the ``client_api.Local``
the edge answers itself, on ``:countTokens``.

Gemini names the model, and whether the answer streams, in the path, not the
body: the app makes one ``GeminiApi`` per request (``for_path``) holding the
path's model, whether it streams and whether its stream is server-sent events
(``?alt=sse``) or a JSON array (without, sent as ``application/json``:
``ARRAY_HEADERS``); ``GEMINI`` is the one the app's
error answers use. The rest is the shared flow's.

- authentication: the key from ``x-goog-api-key`` (Google's header), else
  the ``key`` query parameter (never logged: the access log writes the path
  alone), else ``Authorization: Bearer``, against the same credentials
  (``identity.Identities``: the ``[[keys]]``, and JWTs where configured);
- the body: ``apis.gemini.request``'s model, read through its strict twins
  (``decoding.strict_twin``; either spelling the model takes, camelCase or
  google-genai's snake_case), every failure an ``InvalidRequest`` naming the
  field (``contents.0.parts.1.inlineData.mimeType``); a member below the top
  that no Struct of the model knows is refused naming it in Google's words
  (``Unknown name "x" at 'contents[0].parts[1]'``), a top-level field the
  model does not know is carried as it was written, a Gemini-dialect extra
  (``decode_generate``: one strict pass, a second only for such a body);
  ``translate``'s writer;
- the answer: ``render``'s, keep-alives ``render.BEAT``; errors in Google's
  shape (``errors``);
- ``CountTokens``: the same decode and translation (``contents``, or a whole
  ``generateContentRequest``), the same model allow-list, then
  ``{"totalTokens": N}`` with ``wire.request.estimate``'s estimate of that
  ``CompletionRequest`` (the estimate the limits reserve with).

No I/O beyond authentication's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import parse_qs

import msgspec

from flatgate.edge_translator.client_api import Asked, Folding, Rendering, Stateless
from flatgate.edge_translator.errors import AuthenticationFailed, InvalidRequest
from flatgate.edge_translator.gemini.errors import error_body, error_event
from flatgate.edge_translator.gemini.render import BEAT, Aggregator, StreamRenderer
from flatgate.edge_translator.gemini.translate import write_gemini
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.ids import new_id
from flatgate.edge_translator.keys import Identity
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.decoding import (
    UNDECODABLE,
    respelled,
    strict_twin,
    validation_text,
    why_undecodable,
)
from flatgate.proxy.apis.gemini.answer import CountTokensResponse
from flatgate.proxy.apis.gemini.request import CountTokensRequest, GenerateContentRequest
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.auth import bearer_token
from flatgate.proxy.plumbing.serve import Exchange
from flatgate.proxy.plumbing.validation import read_validation
from flatgate.proxy.wire.request.estimate import estimate_request
from flatgate.proxy.wire.schema import JSON

__all__ = [
    "ARRAY_HEADERS",
    "COUNT_TOKENS",
    "GEMINI",
    "CountTokens",
    "GeminiApi",
    "GeminiRequest",
    "api_key",
    "decode_count",
    "decode_generate",
    "for_path",
    "invalid_body",
    "known_body",
]

_encode = msgspec.json.Encoder().encode
T = TypeVar("T")
# A stream without alt=sse: one JSON array, sent as it is made.
ARRAY_HEADERS = [("content-type", JSON), ("cache-control", "no-cache")]


def api_key(ex: Exchange) -> str | None:
    """The caller's key: ``x-goog-api-key``, else ``?key=``, else a bearer token."""
    key = ex.header("x-goog-api-key")
    if key is None and "key=" in ex.query:
        found = parse_qs(ex.query).get("key")
        key = found[-1] if found else None
    return key if key is not None else bearer_token(ex.header("authorization"))


def _invalid(exc: msgspec.ValidationError) -> InvalidRequest:
    v = read_validation(validation_text(exc))
    if v.unknown:
        # Google's own words; the member is named in ``param`` as the others are.
        at = v.where(index="[{}]", value="")
        said = f'Invalid JSON payload received. Unknown name "{v.unknown}"'
        said += f" at '{at}': Cannot find field." if at else ": Cannot find field."
        return InvalidRequest(said, param=v.where(index=".{}", value="", field=v.unknown))
    path = v.where(index=".{}", value="", field=v.missing)
    reason = "Field required" if v.missing else v.reason
    return InvalidRequest(f"{path}: {reason}" if path else reason, param=path or None)


def _not_json(why: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid JSON payload received: {why}.", code=codes.INVALID_JSON)


def invalid_body(decode: Callable[[bytes], T], body: bytes) -> T:
    """``decode(body)``; every failure an ``InvalidRequest`` naming the field."""
    try:
        return decode(body)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    except msgspec.DecodeError as exc:
        raise _not_json(str(exc)) from None
    except UNDECODABLE as exc:
        raise _not_json(why_undecodable(exc)) from None


# The strict twins of the one model's Structs: a member no Struct knows
# fails the decode, naming it. ``_strict``: anywhere; ``_nested``: below the
# top only (a top-level one is carried, as the other edges carry theirs).
_twins: dict[type, type] = {}
_strict = msgspec.json.Decoder(strict_twin(GenerateContentRequest, _twins)).decode
_nested = msgspec.json.Decoder(strict_twin(GenerateContentRequest, _twins, here=False)).decode
_strict_count = msgspec.json.Decoder(strict_twin(CountTokensRequest, _twins)).decode
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_tree = msgspec.json.Decoder().decode
_KNOWN = frozenset(f.encode_name for f in msgspec.structs.fields(GenerateContentRequest))


def known_body(decode: Callable[[bytes], T], model: type, body: bytes) -> T:
    """``decode(body)`` (a decoder of ``model``'s strict twin), a body with a
    member in snake_case it does not read respelled once (``respelled``);
    every failure an ``InvalidRequest`` naming the field."""
    try:
        return decode(body)
    except msgspec.ValidationError as exc:
        if "_" in read_validation(str(exc)).unknown:
            return invalid_body(decode, _respell(body, model))
    except (msgspec.DecodeError, *UNDECODABLE):
        pass
    return invalid_body(decode, body)  # raises, worded


def decode_generate(body: bytes) -> tuple[GenerateContentRequest, dict[str, msgspec.Raw]]:
    """A generateContent body, and its top-level fields the model does not
    know (as written: carried as extras); ``InvalidRequest`` naming the field
    when it is not one, or when a member below the top is one no Struct of
    the model knows (Google's own servers refuse it too). A member spelled by
    its protobuf name (``inline_data``; Google's servers take either) is read
    as its camelCase one (``respelled``). One pass for a body of known
    fields; a second for one with an unknown top-level field; a respelling
    first for one with a member in snake_case the model does not read so."""
    return _generate(body, respell=True)


def _respell(body: bytes, model: type) -> bytes:
    return _encode(respelled(invalid_body(_tree, body), model))


def _generate(
    body: bytes, *, respell: bool
) -> tuple[GenerateContentRequest, dict[str, msgspec.Raw]]:
    try:
        return _strict(body), {}
    except msgspec.ValidationError as exc:
        v = read_validation(str(exc))
        if respell and "_" in v.unknown:
            return _generate(_respell(body, GenerateContentRequest), respell=False)
        if not v.unknown or v.path:
            raise _invalid(exc) from None
    except (msgspec.DecodeError, *UNDECODABLE):
        pass  # worded by the next pass
    try:
        req = _nested(body)
    except msgspec.ValidationError as exc:
        if respell and "_" in read_validation(str(exc)).unknown:
            return _generate(_respell(body, GenerateContentRequest), respell=False)
        raise _invalid(exc) from None
    except (msgspec.DecodeError, *UNDECODABLE):
        req = invalid_body(_nested, body)  # raises, worded
    unknown = {k: v for k, v in invalid_body(_fields, body).items() if k not in _KNOWN}
    if respell and any("_" in k for k in unknown):
        return _generate(_respell(body, GenerateContentRequest), respell=False)
    return req, unknown


def decode_count(body: bytes) -> CountTokensRequest:
    """A countTokens body: ``contents``, or a whole ``generateContentRequest``;
    a body with other top-level members (``systemInstruction``, ``tools``,
    ``generationConfig`` beside its ``contents``) is read as the request to
    count, so that what it counts is all of it. Members known at any depth,
    either spelling, as ``decode_generate``'s; ``InvalidRequest`` naming the
    field when it is not one."""
    return _count(body, respell=True)


def _count(body: bytes, *, respell: bool) -> CountTokensRequest:
    try:
        return _strict_count(body)
    except msgspec.ValidationError as exc:
        v = read_validation(str(exc))
        if respell and "_" in v.unknown:
            return _count(_respell(body, CountTokensRequest), respell=False)
        if not v.unknown or v.path:
            raise _invalid(exc) from None
    except (msgspec.DecodeError, *UNDECODABLE):
        invalid_body(_strict_count, body)  # raises, worded
    req, _ = decode_generate(body)
    return CountTokensRequest(generate_content_request=req)


class GeminiRequest:
    """A decoded request, its unknown top-level fields and the path's model
    (what the flow reads of it)."""

    __slots__ = ("body", "estimate", "model", "unknown")

    def __init__(
        self, body: GenerateContentRequest, model: str, unknown: dict[str, msgspec.Raw]
    ) -> None:
        self.body = body
        self.model = model
        self.unknown = unknown
        self.estimate = 0


def _model_of(path_model: str) -> str:
    if path_model.startswith("tunedModels/"):
        raise InvalidRequest(
            f"model: flatgate serves its configured models, not tuned ones ('{path_model}')",
            param="model",
        )
    return path_model.removeprefix("models/")


class GeminiApi(Stateless):
    """The Gemini API's parts of the shared flow (``ClientApi``), for one
    path's model and answer form."""

    __slots__ = ("_model", "_sse", "_stream")

    name = "gemini"
    path = "/v1beta/models/{model}:generateContent"
    items_param = "contents"
    beat = BEAT
    carried_headers = ()

    def __init__(self, model: str = "", *, stream: bool = False, sse: bool = False) -> None:
        self._model = model
        self._stream = stream
        self._sse = sse

    async def authenticate(self, ex: Exchange, identities: Identities) -> Identity:
        """The caller, from ``x-goog-api-key``, ``?key=`` or ``Authorization: Bearer``."""
        token = api_key(ex)
        if token is None and not identities.open:
            raise AuthenticationFailed(
                "Method doesn't allow unregistered callers: send an API key "
                "(x-goog-api-key, ?key= or Authorization: Bearer).",
                code=codes.MISSING_API_KEY,
            )
        return identities.cached_token(token) or await identities.verify_token(token)

    def decode(self, body: bytes) -> GeminiRequest:
        req, unknown = decode_generate(body)
        return GeminiRequest(req, _model_of(self._model), unknown)

    def new_id(self) -> str:
        return new_id("")

    def write(
        self,
        req: GeminiRequest,
        model: ModelConfig,
        *,
        tenant: str,
        request_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        return write_gemini(
            req.body,
            provider=model.provider_id,
            model_name=model.name,
            stream=self._stream,
            tenant=tenant,
            request_id=request_id,
            unknown=req.unknown,
        )

    def asked(self, req: GeminiRequest, completion_id: str, request_id: str, model: str) -> Asked:
        return Asked(
            self,
            completion_id,
            request_id,
            model,
            self._stream,
            extra=self._sse,
            stream_headers=None if self._sse else ARRAY_HEADERS,
        )

    def renderer(self, asked: Asked, created: int) -> Rendering:
        return StreamRenderer(
            response_id=asked.completion_id, model=asked.model, sse=bool(asked.extra)
        )

    def aggregator(self, asked: Asked, created: int) -> Folding:
        return Aggregator(response_id=asked.completion_id, model=asked.model)

    def error_answer(self, err: FlatgateError, request_id: str | None) -> tuple[int, bytes]:
        return error_body(err, request_id)

    def error_event(self, err: FlatgateError) -> bytes:
        if self._sse:
            return error_event(err)
        return b"[" + error_body(err)[1] + b"]"


class _Counted:
    __slots__ = ("body", "model")

    def __init__(self, body: GenerateContentRequest, model: str) -> None:
        self.body = body
        self.model = model


class CountTokens:
    """``:countTokens``: an estimate, answered at the edge (``Local``)."""

    __slots__ = ("_model",)

    path = "/v1beta/models/{model}:countTokens"

    def __init__(self, model: str = "") -> None:
        self._model = model

    def decode(self, body: bytes) -> _Counted:
        req = decode_count(body)
        whole = req.generate_content_request
        if whole is not None and req.contents is not None:
            raise InvalidRequest(
                "contents: give contents or generateContentRequest, not both",
                param="contents",
            )
        asked = whole if whole is not None else GenerateContentRequest(req.contents or [])
        return _Counted(asked, _model_of(self._model))

    async def answer(self, req: _Counted, model: ModelConfig, *, tenant: str) -> bytes:
        frame = write_gemini(req.body, provider=model.provider_id, model_name=model.name)
        return _encode(CountTokensResponse(total_tokens=estimate_request(frame)))


def for_path(model: str, verb: str, query: str) -> GeminiApi:
    """The API for one request: the path's model, and its answer's form."""
    stream = verb == "streamGenerateContent"
    sse = stream and "alt" in query and parse_qs(query).get("alt", [""])[-1] == "sse"
    return GeminiApi(model, stream=stream, sse=sse)


GEMINI = GeminiApi()
COUNT_TOKENS = CountTokens()
