"""``POST /v1/embeddings`` through the edge: ``EmbeddingsFlow``, its steps.

The steps it shares with the chat APIs are the shared flow's
(``flow.Flow``), taken as they are: the caller authenticated by OpenAI's
``Authorization: Bearer``, charged its early limits and admitted against the
worker's bounds (``Flow.admit``, ``Flow.holding``); the body read within
``max_body_bytes`` and the model resolved (``Flow.read_body``,
``Flow.resolve``); the caller and the drain watched (``Flow.watch``). Its own:

1. the body decoded and checked (``request.decode``), the caller's model
   allow-list checked, the request written as an ``EmbeddingRequest``
   (``translate.write``);
2. the tenant's ``[[limits]]`` reserved, tokens per minute from the inputs'
   estimate (``translate.estimate``);
3. the buffer sent to the router (``proxy_link.embed``), its refusal
   mapped as chat's is, its answer read whole within ``[edge]
   max_response_bytes`` (``proxy_link.whole``) and verified
   (``wire.embeddings.read_embedding_response``: a buffer that does not
   verify, or whose count is not the inputs', is ``proxy_protocol_error``);
4. rendered in OpenAI's shape (``render``; an answer whose text may pass
   ``render.STREAM_AT`` is streamed a chunk of vectors at a time,
   ``render.pieces``, so that a 5 KB request asking for 1,024 x 8,192 floats
   never makes 160 MB of text at once), the tenant's reservation settled
   to the answer's ``prompt_tokens`` (kept as reserved when it reports none)
   and its usage counted.

Another client API's embeddings (Gemini's ``embedContent`` and
``batchEmbedContents``) take the same steps with its own ``EmbedKind``: its
authentication, decode, writer, estimate and answer (``Job``); OpenAI's is
``OPENAI``.

Errors are ``FlatgateError``s, answered by the app in the route's shape; the
answer carries the tenant's rate headers and the request id. No HTTP server
objects beyond ``Exchange``; no prompt, and no FlatBuffer once the proxy has
it, is held while the answer is read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, Protocol

from flatgate.edge_translator.client_api import ClientApi
from flatgate.edge_translator.embeddings.render import STREAM_AT, pieces, render, size_bound
from flatgate.edge_translator.embeddings.translate import estimate, write
from flatgate.edge_translator.errors import ProxyFailed
from flatgate.edge_translator.flow import Caller, Flow, carrying
from flatgate.edge_translator.openai.endpoint import CHAT
from flatgate.edge_translator.proxy_link import embed, whole
from flatgate.edge_translator.tenancy import FREE, Admitted, with_headers
from flatgate.proxy.apis.openai_embeddings.request import Decoded, decode
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import Exchange
from flatgate.proxy.transport.router import Router
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.embeddings import Embeddings, read_embedding_response
from flatgate.proxy.wire.schema import JSON

__all__ = ["EMBEDDINGS", "OPENAI", "Answer", "EmbedKind", "EmbeddingsFlow", "Job"]

# Its path, and its name in the access log.
EMBEDDINGS = "/v1/embeddings"
_NAME = "openai-embeddings"
_JSON = [("content-type", JSON)]


class Answer(Protocol):
    """How a verified answer is rendered: ``size_bound`` (at most its bytes,
    to decide whether to stream it) and ``pieces`` (its JSON body, in pieces)."""

    def size_bound(self, e: Embeddings) -> int: ...

    def pieces(self, e: Embeddings, model: str, *, whole: bool) -> Iterator[bytes]: ...


class Job(Protocol):
    """A decoded embeddings request: its model, its inputs' count, its
    buffer, its tokens' estimate, and how its answer is rendered."""

    @property
    def model(self) -> str: ...

    @property
    def count(self) -> int: ...

    def write(self, *, provider: int, model_name: str, tenant: str, request_id: str) -> bytes: ...

    def estimate(self) -> int: ...

    def answer(self) -> Answer: ...


class EmbedKind(Protocol):
    """One client API's embeddings: its name in the access log, the API whose
    authentication and ids it takes, and its decode."""

    @property
    def name(self) -> str: ...

    @property
    def api(self) -> ClientApi[Any]: ...

    def decode(self, body: bytes) -> Job: ...


class _OpenAIAnswer:
    __slots__ = ("_base64",)

    def __init__(self, base64: bool) -> None:
        self._base64 = base64

    def size_bound(self, e: Embeddings) -> int:
        return size_bound(e, base64=self._base64)

    def pieces(self, e: Embeddings, model: str, *, whole: bool) -> Iterator[bytes]:
        if whole:
            return iter((render(e, model=model, base64=self._base64),))
        return pieces(e, model=model, base64=self._base64)


class _OpenAIJob:
    __slots__ = ("_d",)

    def __init__(self, d: Decoded) -> None:
        self._d = d

    @property
    def model(self) -> str:
        return self._d.model

    @property
    def count(self) -> int:
        return self._d.count

    def write(self, *, provider: int, model_name: str, tenant: str, request_id: str) -> bytes:
        return write(
            self._d, provider=provider, model_name=model_name, tenant=tenant, request_id=request_id
        )

    def estimate(self) -> int:
        return estimate(self._d)

    def answer(self) -> Answer:
        return _OpenAIAnswer(self._d.base64)


class _OpenAI:
    """OpenAI's ``POST /v1/embeddings``."""

    __slots__ = ()

    name = _NAME
    api = CHAT

    def decode(self, body: bytes) -> Job:
        return _OpenAIJob(decode(body))


OPENAI: EmbedKind = _OpenAI()


class EmbeddingsFlow:
    """The embeddings endpoint's steps, one per worker, over the worker's
    shared ``flow`` and ``router``."""

    __slots__ = ("_flow", "_max", "_metrics", "_router")

    def __init__(self, flow: Flow, router: Router, metrics: Metrics, max_bytes: int) -> None:
        """``max_bytes``: the largest answer read from the proxy."""
        self._flow = flow
        self._router = router
        self._metrics = metrics
        self._max = max_bytes

    async def run(self, ex: Exchange, entry: Entry, kind: EmbedKind = OPENAI) -> int:
        """A request, from its head to its answer; the status sent."""
        entry.api = kind.name
        entry.path = ex.path
        flow = self._flow
        caller = await flow.admit(ex, entry, kind.api)
        return await flow.holding(caller, self._embed(ex, entry, caller, kind))

    async def _embed(self, ex: Exchange, entry: Entry, caller: Caller, kind: EmbedKind) -> int:
        flow = self._flow
        body = await flow.read_body(ex, caller.length)
        started = time.perf_counter()
        entry.bytes_in = len(body)
        d = kind.decode(body)
        del body
        model, _, request_id = flow.resolve(ex, entry, kind.api, d.model)
        identity = caller.identity
        tenancy = flow.tenancy
        tenancy.check(identity, d.model, model.name)
        frame = d.write(
            provider=model.provider_id,
            model_name=model.name,
            tenant=identity.tenant,
            request_id=request_id,
        )
        flow.translate_time.observe(time.perf_counter() - started)
        admitted = (
            await tenancy.admit(
                identity.tenant, model.name, frame, after_caller=True, tokens=d.estimate
            )
            if tenancy.active
            else FREE
        )
        count, answer = d.count, d.answer()
        del d  # the inputs: not held while the answer is awaited
        forwarding = self._forward(
            ex,
            entry,
            (count, answer),
            model.name,
            request_id,
            caller=caller,
            admitted=admitted,
            frame=frame,
        )
        del frame  # held by the step that sends it, and there only until the proxy has it
        return await carrying(forwarding, admitted)

    async def _forward(
        self,
        ex: Exchange,
        entry: Entry,
        shape: tuple[int, Answer],
        model: str,
        request_id: str,
        *,
        caller: Caller,
        admitted: Admitted,
        frame: bytes,
    ) -> int:
        """``frame`` to the proxy, its answer read whole and rendered
        (``shape``: the inputs' count, and how the answer is rendered), the
        caller (gone: 499, for the metrics only) and the drain watched; then
        the tenant's reservation settled."""
        flow = self._flow
        tenancy = flow.tenancy
        watched = flow.watch(ex)
        ending = watched.ending
        usage: Usage | None = None
        answered = False
        reply = with_headers(
            [("x-request-id", request_id), *admitted.headers], caller.early.headers
        )
        try:
            resp = await embed(self._router, frame, request_id, ending, admitted=tenancy.active)
            del frame  # the router has it
            try:
                flow.opened(resp.headers, entry, reply, caller)
                answered = True
                data = await whole(resp, self._max, ending)
            finally:
                await resp.aclose()
            count, rendered = shape
            answer = _read(data, count, self._max)
            if answer.prompt_tokens > 0:
                usage = Usage(answer.prompt_tokens, 0)
                entry.tokens = 0
            else:
                self._metrics.usage_unknown.inc()
            del data  # ``answer`` views it
            entry.first_byte()
            if rendered.size_bound(answer) <= STREAM_AT:
                out = b"".join(rendered.pieces(answer, model, whole=True))
                entry.bytes_out = len(out)
                await ex.respond(200, [*_JSON, *reply], out)
                return 200
            # A piece at a time: never the whole text (nor all its floats) at once.
            sink = await ex.stream(200, [*_JSON, *reply])
            sent = 0
            for piece in rendered.pieces(answer, model, whole=False):
                sent += len(piece)
                await sink.send(piece)
            await sink.close()
            entry.bytes_out = sent
            return 200
        except asyncio.CancelledError as exc:
            return watched.gone(entry, exc)
        finally:
            watched.stop()
            tenancy.settle(caller.identity.tenant, model, admitted, usage, answered)


def _read(data: bytes, count: int, max_bytes: int) -> Embeddings:
    """The proxy's ``EmbeddingResponse``, verified, with one vector per input."""
    try:
        answer = read_embedding_response(data, max_bytes=max_bytes)
    except MalformedBuffer as exc:
        raise ProxyFailed(
            f"The proxy sent a malformed embeddings answer: {exc}",
            code=codes.PROXY_PROTOCOL_ERROR,
        ) from exc
    if answer.count != count:
        raise ProxyFailed(
            f"The proxy answered {answer.count} vectors for {count} inputs.",
            code=codes.PROXY_PROTOCOL_ERROR,
        )
    return answer
