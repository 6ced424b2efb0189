"""The stub's HTTP handling: routing, API keys, faults, pacing and stats.

``StubServer`` is written against ``plumbing.serve.Exchange`` and one ``Wire``
(``fbs``, ``openai``, ``openai-responses``, ``anthropic``, ``bedrock``,
``gemini`` or ``vertex``, from
``[stub] protocol``): the wire parses and renders, the server decides what
happens when.

- ``GET /healthz`` says ok, and so does ``GET /health`` (vLLM's own probe,
  which a router in front of vLLM, vllm-router, waits on before it
  listens); ``GET /stats`` reports streams started,
  completed, cancelled (the caller went away) and active, frames (writes)
  sent, and the SHA-256 and a few headers of the last request (what a proxy
  forwarded), as JSON. Neither needs the API key.
- A fault comes from the request (fbs metadata, a model suffix) or from
  ``[stub] fault`` (every request). ``BEFORE_HEAD`` faults answer an error
  status; ``stall`` sends no head at all; ``die``, ``hang`` and ``error``
  strike after ``fault_after`` deltas (all of them, when the answer is
  shorter): ``die`` cuts the connection, ``hang`` goes silent with it open,
  ``error`` sends the protocol's mid-stream error and ends the stream. On a
  non-streamed request ``die`` cuts the body short, ``hang`` sends only the
  head, and ``error`` answers the protocol's server error.
- a wire whose API a cloud serves under other paths maps them onto its own
  first (``own_path``: the openai wires read Azure OpenAI's
  ``/openai/deployments/{d}/chat/completions`` as ``/v1/chat/completions``).
- a protocol whose API answers completions at several paths (``bedrock``:
  Converse and InvokeModel, each whole and streamed; ``gemini``: a model's
  methods; ``vertex``: two publishers' methods) gives a wire for each
  (``endpoints``); a wire's ``path`` may hold ``{name}`` segments, which
  match any text (a model id in the path), and such a wire is given the
  request's path and query as the ``:path`` and ``:query`` pseudo-headers.
  A wire whose credential signs the body (``verify``: bedrock's SigV4) has
  it checked once the body is read.
- ``ttft_ms`` delays the first delta (after the head), ``itl_ms`` each next.
- ``[stub] tools`` is the tool mode ``backends.dialect.answer`` answers in
  (``named`` or ``offered``).
- a wire's other ``POST`` endpoints (``Wire.posts``: the Responses API's
  ``/v1/responses/compact``) are answered whole from the body, with no fault.
- ``POST /v1/embeddings`` (``fbs``, ``openai`` and ``openai-responses``:
  ``stub.embeddings``) is answered whole, its faults as a non-streamed chat
  request's (``stall`` and ``hang`` silent, ``die`` cut short, ``error`` the
  protocol's server error), and counted in ``/stats`` as a stream; the
  ``anthropic`` stub has none (404, as Anthropic's API). Neither canned nor
  cadence mode changes it, and ``ttft_ms`` delays it.
- ``[stub] cadence``: every completion request is answered by
  ``stub.cadence.CadenceMode`` (prebuilt frames, one timer per worker; the
  body is not parsed, faults do not apply); ``/stats`` then also reports the
  clock's ``cadence`` figures.

The ``die`` fault needs the ASGI interface (the default): granian's RSGI
leaves a stream open when its handler fails, so no cut reaches the caller.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from flatgate.proxy.backends.dialect import (
    BEFORE_HEAD,
    FAULTS,
    MID_STREAM,
    STUB_MAX_BODY,
    HeaderFn,
    Rejected,
    Reply,
    StubRequest,
    Wire,
    answer,
    id_header,
)
from flatgate.proxy.backends.registry import PROTOCOLS
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.codes import error_body
from flatgate.proxy.plumbing.body import BodyError, BodyPolicy, BodyTooLarge
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.serve import Exchange
from flatgate.proxy.stub.cadence import CadenceMode
from flatgate.proxy.stub.embeddings import EMBEDDINGS, Embeddings, EmbeddingsAsk
from flatgate.proxy.stub.settings import StubSection
from flatgate.proxy.wire.schema import EMBEDDINGS_PATH, JSON

__all__ = ["StubServer"]

# Longest a stalled or hanging stub waits before giving up on its own.
_STALL_SECONDS = 3600.0


@runtime_checkable
class _Endpoints(Protocol):
    """A protocol's stub that answers completions at several paths, a wire
    each (see the module docstring)."""

    endpoints: tuple[Wire, ...]


@runtime_checkable
class _Signed(Protocol):
    """A wire whose credential signs the body: checked once it is read."""

    def verify(self, header: HeaderFn, body: bytes, api_key: str) -> Reply | None: ...


# The health probes answered: flatgate's, and vLLM's (`GET /health`).
_HEALTH = frozenset({"/healthz", "/health"})


class _Endpoint:
    """One wire's completion endpoint, and what the server keeps for it."""

    __slots__ = ("cadence", "canned", "pattern", "signed", "wire")

    def __init__(self, wire: Wire, settings: StubSection, counts: _Stats) -> None:
        self.wire = wire
        # A path with {name} segments is a pattern (each segment any text).
        parts = re.split(r"(\{[^}]*\})", wire.path)
        self.pattern = (
            re.compile("".join(".+" if p.startswith("{") else re.escape(p) for p in parts))
            if len(parts) > 1
            else None
        )
        self.signed = wire if isinstance(wire, _Signed) else None
        self.canned = wire.canned(settings.canned) if settings.canned > 0 else None
        self.cadence = None
        if settings.cadence:
            self.cadence = CadenceMode(
                wire,
                counts,
                ttft_ms=settings.ttft_ms,
                itl_ms=settings.itl_ms,
                tokens=settings.cadence_tokens,
                always_stream=wire.always_streams,
            )

    def header(self, ex: Exchange) -> HeaderFn:
        """The request's headers, with its path and query for a pattern's wire."""
        if self.pattern is None:
            return ex.header

        def header(name: str) -> str | None:
            if name == ":path":
                return ex.path
            if name == ":query":
                return ex.query
            return ex.header(name)

        return header


@runtime_checkable
class _OwnPaths(Protocol):
    """A wire whose API a cloud serves under other paths (the openai wires:
    Azure OpenAI's): it maps a request's path onto its own."""

    def own_path(self, path: str) -> str: ...


class _Faulting(Protocol):
    """A parsed request: the fault it asks for ("": none)."""

    @property
    def fault(self) -> str: ...


_Asked = TypeVar("_Asked", bound=_Faulting)
_SEEN_HEADERS = (
    "x-request-id",
    "authorization",
    "x-api-key",
    "api-key",
    "proxy-authorization",
    "cookie",
    "te",
    "upgrade",
)
# Credentials are reported by digest ("sha256:<hex>"), never echoed.
_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"}
)


def _seen(name: str, value: str | None) -> str | None:
    if value is None or name not in _SECRET_HEADERS:
        return value
    return "sha256:" + hashlib.sha256(value.encode("latin-1")).hexdigest()


class _Stats:
    def __init__(self) -> None:
        self.started = 0
        self.completed = 0
        self.cancelled = 0
        self.active = 0
        self.frames = 0
        # What the last request looked like, for tests of what proxies forward.
        self.last_body_sha256 = ""
        self.last_headers: dict[str, str | None] = {}

    def body(self, protocol: str, extra: Mapping[str, object] | None = None) -> bytes:
        return json.dumps(
            {
                **(extra or {}),
                "protocol": protocol,
                "started": self.started,
                "completed": self.completed,
                "cancelled": self.cancelled,
                "active": self.active,
                "frames": self.frames,
                "last_body_sha256": self.last_body_sha256,
                "last_headers": self.last_headers,
                # The stub leases no pooled builders (ChunkWriter); kept for readers.
                "pool_leased": 0,
            }
        ).encode()


async def _send(ex: Exchange, reply: Reply) -> None:
    await ex.respond(reply.status, reply.headers, reply.body)


async def _body(ex: Exchange) -> bytes | None:
    """The request's body, at most ``STUB_MAX_BODY`` of it; ``None`` once a
    body too large (413), or one that broke off or stopped (400), is answered."""
    try:
        return await ex.body(BodyPolicy(STUB_MAX_BODY))
    except BodyTooLarge as exc:
        code, why = codes.BODY_TOO_LARGE, str(exc)
    except BodyError as exc:
        code, why = codes.MALFORMED_BODY, str(exc)
    await ex.respond(code.status, [("content-type", JSON)], error_body(code, f"stub: {why}"))
    return None


class StubServer:
    """The stub's request handler (see the module docstring)."""

    def __init__(
        self, settings: StubSection, fault: str | None = None, drain: Drain | None = None
    ) -> None:
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}: expected one of {', '.join(FAULTS)}")
        self.settings = settings
        self.fault = fault or ""
        protocol = PROTOCOLS[settings.protocol]
        self.wire: Wire = protocol.stub()
        self._own_path = self.wire.own_path if isinstance(self.wire, _OwnPaths) else None
        # A protocol's own embeddings wire (``bedrock``'s answers at /invoke,
        # ``gemini``'s at :embedContent) has no entry.
        factory = EMBEDDINGS.get(protocol.embeddings or "")
        self.embeddings: Embeddings | None = None if factory is None else factory()
        self.stats = _Stats()
        # Draining: new requests get 503 (the stream in flight runs on until
        # the process is stopped).
        self.drain = drain or Drain(settings.drain_grace_seconds, settings.drain_seconds)
        wires = self.wire.endpoints if isinstance(self.wire, _Endpoints) else (self.wire,)
        endpoints = [_Endpoint(w, settings, self.stats) for w in wires]
        self._exact = {e.wire.path: e for e in endpoints if e.pattern is None}
        self._patterns = [e for e in endpoints if e.pattern is not None]
        self._cadence = [(e.wire.path, e.cadence) for e in endpoints if e.cadence is not None]

    def _endpoint(self, path: str) -> _Endpoint | None:
        found = self._exact.get(path)
        if found is None:
            for e in self._patterns:
                if e.pattern is not None and e.pattern.fullmatch(path):
                    return e
        return found

    async def __call__(self, ex: Exchange) -> None:
        path = ex.path
        if path in _HEALTH:
            await ex.respond(200, [("content-type", "text/plain")], b"ok\n")
            return
        if path == "/stats":
            clocks = {path: mode.clock.stats() for path, mode in self._cadence}
            extra = None
            if clocks:  # one endpoint's figures, or each endpoint's by its path
                extra = {"cadence": next(iter(clocks.values())) if len(clocks) == 1 else clocks}
            stats = self.stats.body(self.settings.protocol, extra)
            await ex.respond(200, [("content-type", JSON)], stats)
            return
        if self.drain.draining:
            refusal = error_body(codes.DRAINING, "the stub is shutting down")
            headers = [("content-type", JSON), ("connection", "close"), ("retry-after", "1")]
            await ex.respond(codes.DRAINING.status, headers, refusal)
            return
        wire = self.wire
        if self._own_path is not None:
            path = self._own_path(path)
        if self.settings.api_key:
            denied = wire.authorize(ex.header, self.settings.api_key)
            if denied is not None:
                await _send(ex, denied)
                return
        if path == EMBEDDINGS_PATH and self.embeddings is not None:
            await self._embeddings(ex, self.embeddings)
            return
        posted = wire.posts.get(path) if ex.method == "POST" else None
        if posted is not None:  # another endpoint, answered whole
            body = await _body(ex)
            if body is not None:
                await _send(ex, posted(body, ex.header))
            return
        endpoint = self._endpoint(path) if ex.method == "POST" else None
        if endpoint is None:
            await _send(ex, wire.route(ex.method, path))
            return
        body = await _body(ex)
        if body is None:
            return
        wire, header = endpoint.wire, endpoint.header(ex)
        if endpoint.signed is not None and self.settings.api_key:
            denied = endpoint.signed.verify(header, body, self.settings.api_key)
            if denied is not None:
                await _send(ex, denied)
                return
        if endpoint.cadence is not None:
            await endpoint.cadence(ex, body)
            return
        if endpoint.canned is not None:
            self.stats.started += 1
            self.stats.completed += 1
            await _send(ex, endpoint.canned(body, header))
            return
        parsed = await self._parsed(ex, body, wire.parse, wire.fault, header)
        if parsed is not None:
            await self._run(ex, self._answer(ex, *parsed, wire, header))

    async def _parsed(
        self,
        ex: Exchange,
        body: bytes,
        parse: Callable[[bytes, HeaderFn], _Asked],
        fault_reply: Callable[[str, _Asked], Reply],
        header: HeaderFn | None = None,
    ) -> tuple[_Asked, str] | None:
        """The request ``parse`` reads and the fault it asks for (or the
        stub's); ``None`` once a refusal or a fault before the head is sent."""
        self.stats.last_body_sha256 = hashlib.sha256(body).hexdigest()
        self.stats.last_headers = {name: _seen(name, ex.header(name)) for name in _SEEN_HEADERS}
        try:
            asked = parse(body, header or ex.header)
        except Rejected as rejected:
            await _send(ex, rejected.reply)
            return None
        fault = asked.fault or self.fault
        if fault in BEFORE_HEAD:
            await _send(ex, fault_reply(fault, asked))
            return None
        return asked, fault

    async def _embeddings(self, ex: Exchange, embeddings: Embeddings) -> None:
        if ex.method != "POST":
            await _send(ex, embeddings.route(ex.method))
            return
        body = await _body(ex)
        if body is None:
            return
        parsed = await self._parsed(ex, body, embeddings.parse, embeddings.fault)
        if parsed is not None:
            await self._run(ex, self._embed(ex, embeddings, *parsed))

    async def _embed(
        self, ex: Exchange, embeddings: Embeddings, ask: EmbeddingsAsk, fault: str
    ) -> None:
        if fault == "stall":
            await asyncio.sleep(_STALL_SECONDS)
            return
        reply = embeddings.failed(ask) if fault == "error" else embeddings.answer(ask)
        await self._whole(ex, reply, fault)

    async def _run(self, ex: Exchange, answering: Coroutine[Any, Any, None]) -> None:
        """``answering``, counted, until it ends or the caller goes away (then cancelled)."""
        self.stats.started += 1
        self.stats.active += 1
        work = asyncio.ensure_future(answering)
        gone = asyncio.ensure_future(ex.disconnected())
        try:
            done, _ = await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                work.result()
                self.stats.completed += 1
            else:
                work.cancel()
                self.stats.cancelled += 1
                await asyncio.gather(work, return_exceptions=True)
        finally:
            gone.cancel()
            self.stats.active -= 1

    async def _answer(
        self, ex: Exchange, req: StubRequest, fault: str, wire: Wire, header: HeaderFn
    ) -> None:
        if fault == "stall":
            await asyncio.sleep(_STALL_SECONDS)
            return
        settings = self.settings
        ans = answer(req, wire.tool_id_prefix, settings.tools)
        if not req.stream:
            if fault == "error":
                reply = wire.failed(req, header)
            else:
                reply = wire.complete(req, ans, header)
            await self._whole(ex, reply, fault)
            return
        stats = self.stats
        rendering = wire.stream(req, ans, header)
        sink = await ex.stream(
            200,
            [
                ("content-type", rendering.content_type),
                *id_header(wire.request_id_header, req.request_id),
            ],
        )
        if settings.ttft_ms:
            await asyncio.sleep(settings.ttft_ms / 1000)
        opening = rendering.opening()
        if opening:
            await sink.send(opening)
            stats.frames += 1
        itl = settings.itl_ms / 1000
        mid = fault in MID_STREAM
        after = req.fault_after
        for i, step in enumerate(rendering.steps()):
            if mid and i == after:
                break
            await sink.send(step)
            stats.frames += 1
            if itl:
                await asyncio.sleep(itl)
        if not mid:
            closing = rendering.closing()
            if closing:
                await sink.send(closing)
                stats.frames += 1
            await sink.close()
            return
        if fault == "error":
            await sink.send(rendering.error())
            stats.frames += 1
            await sink.close()
            return
        # granian's ASGI sends the head with the first body bytes: an empty
        # write sends it, so a fault after 0 deltas still follows a 200.
        await sink.send(b"")
        if fault == "hang":
            await asyncio.sleep(_STALL_SECONDS)
        # "die": end the handler with an error so the server cuts the connection.
        raise ConnectionAbortedError("stub fault: die")

    async def _whole(self, ex: Exchange, reply: Reply, fault: str) -> None:
        if self.settings.ttft_ms:
            await asyncio.sleep(self.settings.ttft_ms / 1000)
        if fault not in ("die", "hang"):
            await _send(ex, reply)
            self.stats.frames += 1
            return
        sink = await ex.stream(reply.status, reply.headers)
        if fault == "hang":
            await sink.send(b"")  # the head only
            await asyncio.sleep(_STALL_SECONDS)
        await sink.send(reply.body[: len(reply.body) // 2])
        raise ConnectionAbortedError("stub fault: die")
