"""The shared flow of every client API's ``POST``, once: ``Flow``.

A client API supplies only its own parts (``client_api.ClientApi``: how its
callers authenticate, its decode and writer, its renderers and its error
shape); the rest is here, each step returning what the next needs:

1. ``admit``: the caller authenticated (by its API's headers), charged the
   tenant's limits no model changes, and admitted against the worker's bounds
   before its body is read: a ``Caller``, what it holds until the answer ends;
2. ``_translate``: the body read within ``max_body_bytes``, decoded and
   checked once by the API, its model resolved, given what it needs of
   stored state (``ClientApi.prepare``), written as a ``CompletionRequest``:
   an ``Asked`` (what the answer needs of the request, never the prompt) and
   the FlatBuffer;
3. ``_complete``: the caller's model allow-list and the tenant's limits for
   that request; then ``_forward``: sent to the router (``proxy_link.complete``), the
   caller and the drain watched, keep-alives while a stream's first token is
   awaited, the answer rendered as frames arrive (``_answer``, ``answer``),
   the API told it ended before its last byte (``ClientApi.finish``), and the
   tenant's reservation settled to the usage its backend reported. The
   fields the proxy's backend left out (``OMITTED_HEADER``) are named to the
   client in the same header.

An endpoint the edge answers itself (``client_api.Local``) takes step 1 and
step 2's resolution, and answers at once (``_local``). Another request
shape (``embeddings.flow``) takes the steps it shares as they are: ``admit``
and ``holding`` (step 1, and giving back what it holds), ``read_body`` and
``resolve`` (step 2's), and ``watch`` (the caller and the drain watched).
No prompt, and no FlatBuffer once the proxy has it, is held while an answer
streams. Failures are raised as ``FlatgateError``s with the rate headers of the
limits charged; the app answers them. No HTTP server objects beyond ``Exchange``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import msgspec

from flatgate.edge_translator.answer import SSE_HEADERS, Keepalive, aggregate, stream
from flatgate.edge_translator.bounds import COUNTED_FROM, within_wire
from flatgate.edge_translator.catalog import resolve_model
from flatgate.edge_translator.client_api import Asked, ClientApi, Local, Route
from flatgate.edge_translator.errors import BUSY_RETRY_AFTER, InvalidRequest, PayloadTooLarge
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.keys import Credential, Identity
from flatgate.edge_translator.proxy_link import complete
from flatgate.edge_translator.settings import EdgeSection, ModelConfig
from flatgate.edge_translator.tenancy import FREE, Admitted, Tenancy, with_headers
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.admission import Admission, Hold, Refusal
from flatgate.proxy.plumbing.body import BodyMalformed, BodyTimeout, BodyTooLarge
from flatgate.proxy.plumbing.drain import Drain, Ending
from flatgate.proxy.plumbing.intake import admission, body_policy
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import CallerWatch, Exchange, Watchlist, valid_request_id
from flatgate.proxy.transport.base import Response
from flatgate.proxy.transport.router import Router
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.digits import read_decimal
from flatgate.proxy.wire.schema import BACKEND_HEADER, JSON, OMITTED_HEADER

__all__ = ["Caller", "Flow", "Watched", "carrying", "note_request_id"]

_JSON = [("content-type", JSON)]
_TRANSLATE_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2)
# A request's client is watched for leaving from 50-100 ms in (Watchlist).
_WATCH_TICK = 0.05


async def carrying(forwarding: Awaitable[int], admitted: Admitted) -> int:
    """The status ``forwarding`` answered with; an ``FlatgateError`` it raises
    carries the tenant's rate headers (``admitted``'s) to the caller."""
    try:
        return await forwarding
    except FlatgateError as err:
        err.headers += admitted.headers
        raise


def note_request_id(ex: Exchange, entry: Entry) -> None:
    """The client's ``x-request-id``, when valid, into the log (and the answer)."""
    rid = ex.header("x-request-id")
    if rid is not None and valid_request_id(rid):
        entry.request_id = rid


class Caller(msgspec.Struct, frozen=True):
    """An admitted caller, as ``admit`` returns it: who it is, its
    ``Content-Length``, and what it holds until its answer ends (body bytes
    against admission control, what ``admit_caller`` charged its limits)."""

    identity: Identity
    length: str | None
    hold: Hold
    early: Admitted


class _Outcome:
    """What an answer reports to its tenant's settle: whether it began (the
    proxy said 200) and the usage reported. ``_answer`` writes it as it goes,
    so that an answer cut short still reports what it had (no value returns
    through an exception); only ``_forward``, which made it, reads it."""

    __slots__ = ("answered", "usage")

    def __init__(self) -> None:
        self.answered = False
        self.usage: Usage | None = None


class _Budget:
    """``client_api.Budget`` over admission control: a request's room under
    ``max_body_bytes`` (less its body) and its caller's shares, charged on
    its ``Hold`` (given back with the body's bytes)."""

    __slots__ = ("_admission", "_hold", "_limit", "_used")

    def __init__(self, admission: Admission, hold: Hold, limit: int, used: int) -> None:
        self._admission = admission
        self._hold = hold
        self._limit = limit
        self._used = used

    def charge(self, nbytes: int, param: str) -> None:
        if nbytes <= 0:
            return
        if self._used + nbytes > self._limit:
            raise PayloadTooLarge(
                f"Request of {self._used} bytes would hold {nbytes} more for '{param}', "
                f"over the limit of {self._limit} bytes.",
                param=param,
            )
        refusal = self._admission.grow(self._hold, nbytes)
        if refusal is not None:
            raise FlatgateError(
                f"The gateway refused the request: {refusal.message}; retry shortly.",
                param=param,
                code=refusal.code,
                retry_after=BUSY_RETRY_AFTER,
            )
        self._used += nbytes


class Watched:
    """A request's watches, as ``Flow.watch`` makes them: its caller's
    (``CallerWatch``) and the drain's ``ending``, tracked. The handler's
    ``except asyncio.CancelledError`` returns ``gone``; its ``finally`` calls
    ``stop``."""

    __slots__ = ("_untrack", "_watch", "ending")

    def __init__(self, watch: CallerWatch, ending: Ending, untrack: Callable[[], None]) -> None:
        self._watch = watch
        self.ending = ending
        self._untrack = untrack

    def gone(self, entry: Entry, exc: asyncio.CancelledError) -> int:
        """499 (nginx's "client closed request", for the metrics only) when the
        caller's leaving cancelled the request, noted in ``entry``; any other
        cancellation (``exc``) raised again."""
        if not self._watch.caught():
            raise exc
        entry.error = "client_closed"
        return 499

    def stop(self) -> None:
        """The drain's tracking and the caller's watch ended."""
        self._untrack()
        self._watch.stop()


class Flow:
    """The shared flow, one per worker. ``identities`` and ``models`` are
    swapped by a reload (from the next request on)."""

    def __init__(
        self,
        e: EdgeSection,
        *,
        identities: Identities,
        models: Mapping[str, ModelConfig],
        tenancy: Tenancy,
        router: Router,
        metrics: Metrics,
        drain: Drain,
    ) -> None:
        self.identities = identities
        self.models = models
        self.tenancy = tenancy
        self.admission = admission(e)
        self._body_policy = body_policy(e)
        self._max_body = e.max_body_bytes
        self._keepalive = e.keepalive_seconds
        self._router = router
        self._metrics = metrics
        self._drain = drain
        self._watchlist = Watchlist(_WATCH_TICK)
        self.translate_time = metrics.histogram(
            "flatgate_edge_translate_seconds",
            "Time to decode a request's JSON and write its FlatBuffer.",
            _TRANSLATE_BUCKETS,
        )

    async def run(self, ex: Exchange, entry: Entry, route: Route) -> int:
        """A client API's request, from its head to its answer; the status sent."""
        entry.api = route.api.name
        entry.path = ex.path
        local = route.local
        caller = await self.admit(ex, entry, route.api, early=local is None)
        if local is not None:
            answer = self._local(ex, entry, route.api, local, caller=caller)
            return await self.holding(caller, answer)
        return await self.holding(caller, self._complete(ex, entry, route.api, caller))

    async def holding(self, caller: Caller, work: Coroutine[Any, Any, int]) -> int:
        """``work``'s status, what ``caller`` holds given back once it ends
        (its errors carrying the rate headers of its early charge)."""
        try:
            return await work
        except FlatgateError as err:
            err.headers = with_headers(err.headers, caller.early.headers)
            raise
        finally:
            self.admission.done(caller.hold)
            self.tenancy.release_caller(caller.early)

    async def admit(
        self, ex: Exchange, entry: Entry, api: ClientApi[Any], *, early: bool = True
    ) -> Caller:
        """Before the body is read: the caller authenticated (as ``api``'s
        callers are), charged its limits no model changes
        (``Tenancy.admit_caller``; not when ``early`` is false, for a
        ``Local``, which is no completion), and admitted against the worker's
        bounds and its shares (``plumbing.admission``): the body's bytes (its
        Content-Length, or the body limit when none is sent) and one request
        in flight, held until the proxy has the request. What it holds is
        ``holding``'s to give back."""
        note_request_id(ex, entry)  # logged (and answered) even if the request fails
        length = ex.header("content-length")
        declared = read_decimal(length) if length is not None else self._max_body
        if declared is None:
            raise InvalidRequest("Invalid Content-Length header.")
        size = min(declared, self._max_body + 1)
        identity = await api.authenticate(ex, self.identities)
        entry.tenant = identity.tenant or None
        tenancy = self.tenancy
        charged = await tenancy.admit_caller(identity.tenant) if early else FREE
        peer = ex.peer
        share = identity.tenant if identity.credential is not Credential.OPEN else None
        hold = self.admission.admit(size, peer.rpartition(":")[0] if share is None else share, peer)
        if isinstance(hold, Refusal):
            tenancy.release_caller(charged)
            raise FlatgateError(
                f"The gateway refused the request: {hold.message}; retry shortly.",
                code=hold.code,
                retry_after=BUSY_RETRY_AFTER,
                headers=with_headers([], charged.headers),
            )
        return Caller(identity, length, hold, charged)

    async def _translate(
        self, ex: Exchange, entry: Entry, api: ClientApi[Any], caller: Caller
    ) -> tuple[Asked, bytes]:
        """The body read, decoded and checked once by ``api``, its model
        resolved and written as a ``CompletionRequest``: what the answer needs
        of it, and the FlatBuffer (body and decoded request die here)."""
        body = await self.read_body(ex, caller.length)
        started = time.perf_counter()
        entry.bytes_in = size = len(body)
        req = api.decode(body)
        del body
        model, completion_id, request_id = self.resolve(ex, entry, api, req.model)
        tenant = caller.identity.tenant
        spent = time.perf_counter() - started
        budget = _Budget(self.admission, caller.hold, self._max_body, size)
        req = await api.prepare(req, tenant=tenant, response_id=completion_id, budget=budget)
        started = time.perf_counter()
        carried = {h: v for h in api.carried_headers if (v := ex.header(h)) is not None}
        frame = api.write(req, model, tenant=tenant, request_id=request_id, headers=carried)
        if len(frame) >= COUNTED_FROM:
            within_wire(frame, api.items_param)
        self.translate_time.observe(spent + time.perf_counter() - started)
        return api.asked(req, completion_id, request_id, model.name), frame

    def resolve(
        self, ex: Exchange, entry: Entry, api: ClientApi[Any], name: str
    ) -> tuple[ModelConfig, str, str]:
        """The model ``name`` means, a fresh answer id, and the request id (the
        client's, else that id)."""
        entry.model = name
        model = resolve_model(self.models, name)
        entry.provider = model.provider
        completion_id = api.new_id()
        request_id = ex.header("x-request-id") or completion_id
        if not valid_request_id(request_id):
            raise InvalidRequest(
                "Invalid x-request-id header: 1 to 128 printable ASCII characters, no spaces.",
                param="x-request-id",
            )
        entry.request_id = request_id
        return model, completion_id, request_id

    async def _local(
        self, ex: Exchange, entry: Entry, api: ClientApi[Any], local: Local[Any], *, caller: Caller
    ) -> int:
        """An endpoint the edge answers itself: the request read, decoded and
        resolved as ``api``'s completions are, the caller's model allow-list
        checked, and ``local``'s answer."""
        body = await self.read_body(ex, caller.length)
        entry.bytes_in = len(body)
        req = local.decode(body)
        model, _, request_id = self.resolve(ex, entry, api, req.model)
        self.tenancy.check(caller.identity, req.model, model.name)
        out = await local.answer(req, model, tenant=caller.identity.tenant)
        entry.first_byte()
        entry.bytes_out = len(out)
        await ex.respond(200, [*_JSON, ("x-request-id", request_id)], out)
        return 200

    async def _complete(
        self, ex: Exchange, entry: Entry, api: ClientApi[Any], caller: Caller
    ) -> int:
        """A completion: translated, checked against the caller's model
        allow-list, its tenant's limits reserved, then forwarded and answered."""
        asked, frame = await self._translate(ex, entry, api, caller)
        tenancy = self.tenancy
        tenant = caller.identity.tenant
        tenancy.check(caller.identity, entry.model or asked.model, asked.model)
        admitted = (
            await tenancy.admit(tenant, asked.model, frame, after_caller=True)
            if tenancy.active
            else FREE
        )
        try:
            await api.admitted(asked, tenant=tenant)
        except BaseException:
            tenancy.settle(tenant, asked.model, admitted, None, answered=False)
            raise
        forwarding = self._forward(ex, entry, asked, caller=caller, admitted=admitted, frame=frame)
        del frame  # held by the step that sends it, and there only until the proxy has it
        return await carrying(forwarding, admitted)

    async def _forward(
        self,
        ex: Exchange,
        entry: Entry,
        asked: Asked,
        *,
        caller: Caller,
        admitted: Admitted,
        frame: bytes,
    ) -> int:
        """Send ``frame`` to the proxy and answer from its frames, watching the
        caller (gone: 499, for the metrics only) and the drain (its deadline:
        ``draining``), with keep-alives while a stream's first token is
        awaited; then settle the tenant's reservation to the usage reported."""
        watched = self.watch(ex)
        ending = watched.ending
        outcome = _Outcome()
        reply = with_headers(
            [("x-request-id", asked.request_id), *admitted.headers], caller.early.headers
        )
        keepalive = None
        if asked.stream and self._keepalive:
            headers = [*(asked.stream_headers or SSE_HEADERS), *reply]
            keepalive = Keepalive(ex, headers, self._keepalive, self._metrics, asked.api.beat)
        try:
            try:
                resp = await complete(
                    self._router, frame, asked.request_id, ending, admitted=self.tenancy.active
                )
                del frame  # the router has it: not held while the answer streams
                self.opened(resp.headers, entry, reply, caller)
                return await self._answer(
                    ex,
                    entry,
                    asked,
                    resp,
                    tenant=caller.identity.tenant,
                    reply=reply,
                    keepalive=keepalive,
                    ending=ending,
                    outcome=outcome,
                )
            except FlatgateError as err:
                out = await keepalive.settle() if keepalive is not None else None
                if out is None:
                    raise
                # The stream began with keep-alives: the error can only be an event.
                entry.error = err.code.code
                await out.send(asked.api.error_event(err))
                await out.close()
                return 200
            finally:
                if keepalive is not None:
                    keepalive.close()
        except asyncio.CancelledError as exc:
            return watched.gone(entry, exc)
        finally:
            watched.stop()
            self.tenancy.settle(
                caller.identity.tenant, asked.model, admitted, outcome.usage, outcome.answered
            )

    def opened(
        self,
        headers: Mapping[str, str],
        entry: Entry,
        reply: list[tuple[str, str]],
        caller: Caller,
    ) -> None:
        """The router's answer has begun (``headers``, its): its backend noted
        for the access log, the fields that backend left out named in
        ``reply`` (the client's headers), and the caller's body given back to
        admission (the router has it)."""
        entry.backend = headers.get(BACKEND_HEADER)
        omitted = headers.get(OMITTED_HEADER)
        if omitted:
            reply.append((OMITTED_HEADER, omitted))
        self.admission.drop_body(caller.hold)

    def watch(self, ex: Exchange) -> Watched:
        """A request's watches: its caller's (started a tick or two on), and
        the drain's ``Ending``, tracked (``Watched``)."""
        watch = CallerWatch(ex.disconnected)
        self._watchlist.add(watch)
        ending = Ending()
        return Watched(watch, ending, self._drain.track(ending))

    async def _answer(
        self,
        ex: Exchange,
        entry: Entry,
        asked: Asked,
        resp: Response,
        *,
        tenant: str,
        reply: list[tuple[str, str]],
        keepalive: Keepalive | None,
        ending: Ending,
        outcome: _Outcome,
    ) -> int:
        """The router's answer in ``asked``'s API: its frames rendered as a
        stream or folded into one body (the API told it ended before the last
        byte goes out)."""
        try:
            outcome.answered = True
            api = asked.api
            created = int(time.time())
            if asked.stream:
                renderer = api.renderer(asked, created)
                try:
                    return await stream(
                        ex,
                        resp,
                        renderer,
                        headers=[*(asked.stream_headers or SSE_HEADERS), *reply],
                        keepalive=keepalive,
                        metrics=self._metrics,
                        entry=entry,
                        ending=ending,
                        fail=renderer.fail,
                        beat=api.beat,
                        finish=lambda: api.finish(asked, renderer, tenant=tenant),
                    )
                finally:
                    outcome.usage = self._note_usage(renderer.usage, entry)
            aggregator = api.aggregator(asked, created)
            body = await aggregate(resp, aggregator, ending)
            outcome.usage = self._note_usage(aggregator.usage, entry)
            await api.finish(asked, aggregator, tenant=tenant)
            entry.first_byte()
            entry.bytes_out = len(body)
            await ex.respond(200, [*_JSON, *reply], body)
            return 200
        finally:
            await resp.aclose()

    def _note_usage(self, usage: Usage | None, entry: Entry) -> Usage | None:
        """``usage`` into the log, or counted as unknown; returned."""
        if usage is None:
            self._metrics.usage_unknown.inc()
        else:
            entry.tokens = usage.completion_tokens
            entry.prompt_tokens = usage.prompt_tokens
        return usage

    async def read_body(self, ex: Exchange, length: str | None) -> bytes:
        """The body, within the body policy: 413 past its bytes (``length``:
        the announced ``Content-Length``), ``body_timeout`` (408) when it stops
        arriving, ``malformed_body`` (400) when it ends early or badly framed."""
        policy = self._body_policy
        try:
            return await ex.body(policy)
        except BodyTooLarge:
            limit = policy.max_bytes
            raise PayloadTooLarge(
                f"Request body exceeds the limit of {limit} bytes."
                if length is None
                else f"Request body of {length} bytes exceeds the limit of {limit} bytes."
            ) from None
        except BodyTimeout as exc:
            raise InvalidRequest(
                f"Request body timed out: {exc}.", code=codes.BODY_TIMEOUT
            ) from None
        except BodyMalformed as exc:
            raise InvalidRequest(
                f"Malformed request body: {exc}.", code=codes.MALFORMED_BODY
            ) from None
