"""The stub's Gemini API: ``/{version}/models/{model}:{method}``.

Endpoints, a ``Wire`` each (``GeminiWire.endpoints``; the stub's server
matches the ``{model}`` segment and gives the wire the path, decoded, and
the query as the ``:path`` and ``:query`` pseudo-headers):

- ``:generateContent`` and ``:streamGenerateContent`` (``?alt=sse``: the
  stub streams server-sent events only, as google-genai asks for them):
  read and written by ``stub_wire`` (its checks, its answers, the thought
  signatures it gives and checks), with the URL's model;
- ``:embedContent`` and ``:batchEmbedContents``: the bodies of
  ``apis.gemini.embed`` (a batch's requests each naming the URL's model, as
  the API requires), answered with ``dialect.vector``'s deterministic
  vectors (``outputDimensionality``, else 3072 as gemini-embedding-001);
  never streamed;
- ``GET /v1beta/models`` (and ``/v1/models``): one model (``dialect.LISTED_MODEL``), the
  readiness probe's answer.

Errors are Google's (``google_error``: ``{"error": {"code", "message",
"status", "details"}}``). The faults (``google_fault``, the ``vertex``
stub's too): ``rate_limit`` a 429 ``RESOURCE_EXHAUSTED`` with a
``RetryInfo`` delay of 2 s (no ``Retry-After`` header, as Google's),
``overloaded`` a 503 ``UNAVAILABLE``, ``auth`` a 403 ``PERMISSION_DENIED``,
``reject`` a 400 ``INVALID_ARGUMENT``, ``fail`` and a whole answer's
``error`` a 500 ``INTERNAL``; a stream's ``error`` an event of Google's error.

Authorization, with ``[stub] api_key`` set: the key as ``x-goog-api-key``;
none is Google's 403 (``PERMISSION_DENIED``: unregistered callers), another
its 400 ``INVALID_ARGUMENT`` with the ``ErrorInfo`` reason
``API_KEY_INVALID``. No I/O.
"""

from __future__ import annotations

import hmac
import re
from typing import Any

import msgspec

from flatgate.proxy.apis.gemini.answer import ErrorBody, ErrorStatus
from flatgate.proxy.apis.gemini.embed import (
    BatchEmbedContentsRequest,
    BatchEmbedContentsResponse,
    ContentEmbedding,
    EmbedContentRequest,
    EmbedContentResponse,
)
from flatgate.proxy.backends.dialect import (
    LISTED_MODEL,
    NO_POSTS,
    Answer,
    Canned,
    HeaderFn,
    Rejected,
    Reply,
    StubRequest,
    deltas_of,
    id_header,
    split_model,
    vector,
)
from flatgate.proxy.backends.gemini.refusal import RETRY_INFO
from flatgate.proxy.backends.gemini.stub_wire import (
    GeminiRendering,
    parse_gemini,
    render_whole,
)
from flatgate.proxy.wire.chunk import frames
from flatgate.proxy.wire.schema import JSON, SSE, FinishReason, Role

__all__ = ["GeminiWire", "google_error", "google_fault", "model_of", "sse_only"]

_enc = msgspec.json.encode
_TARGET = re.compile(r"/v1(?:beta|alpha)?/models/(.+):(\w+)")
_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
          404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
          503: "UNAVAILABLE"}  # fmt: skip
_LISTS = frozenset({"/v1beta/models", "/v1/models"})
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
# gemini-embedding-001's default dimensionality.
_DIMENSIONS = 3072


def google_error(
    status: int, message: str, *, retry: str = "", reason: str = "", name: str = ""
) -> Reply:
    """An error in Google's shape; ``retry``: a ``RetryInfo`` delay (``"2s"``),
    ``reason``: an ``ErrorInfo`` reason; ``name``: the status's (else the
    HTTP status's usual one)."""
    details = []
    if retry:
        details.append(msgspec.Raw(_enc({"@type": RETRY_INFO, "retryDelay": retry})))
    if reason:
        info = {"@type": _ERROR_INFO, "reason": reason, "domain": "googleapis.com"}
        details.append(msgspec.Raw(_enc(info)))
    err = ErrorStatus(status, message, name or _NAMES.get(status, "UNKNOWN"), details or None)
    return Reply(status, [("content-type", JSON)], _enc(ErrorBody(err)))


def google_fault(fault: str) -> Reply:
    """A ``BEFORE_HEAD`` fault's answer (see the module docstring)."""
    if fault == "rate_limit":
        return google_error(
            429,
            "Resource has been exhausted (e.g. check quota). (stub fault: rate_limit)",
            retry="2s",
        )
    if fault == "overloaded":
        return google_error(503, "The model is overloaded. Please try again later.")
    if fault == "auth":
        return google_error(403, "Permission denied on the resource (stub fault: auth)")
    if fault == "reject":
        return google_error(400, "The input token count exceeds the maximum (stub fault: reject)")
    return google_error(500, "An internal error has occurred. (stub fault: fail)")


def model_of(header: HeaderFn) -> tuple[str, str]:
    """The URL's model (with any fault suffix) and method."""
    m = _TARGET.fullmatch(header(":path") or "")
    return (m.group(1), m.group(2)) if m else ("", "")


def _invalid(message: str) -> Rejected:
    return Rejected(google_error(400, message))


def sse_only(header: HeaderFn) -> None:
    """``Rejected`` unless a stream is asked for as server-sent events."""
    if "alt=sse" not in (header(":query") or ""):
        raise _invalid("The stub streams server-sent events only: ask with ?alt=sse")


class GenerateWire:
    """``/{version}/models/{model}:generateContent``."""

    path = "/{version}/models/{model}:generateContent"
    request_id_header = "x-request-id"
    tool_id_prefix = "call_"
    always_streams = False
    posts = NO_POSTS

    def route(self, method: str, path: str) -> Reply:
        if method == "GET" and path in _LISTS:
            model = {"name": f"models/{LISTED_MODEL}", "displayName": LISTED_MODEL,
                     "supportedGenerationMethods": ["generateContent", "embedContent"]}  # fmt: skip
            return Reply(200, [("content-type", JSON)], _enc({"models": [model]}))
        return google_error(404, f"Method {method} {path} was not found.", name="NOT_FOUND")

    def authorize(self, header: HeaderFn, api_key: str) -> Reply | None:
        given = header("x-goog-api-key")
        if given is not None and hmac.compare_digest(given, api_key):
            return None
        if given is None:
            return google_error(
                403,
                "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity to call "
                "this API.",
            )
        return google_error(
            400, "API key not valid. Please pass a valid API key.", reason="API_KEY_INVALID"
        )

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        model, _ = model_of(header)
        return parse_gemini(
            body,
            model=model,
            request_id=header("x-request-id") or "",
            stream=self.always_streams,
        )

    def fault(self, fault: str, req: StubRequest) -> Reply:
        return google_fault(fault)

    def failed(self, req: StubRequest, header: HeaderFn) -> Reply:
        return google_error(500, "An internal error has occurred. (stub fault: error)")

    def _reply(self, req: StubRequest, body: bytes) -> Reply:
        named = id_header(self.request_id_header, req.request_id)
        return Reply(200, [("content-type", JSON), *named], body)

    def complete(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Reply:
        return self._reply(req, render_whole(req, ans))

    def stream(self, req: StubRequest, ans: Answer, header: HeaderFn) -> GeminiRendering:
        return GeminiRendering(req, ans)

    def canned(self, count: int) -> Canned:
        req = StubRequest("canned", "stub-canned", (), 0, "", self.always_streams)
        ans = Answer(tuple(deltas_of("tok " * count)), FinishReason.STOP, frames.Usage(0, count))
        if self.always_streams:
            r = GeminiRendering(req, ans)
            body = r.opening() + b"".join(r.steps()) + r.closing()
            reply = Reply(200, [("content-type", SSE)], body)
        else:
            reply = self.complete(req, ans, _no_header)
        return lambda body, header: reply


def _no_header(name: str) -> str | None:
    return None


class StreamWire(GenerateWire):
    """``/{version}/models/{model}:streamGenerateContent?alt=sse``."""

    path = "/{version}/models/{model}:streamGenerateContent"
    always_streams = True

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        sse_only(header)
        return super().parse(body, header)


_decode_one = msgspec.json.Decoder(EmbedContentRequest).decode
_decode_batch = msgspec.json.Decoder(BatchEmbedContentsRequest).decode


def _texts(one: EmbedContentRequest, where: str) -> str:
    texts = [p.text for p in one.content.parts if p.text is not None]
    if not texts:
        raise _invalid(f"{where}.content: * GenerateContentRequest.content: contains no text")
    return " ".join(texts)


class EmbedWire(GenerateWire):
    """``/{version}/models/{model}:embedContent``: one text's vector."""

    path = "/{version}/models/{model}:embedContent"
    batch = False

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        model, _ = model_of(header)
        name, fault, after = split_model(model)
        try:
            if self.batch:
                asks = _decode_batch(body).requests
                if not asks:
                    raise _invalid("requests: must not be empty")
                for i, ask in enumerate(asks):
                    if ask.model != f"models/{model}":
                        raise _invalid(
                            f"requests[{i}].model: {ask.model!r} is not the URL's models/{model}"
                        )
            else:
                asks = [_decode_one(body)]
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise _invalid(f"Invalid JSON payload received. {exc}") from None
        texts = [_texts(a, f"requests[{i}]") for i, a in enumerate(asks)]
        dimensions = asks[0].output_dimensionality or _DIMENSIONS
        params: dict[str, Any] = {"texts": texts, "dimensions": dimensions}
        return StubRequest(
            header("x-request-id") or "", name, tuple((Role.User, t) for t in texts), 0, "",
            False, fault=fault, fault_after=after, params=params,
        )  # fmt: skip

    def complete(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Reply:
        # Cadence mode's one answer is made without a body: the empty text's.
        dimensions: int = req.params.get("dimensions", _DIMENSIONS)
        texts: list[str] = req.params.get("texts", [""])
        vectors = [
            ContentEmbedding(list(memoryview(vector(b"t" + t.encode(), dimensions)).cast("f")))
            for t in texts
        ]
        if self.batch:
            return self._reply(req, _enc(BatchEmbedContentsResponse(vectors)))
        return self._reply(req, _enc(EmbedContentResponse(vectors[0])))

    def canned(self, count: int) -> Canned:
        """Canned mode answers embeddings from the body too (no echo to can)."""

        def answer(body: bytes, header: HeaderFn) -> Reply:
            try:
                req = self.parse(body, header)
            except Rejected as rejected:
                return rejected.reply
            return self.complete(req, _NO_ANSWER, header)

        return answer


_NO_ANSWER = Answer((), FinishReason.STOP, frames.Usage(0, 0))


class BatchEmbedWire(EmbedWire):
    """``/{version}/models/{model}:batchEmbedContents``: a vector per request."""

    path = "/{version}/models/{model}:batchEmbedContents"
    batch = True


class GeminiWire(GenerateWire):
    """The ``gemini`` protocol's stub: its endpoints (the first is also what
    the server asks of the protocol's wire itself)."""

    def __init__(self) -> None:
        self.endpoints: tuple[GenerateWire, ...] = (
            GenerateWire(),
            StreamWire(),
            EmbedWire(),
            BatchEmbedWire(),
        )
