"""The Responses API on one WebSocket: ``SocketResponses``, the connection's
own ``ResponsesApi``, and ``socket_error``, the specification's error envelope.

The Open Responses specification's WebSocket mode (spec version 2026-04-24,
"WebSocket Continuation") keeps "the most recent previous-response state in
connection-local memory", so that a ``store: false`` response, which is never
written to the ``[state]`` store, can still be continued on the socket that
answered it. ``SocketResponses`` is the ``ResponsesApi`` of one socket's
responses, over the same stored responses as HTTP:

- ``recent``: the last response this socket answered (its input items, as
  ``store.list_pieces``' runs, and its ``response`` object, stored or not),
  kept while its input and output together are within ``[state]
  max_stored_response_bytes`` (the store's own cap); one at a time, so a
  socket holds at most that many bytes of it;
- ``previous_turn``: ``previous_response_id`` is looked up in ``recent``
  first (same tenant), then in the stored responses as on HTTP: a
  ``store: false`` response of another socket, or one this socket has let
  go, is ``previous_response_not_found``;
- ``evict``: the session's, after a continuation fails (the specification's
  rule: the response it continued is let go);
- errors after a response began are the envelope (``error_event``), never
  the HTTP stream's top-level fields.

Everything else (decode, the chain, storing with ``store``, rendering) is
``ResponsesApi``'s. No I/O beyond the store's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import msgspec

from flatgate.edge_translator.client_api import Asked, Folding, Rendering
from flatgate.edge_translator.responses.echo import Echo, echo_of
from flatgate.edge_translator.responses.endpoint import ResponsesApi
from flatgate.edge_translator.responses.render import Aggregator, RenderedFailure, StreamRenderer
from flatgate.edge_translator.responses.store import StoredResponses, Turn, runs_of
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.errors import openai_detail
from flatgate.proxy.apis.openai_responses.request import Decoded
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits.blobs import Pieces
from flatgate.proxy.wire.chunk.frames import Chunk, Usage
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["ACTED_ON", "Recent", "SocketResponses", "Warmup", "socket_error"]

log = logging.getLogger("flatgate.edge")

_encode = msgspec.json.Encoder().encode
# A warmup's one chunk: the response completes with no output and no tokens.
_NOTHING = Chunk(finish_reason=FinishReason.STOP, usage=Usage(0, 0))
# The headers of an HTTP error answer a client acts on, carried in the envelope.
ACTED_ON = ("retry-after", "x-request-id", "x-should-retry")
_RATE_PREFIX = "x-ratelimit-"


def socket_error(
    status: int, detail: Mapping[str, object], headers: Sequence[tuple[str, str]] = ()
) -> bytes:
    """The specification's WebSocket error, ``{"type": "error", "status",
    "error": {...}}``, with the headers the same HTTP answer would carry that
    a client acts on (``Retry-After``, the rate limits', the request id) as
    ``headers``, when it has any."""
    envelope: dict[str, object] = {"type": "error", "status": status, "error": detail}
    acted = {
        name: value for name, value in headers if name in ACTED_ON or name.startswith(_RATE_PREFIX)
    }
    if acted:
        envelope["headers"] = acted
    return _encode(envelope)


class Recent(NamedTuple):
    """The last response a socket answered, for its next turn's
    ``previous_response_id``."""

    tenant: str
    response_id: str
    turn: Turn


class SocketResponses(ResponsesApi):
    """One socket's ``ResponsesApi`` (see the module docstring): over the
    worker's stored responses (``store``), keeping ``recent`` within
    ``max_bytes``."""

    __slots__ = ("_input", "_max_bytes", "recent")

    def __init__(self, store: StoredResponses | None, max_bytes: int) -> None:
        super().__init__(store)
        self.recent: Recent | None = None
        self._max_bytes = max_bytes
        # The input of the response in flight (one at a time), by its id.
        self._input: tuple[str, Pieces] | None = None

    async def previous_turn(self, tenant: str, response_id: str) -> Turn | None:
        recent = self.recent
        if recent is not None and recent.response_id == response_id and recent.tenant == tenant:
            return recent.turn
        return await super().previous_turn(tenant, response_id)

    def keeps(self, req: Decoded) -> bool:
        """Always: the socket keeps every response's input, stored or not."""
        return True

    def evict(self, response_id: str) -> None:
        """Let ``response_id`` go from the socket's memory (the stored
        responses keep theirs)."""
        if self.recent is not None and self.recent.response_id == response_id:
            self.recent = None

    async def admitted(self, asked: Asked, *, tenant: str) -> None:
        echo: Echo = asked.extra
        if echo.kept:
            self._input = (asked.completion_id, echo.kept[-1])
            if not echo.store:
                echo.kept.clear()  # kept on this socket only: never stored
        await super().admitted(asked, tenant=tenant)

    async def finish(self, asked: Asked, answer: Rendering | Folding, *, tenant: str) -> None:
        await super().finish(asked, answer, tenant=tenant)
        held, self._input = self._input, None
        if held is None or held[0] != asked.completion_id:
            return
        if not isinstance(answer, StreamRenderer | Aggregator):
            return
        response = answer.response_json(stored=True)
        kept = held[1]
        self.keep(tenant, asked.completion_id, kept, response)

    def keep(self, tenant: str, response_id: str, kept: Pieces, response: bytes) -> None:
        """A response as ``recent``, when it is within the cap (else none is)."""
        if sum(map(len, kept)) + len(response) <= self._max_bytes:
            self.recent = Recent(tenant, response_id, Turn(runs_of(kept), response))
        else:
            self.recent = None

    def error_event(self, err: FlatgateError) -> bytes:
        """``response.failed`` when a renderer saw the failure; else the
        specification's error envelope (``socket_error``), as one event."""
        if isinstance(err, RenderedFailure):
            return err.event
        detail = openai_detail(err)
        return b"event: error\ndata: " + socket_error(err.status, detail) + b"\n\n"


class _Unbounded:
    """A warmup's ``Budget``: nothing is forwarded, so nothing is charged
    (the chain it reads is the socket's own, or the store's, both capped)."""

    __slots__ = ()

    def charge(self, nbytes: int, param: str) -> None:
        return None


class Warmup:
    """``generate: false`` on a socket (the OpenAI SDK's and Codex's
    ``response.create`` field: "prepare request state without model
    output; the response ID can be used as previous_response_id on a later
    turn"), as a ``client_api.Local`` of ``api``'s: the request decoded,
    resolved and checked against the caller's models as a response is, its
    chain read (``previous_response_id``), then answered at once, never
    forwarded and no limit charged: a ``completed`` response with no output
    and no tokens, kept as the socket's ``recent`` (and stored with
    ``store``), so that the next turn continues from it."""

    __slots__ = ("_api",)

    path = "/v1/responses"

    def __init__(self, api: SocketResponses) -> None:
        self._api = api

    def decode(self, body: bytes) -> Decoded:
        return self._api.decode(body)

    async def answer(self, req: Decoded, model: ModelConfig, *, tenant: str) -> bytes:
        api = self._api
        response_id = api.new_id()
        req = await api.prepare(req, tenant=tenant, response_id=response_id, budget=_Unbounded())
        echo = echo_of(req)
        renderer = StreamRenderer(
            response_id=response_id, created=int(time.time()), model=model.name, echo=echo
        )
        events = renderer.feed(_NOTHING)
        response = renderer.response_json(stored=True)
        kept = req.kept or ()
        api.keep(tenant, response_id, kept, response)
        store = api.store
        if store is not None and echo.store:
            try:
                await store.save_input(tenant, response_id, kept)
                await store.save_response(tenant, response_id, response)
            except Exception:  # never raises: the answer goes out
                log.exception("saving warmup response %s failed", response_id)
        return events
