"""``POST /v1/embeddings`` on the proxy's HTTP surface: one request's steps.

``EmbeddingsRoute`` takes an ``EmbeddingRequest`` FlatBuffer and answers one
``EmbeddingResponse`` buffer (``Content-Type: application/x-flatbuffers``,
``x-flatgate-backend``), or the proxy's JSON error (``errors.answer_of``). Its
steps are the completions' (``service.app``), in the same order and through
the same pieces: the head (method, type, length), the caller
(``service.caller``: token, admission), the body, the route (the one route
read serves both roots; a body that is not an ``EmbeddingRequest`` is a 400
``malformed_request``), the tenant (only a caller holding the proxy's token
may set one, as for completions), the tenant's limits (``service.quota``:
one request, its prompt tokens estimated from the inputs, settled to the
answer's ``prompt_tokens``), the answer (``service.embed``), sent whole.
Whatever one step took is given back in ``__call__``'s ``finally``, where the
request is also counted (``Embedder.count``) and logged once (``api`` is
``embeddings``; ``tokens`` the answer's prompt tokens).

The caller is watched for leaving while the backend works (as for
completions): its going cancels the upstream request. Knows the HTTP
surface only through ``Host`` (what ``service.app.ProxyServer`` gives it).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from flatgate.proxy.limits import Lease
from flatgate.proxy.plumbing.accesslog import AccessLog, Entry
from flatgate.proxy.plumbing.admission import Admission, Hold
from flatgate.proxy.plumbing.auth import TokenCheck
from flatgate.proxy.plumbing.body import BodyPolicy
from flatgate.proxy.plumbing.drain import Drain, Ending
from flatgate.proxy.plumbing.serve import CallerWatch, Exchange, Watchlist
from flatgate.proxy.service.balancer import RouteTarget
from flatgate.proxy.service.caller import caller_of, hold_of
from flatgate.proxy.service.embed import Embedded, Embedder, EmbeddingRequestOnce
from flatgate.proxy.service.errors import (
    ANSWERABLE,
    CLIENT_CLOSED,
    cancelled,
)
from flatgate.proxy.service.quota import ProxyLimits
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.embeddings import is_embedding_request
from flatgate.proxy.wire.layout import IDENTIFIER_AT
from flatgate.proxy.wire.request.route import tenant_present
from flatgate.proxy.wire.schema import (
    ADMITTED_HEADER,
    BACKEND_HEADER,
    EMBEDDING_REQUEST_IDENTIFIER,
    EMBEDDINGS_PATH,
    FLATBUFFERS,
)

__all__ = ["EmbeddingsRoute", "Host"]


class Host(Protocol):
    """What the route needs of the HTTP surface (``ProxyServer``)."""

    token: TokenCheck | None
    require_auth: bool
    admission: Admission
    body_policy: BodyPolicy
    access: AccessLog
    watchlist: Watchlist
    drain: Drain
    quota: ProxyLimits | None
    embedder: Embedder

    def request_id(self, ex: Exchange) -> str: ...

    def head(self, ex: Exchange, takes: str = ...) -> tuple[int, bool]: ...

    def admit(self, body: bytes, entry: Entry, trusted: bool) -> RouteTarget: ...

    async def refuse(self, ex: Exchange, entry: Entry, exc: Exception) -> None: ...


class EmbeddingsRoute:
    """``POST /v1/embeddings`` of one ``ProxyServer`` (see the module docstring)."""

    __slots__ = ("_host",)

    def __init__(self, host: Host) -> None:
        self._host = host

    @staticmethod
    def entry() -> Entry:
        """A log entry for ``POST /v1/embeddings``."""
        entry = Entry()
        entry.api = "embeddings"
        entry.path = EMBEDDINGS_PATH
        return entry

    async def __call__(self, ex: Exchange) -> None:
        """One request; however it ends, it is logged and counted once and
        what it held is given back."""
        host = self._host
        entry = self.entry()
        entry.method = ex.method
        rid = entry.request_id = host.request_id(ex)
        label = "-"
        hold: Hold | None = None
        watch: CallerWatch | None = None
        lease: Lease | None = None
        embedded: Embedded | None = None
        quota = host.quota
        ending = Ending()
        untrack = host.drain.track(ending)
        try:
            try:
                size, _ = host.head(ex, "an EmbeddingRequest")
                authorization, trusted = caller_of(ex, host.token, host.require_auth)
                hold = hold_of(host.admission, ex, size, trusted)
                body = await ex.body(host.body_policy)
                entry.bytes_in = len(body)
                target, request = self._admit(body, entry, trusted)
                label = target.label
                if quota is not None and quota.active:
                    lease = await self._reserve(ex, body, request, quota)
                watch = CallerWatch(ex.disconnected)
                host.watchlist.add(watch)
                embedded = await host.embedder.embed(
                    target, body, rid, authorization, request=request
                )
                del body, request  # answered: not kept while the answer goes out
            except ANSWERABLE as exc:
                await host.refuse(ex, entry, exc)
                return
            host.admission.drop_body(hold)
            entry.backend = embedded.backend
            if host.access.enabled or lease is not None:
                entry.tokens = embedded.prompt_tokens()
            entry.status = 200
            entry.first_byte()
            headers = [
                ("content-type", FLATBUFFERS),
                ("x-request-id", rid),
                (BACKEND_HEADER, embedded.backend),
            ]
            entry.bytes_out = len(embedded.body)
            await ex.respond(200, headers, embedded.body)
        except asyncio.CancelledError:
            if not await cancelled(ex, entry, watch, ending):
                raise
        except ConnectionError:  # the caller left while the answer went out
            entry.status, entry.error = CLIENT_CLOSED, "client_closed"
        finally:
            untrack()
            if watch is not None:
                watch.stop()
            if lease is not None and quota is not None:
                quota.settle(lease, 0, entry.tokens, embedded is not None)
            if hold is not None:
                host.admission.done(hold)
            host.embedder.count(label, entry.status)
            host.access.write(entry)

    async def _reserve(
        self, ex: Exchange, body: bytes, request: EmbeddingRequestOnce, quota: ProxyLimits
    ) -> Lease | None:
        """The tenant's lease, when the request names a tenant the edge has
        not admitted already (``service.quota``); else ``None``."""
        if not tenant_present(body) or ex.header(ADMITTED_HEADER) is not None:
            return None
        got = request()
        return await quota.admit_embeddings(got, got.tenant, got.model_name)

    def _admit(
        self, body: bytes, entry: Entry, trusted: bool
    ) -> tuple[RouteTarget, EmbeddingRequestOnce]:
        """The request's route target and its decoding (on first use);
        ``ProxyError`` (or ``MalformedBuffer``) for a buffer that is no
        ``EmbeddingRequest``, a bad name or route, or a tenant set without the
        proxy's token (``Host.admit``, the completions' own step)."""
        if not is_embedding_request(body):
            raise MalformedBuffer(
                f"file identifier: expected {EMBEDDING_REQUEST_IDENTIFIER!r} "
                f"(an EmbeddingRequest) on {EMBEDDINGS_PATH}",
                IDENTIFIER_AT,
            )
        host = self._host
        return host.admit(body, entry, trusted), host.embedder.request(body)
