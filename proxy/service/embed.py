"""From a routed embeddings request to its answer: the ``EmbeddingResponse`` bytes.

``Embedder.embed`` takes the caller's ``EmbeddingRequest`` bytes and their
route target and runs the dispatcher's one loop (``Dispatcher.first``: the
balancer's order, fallbacks last, ``max_attempts``, backends'
``max_outstanding`` and cooldowns, every refusal before the answer read as
for completions), with two steps of its own:

- ``prepare``: a backend that serves no embeddings (its protocol has none,
  as ``anthropic``'s, or its ``serves`` leaves them out: ``serving``) is
  skipped; the others are sent what their adapter's ``prepare_embeddings``
  writes (an ``fbs`` backend the untouched bytes, at ``/v1/embeddings``). A
  route with no backend that serves them is a 400 ``embeddings_unsupported``
  naming it, and nothing is sent;
- ``take``: the 200 answer's whole body is read, at most
  ``max_response_bytes`` of it (a larger one, by its ``Content-Length`` or as
  it arrives, is a 502 ``backend_response_too_large``, and is not read on),
  and made one ``EmbeddingResponse`` by the adapter's ``embeddings_answer``
  (an ``fbs`` backend's relayed as it came, verified; a body that is none, a
  502 ``backend_protocol_error``). A body that breaks off before its end is
  the backend's failure: it is cooled down and the next tried, nothing
  having reached the caller.

The request is verified and decoded once, on first use (``EmbeddingRequest``:
the JSON adapters', the tenant's, the limits' estimate), however many
backends are tried; an ``fbs`` backend alone needs none of it.

Counts every answer in ``flatgate_requests_total`` by route and status, as
completions are, and in ``flatgate_embeddings_requests_total`` (the same
labels) on its own (``count``). Shared by the HTTP surface
(``service.embed_route``) and the in-process router (``service.inprocess``);
knows nothing of HTTP servers. Refuses with a ``service.errors.ProxyError``;
a request buffer that cannot be read is the wire layer's ``MalformedBuffer``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from flatgate.proxy.backends.base import Inbound, Outbound
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.instruments import CountFamily
from flatgate.proxy.service.balancer import Backend, RouteTarget
from flatgate.proxy.service.dispatch import Attempt, Dispatcher
from flatgate.proxy.service.errors import ProxyError
from flatgate.proxy.transport.base import Response, ResponseTooLarge, read_whole
from flatgate.proxy.wire.embeddings import (
    EmbeddingInput,
    prompt_tokens_of,
    read_embedding_request,
)

__all__ = ["Embedded", "Embedder", "EmbeddingRequestOnce"]


class EmbeddingRequestOnce:
    """The ``EmbeddingRequest`` verified and decoded, once, on first use
    (``read_embedding_request``: ``MalformedBuffer`` for a bad buffer);
    ``max_bytes`` bounds the buffer and what it may expand to."""

    __slots__ = ("_body", "_max_bytes", "_request")

    def __init__(self, body: bytes, max_bytes: int) -> None:
        self._body = body
        self._max_bytes = max_bytes
        self._request: EmbeddingInput | None = None

    def __call__(self) -> EmbeddingInput:
        if self._request is None:
            self._request = read_embedding_request(self._body, max_bytes=self._max_bytes)
        return self._request


@dataclass(frozen=True, slots=True)
class Embedded:
    """An embeddings answer: the backend that gave it and the one
    ``EmbeddingResponse`` buffer the caller is sent."""

    backend: str
    body: bytes

    def prompt_tokens(self) -> int | None:
        """The answer's ``prompt_tokens`` (``None``: the backend reported
        none), read in place: the adapter made the buffer, or verified it."""
        return prompt_tokens_of(self.body) or None


class Embedder:
    """Embeddings requests to a route's backends; one per worker, beside the
    completions' ``Dispatcher`` whose loop, balancer and metrics it shares."""

    def __init__(self, dispatcher: Dispatcher, max_response_bytes: int) -> None:
        self.dispatcher = dispatcher
        self.metrics = dispatcher.metrics
        self.max_response_bytes = max_response_bytes
        # The backends that serve embeddings, by name (their adapter's
        # protocol has them and their ``serves`` says so): set by the
        # service, at each reload.
        self.serving: frozenset[str] = frozenset()
        self._requests = CountFamily(
            f"{self.metrics.prefix}_embeddings_requests",
            f"Embeddings requests answered (counted in {self.metrics.prefix}_requests too), "
            "by route and HTTP status.",
            ["route", "status"],
        )
        self.metrics.collect_from(self._requests.collect)

    def request(self, body: bytes) -> EmbeddingRequestOnce:
        """The request in ``body``, decoded on first use (the dispatcher's
        ``max_bytes`` bounds it)."""
        return EmbeddingRequestOnce(body, self.dispatcher.max_bytes)

    def count(self, route: str, status: int) -> None:
        """One answer on ``route`` (see the module docstring)."""
        self.metrics.count(route, status)
        self._requests.labels(route, str(status)).inc()

    async def embed(
        self,
        target: RouteTarget,
        body: bytes,
        request_id: str,
        authorization: str = "",
        *,
        request: EmbeddingRequestOnce | None = None,
    ) -> Embedded:
        """The first backend's answer (see the module docstring);
        ``ProxyError`` when none gives one, ``MalformedBuffer`` when the
        request cannot be read. ``request``: ``body`` decoded already, or to
        be (``Embedder.request``)."""
        serving = self.serving
        if not any(b.name in serving for b in (*target.backends, *target.fallbacks)):
            raise ProxyError(
                codes.EMBEDDINGS_UNSUPPORTED,
                f"no backend of route {target.label!r} serves embeddings",
            )
        decoded = request or self.request(body)
        call = Inbound(body, decoded, request_id, authorization)

        def prepare(backend: Backend) -> Outbound | None:
            if backend.name not in serving:
                return None
            return backend.adapter.prepare_embeddings(call)

        async def take(answer: Attempt) -> Embedded:
            backend = answer.backend
            try:
                whole = await self._whole(answer.response, backend.name)
            finally:
                await answer.response.aclose()
            adapter = backend.adapter
            model = decoded().model_name if adapter.translated else ""
            try:
                made = adapter.embeddings_answer(whole, request_id, model, self.max_response_bytes)
            except ValueError as exc:  # MalformedBuffer and TranslatorError too
                self.metrics.upstream_failure_of(backend.name, "bad_answer").inc()
                raise ProxyError(
                    codes.BACKEND_PROTOCOL_ERROR,
                    f"backend {backend.name} sent no embeddings answer: {exc}",
                ) from None
            self.metrics.upstream_duration_of(backend.name).observe(
                time.perf_counter() - answer.started
            )
            self.metrics.relayed_bytes.inc(len(made))
            # Last: the answer is whole, nothing below can fail.
            self.dispatcher.release(backend, answer.lease)
            return Embedded(backend.name, made)

        return await self.dispatcher.first(target, prepare, take)

    async def _whole(self, response: Response, backend: str) -> bytes:
        """The answer's body, at most ``max_response_bytes`` of it
        (``transport.base.read_whole``); ``UpstreamError`` when it breaks off."""
        try:
            return await read_whole(response, self.max_response_bytes)
        except ResponseTooLarge as exc:
            raise self._too_large(backend, str(exc)) from None

    def _too_large(self, backend: str, size: str) -> ProxyError:
        self.metrics.upstream_failure_of(backend, "response_too_large").inc()
        return ProxyError(
            codes.BACKEND_RESPONSE_TOO_LARGE,
            f"backend {backend} answered {size}; the limit is max_response_bytes "
            f"({self.max_response_bytes})",
        )
