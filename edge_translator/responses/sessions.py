"""The Responses API's WebSocket mode on ``/v1/responses``: ``ResponsesSockets``,
one per worker, the socket handler the app gives ``plumbing.serve.ServerApp``.

The Open Responses specification (spec version 2026-04-24, "WebSocket
Transport") lets an agent keep one socket for many turns: each
``response.create`` message is a creation request, answered with the same
streaming events as HTTP, one response at a time. Here:

- **The upgrade** is authenticated as a ``POST /v1/responses`` is (the same
  keys and JWTs, ``Authorization: Bearer``); a refused one gets the status
  the HTTP request would, in OpenAI's shape, with its headers
  (``Retry-After``) under ASGI, the status alone under RSGI (granian's). So
  is one on another path (404), while draining (503), or past
  ``[edge] websocket_max_per_caller`` sockets of its caller on this worker
  (429 ``too_many_websockets``).
- **Each turn** runs the edge's whole ``POST /v1/responses`` over a
  ``turns.Turn`` (``answer``, the app's): the caller's rules, limits and
  charges per response, one access-log line, metrics and a trace each, as on
  HTTP; a reload applies from the next turn. Turns run one at a time, in
  order; up to ``websocket_max_queued`` messages wait behind the one in
  flight (past them the socket is closed, 1008, naming why). A message is
  at most ``websocket_max_message_bytes`` (0: ``max_body_bytes``); a larger
  one, one that is not a ``response.create``, or one with HTTP's
  ``stream``, ``stream_options`` or ``background`` is refused with an error
  event in its turn (``turns.as_body``).
- **Connection-local state** (``socket_api.SocketResponses``): the last
  response is kept for ``previous_response_id``, ``store: false`` included;
  a continuation that fails lets go of the response it continued (and of any
  response the failed turn made), as the specification says.
- **The socket's end**: idle (no message, nothing in flight) for
  ``websocket_idle_seconds``, closed 1000; at ``websocket_max_seconds``, an
  error event ``websocket_connection_limit_reached`` once the response in
  flight is done, then closed 1000; a drain finishes the response in flight,
  then closes 1001 (going away). One access-log line for the connection
  (``GET``, status 101, its bytes both ways, why it ended in ``error``).

Memory per socket is bounded by configuration: the queued messages (at most
``websocket_max_queued + 1`` of at most the message limit), the one
response kept (``[state] max_stored_response_bytes``), and one turn's as on
HTTP; a client that stops reading stops its turn's sends (granian's
``send`` waits), so its stream stops pulling from the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, NamedTuple

from prometheus_client.core import GaugeMetricFamily, Metric

from flatgate.edge_translator.client_api import Route
from flatgate.edge_translator.errors import (
    BUSY_RETRY_AFTER,
    NotFound,
    PayloadTooLarge,
    error_headers,
    shutting_down,
)
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.keys import Credential
from flatgate.edge_translator.responses.endpoint import ResponsesApi
from flatgate.edge_translator.responses.socket_api import SocketResponses, Warmup, socket_error
from flatgate.edge_translator.responses.turns import Turn, as_body
from flatgate.edge_translator.settings import EdgeSection
from flatgate.proxy.apis.errors import openai_body, openai_detail
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.accesslog import AccessLog, Entry
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.serve import Exchange, valid_request_id
from flatgate.proxy.plumbing.websocket import Socket

__all__ = ["PATHS", "ResponsesSockets"]

# Where the WebSocket mode is served.
PATHS: Final = frozenset({"/v1/responses"})
# Close codes (RFC 6455): done, going away (a drain), policy violation.
NORMAL, GOING_AWAY, POLICY = 1000, 1001, 1008
_API = "openai-responses"
_LIMIT = codes.WEBSOCKET_CONNECTION_LIMIT_REACHED
Answer = Callable[[Exchange, Route], Awaitable[int]]


def _limit_event(seconds: float) -> bytes:
    err = FlatgateError(
        f"The WebSocket reached its limit of {seconds:g} seconds; open a new one and "
        "continue with previous_response_id.",
        code=_LIMIT,
    )
    return socket_error(err.status, openai_detail(err))


class _Ended(NamedTuple):
    """Why a socket's session ends: its close code and reason, and the
    access log's ``error``."""

    code: int
    reason: str
    logged: str | None = None


# The ends a session reaches; the access log's ``error`` names each.
_LIMIT_REACHED = _Ended(NORMAL, "connection limit reached", _LIMIT.code)
_IDLE = _Ended(NORMAL, "idle", "idle")
_CLIENT_CLOSED = _Ended(NORMAL, "", "client_closed")
_DRAINING = _Ended(GOING_AWAY, codes.DRAINING.code, codes.DRAINING.code)


class ResponsesSockets:
    """See the module docstring. ``answer`` runs one turn as the app runs a
    request (with the socket's own ``Route``); ``identities`` and
    ``max_kept`` are read per socket (a reload's)."""

    def __init__(
        self,
        e: EdgeSection,
        *,
        answer: Answer,
        identities: Callable[[], Identities],
        responses: ResponsesApi,
        max_kept: Callable[[], int],
        drain: Drain,
        access: AccessLog,
    ) -> None:
        self._e = e
        self._answer = answer
        self._identities = identities
        self._responses = responses
        self._max_kept = max_kept
        self._drain = drain
        self._access = access
        self._max_message = e.websocket_max_message_bytes or e.max_body_bytes
        # Open sockets per caller, and each open socket's stop (set by a drain).
        self._open: dict[str, int] = {}
        self._stops: set[asyncio.Event] = set()
        drain.on_begin(self._drain_began)

    def collect(self, prefix: str) -> Iterable[Metric]:
        """``<prefix>_websockets_open``: the Responses sockets open on this worker."""
        gauge = GaugeMetricFamily(
            f"{prefix}_websockets_open", "Responses API WebSockets open on this worker."
        )
        gauge.add_metric([], sum(self._open.values()))
        yield gauge

    def _drain_began(self) -> None:
        for stop in self._stops:
            stop.set()

    async def __call__(self, sock: Socket) -> None:
        entry = Entry()
        entry.method = "GET"
        entry.path = sock.path
        entry.api = _API
        rid = sock.header("x-request-id")
        if rid is not None and valid_request_id(rid):
            entry.request_id = rid
        try:
            caller = await self._admit(sock, entry)
        except FlatgateError as err:
            entry.error = err.code.code
            entry.status = err.status
            headers = error_headers(err, entry.request_id)
            with contextlib.suppress(ConnectionError):
                await sock.refuse(err.status, headers, openai_body(err))
            self._access.write(entry)
            return
        # granian drops an open socket when its listener closes: the server's
        # stop waits for this one to end (its drain ends it) before it closes.
        release = self._drain.hold()
        try:
            await sock.accept()
            entry.status = 101
            await self._session(sock, entry)
        except ConnectionError:
            entry.status = entry.status or 499
        finally:
            release()
            left = self._open[caller] - 1
            if left:
                self._open[caller] = left
            else:
                del self._open[caller]
            self._access.write(entry)

    async def _admit(self, sock: Socket, entry: Entry) -> str:
        """The upgrade checked as its ``POST`` would be: the caller it counts
        against, that caller's count taken."""
        if not self._e.websocket or sock.path not in PATHS:
            raise NotFound(f"Unknown request URL: GET {sock.path}.")
        if self._drain.draining:
            raise shutting_down()
        identities = self._identities()
        auth = sock.header("authorization")
        identity = identities.cached(auth) or await identities.verify(auth)
        entry.tenant = identity.tenant or None
        if identity.credential is Credential.OPEN:
            caller = sock.peer.rpartition(":")[0]
        else:
            caller = identity.tenant
        held = self._open.get(caller, 0)
        if held >= self._e.websocket_max_per_caller:
            raise FlatgateError(
                f"This caller already holds {held} Responses WebSockets open "
                f"([edge] websocket_max_per_caller); close one, or retry shortly.",
                code=codes.TOO_MANY_WEBSOCKETS,
                retry_after=BUSY_RETRY_AFTER,
            )
        self._open[caller] = held + 1
        return caller

    async def _session(self, sock: Socket, entry: Entry) -> None:
        """The socket's turns, in order, until it ends (see the module docstring)."""
        e = self._e
        closed = asyncio.Event()
        stop = asyncio.Event()
        if self._drain.draining:
            stop.set()
        self._stops.add(stop)
        queue: asyncio.Queue[str | bytes | FlatgateError] = asyncio.Queue(
            e.websocket_max_queued + 1
        )
        overflow: list[bool] = []
        reader = asyncio.create_task(self._read(sock, queue, closed, overflow))
        api = SocketResponses(self._responses.store, self._max_kept())
        ends = time.monotonic() + e.websocket_max_seconds if e.websocket_max_seconds else 0.0
        end = _Ended(NORMAL, "")
        try:
            while True:
                item = await self._next(queue, closed, stop, ends, overflow)
                if isinstance(item, _Ended):
                    end = item
                    break
                entry.bytes_in += len(item) if not isinstance(item, FlatgateError) else 0
                await self._turn(sock, item, api, closed, entry)
                if ends and time.monotonic() >= ends and not closed.is_set():
                    end = _LIMIT_REACHED
                    break
            entry.error = end.logged
            if end is _LIMIT_REACHED:
                with contextlib.suppress(ConnectionError):
                    await sock.send(_limit_event(self._e.websocket_max_seconds))
        finally:
            self._stops.discard(stop)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await reader
            with contextlib.suppress(ConnectionError):
                await sock.close(end.code, end.reason)

    async def _next(
        self,
        queue: asyncio.Queue[str | bytes | FlatgateError],
        closed: asyncio.Event,
        stop: asyncio.Event,
        ends: float,
        overflow: list[bool],
    ) -> str | bytes | FlatgateError | _Ended:
        """The next message, or why the session ends: the client closed, a
        drain began, the socket was idle too long or reached its life's end."""
        if not queue.empty():
            return queue.get_nowait()
        ended = self._ended(closed, stop, overflow)
        if ended is not None:
            return ended
        idle = self._e.websocket_idle_seconds
        waits = [idle] if idle else []
        if ends:
            waits.append(max(0.0, ends - time.monotonic()))
        getter = asyncio.ensure_future(queue.get())
        watchers = [asyncio.ensure_future(closed.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(
                [getter, *watchers],
                timeout=min(waits) if waits else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for w in watchers:
                w.cancel()
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            return getter.result()
        ended = self._ended(closed, stop, overflow)
        if ended is not None:
            return ended
        if ends and time.monotonic() >= ends:
            return _LIMIT_REACHED
        return _IDLE

    def _ended(
        self, closed: asyncio.Event, stop: asyncio.Event, overflow: list[bool]
    ) -> _Ended | None:
        """Why the session ends when the queue overflowed, the client closed
        or a drain began; else ``None``."""
        if overflow:
            return _Ended(POLICY, f"more than {self._e.websocket_max_queued} queued messages")
        if closed.is_set():
            return _CLIENT_CLOSED
        if stop.is_set():
            return _DRAINING
        return None

    async def _read(
        self,
        sock: Socket,
        queue: asyncio.Queue[str | bytes | FlatgateError],
        closed: asyncio.Event,
        overflow: list[bool],
    ) -> None:
        """The socket's messages into ``queue`` (one ``receive`` always
        pending, so that granian answers pings), each over the message limit
        replaced by its refusal; a full queue ends the socket."""
        limit = self._max_message
        try:
            while True:
                message = await sock.receive()
                if message is None:
                    return
                size = len(message)
                if isinstance(message, str) and size * 4 > limit:
                    size = len(message.encode())
                item: str | bytes | FlatgateError = message
                if size > limit:
                    item = PayloadTooLarge(
                        f"WebSocket message of {size} bytes exceeds the limit of {limit} bytes "
                        "([edge] websocket_max_message_bytes)."
                    )
                try:
                    queue.put_nowait(item)
                except asyncio.QueueFull:
                    overflow.append(True)
                    return
        finally:
            closed.set()

    async def _turn(
        self,
        sock: Socket,
        item: str | bytes | FlatgateError,
        api: SocketResponses,
        closed: asyncio.Event,
        entry: Entry,
    ) -> None:
        """One message: refused with an error event, or run as a response."""
        try:
            if isinstance(item, FlatgateError):
                raise item
            asked = as_body(item)
        except FlatgateError as err:
            event = socket_error(err.status, openai_detail(err), error_headers(err, None))
            entry.bytes_out += len(event)
            await sock.send(event)
            return
        turn = Turn(sock.header, asked.body, peer=sock.peer, send=sock.send, closed=closed)
        before = api.recent
        route = Route(api, Warmup(api)) if asked.warmup else Route(api)
        status = await self._answer(turn, route)
        previous = asked.previous
        entry.bytes_out += turn.bytes_out
        if turn.failed or status >= 400:
            # The specification's rule: a failed continuation lets go of what it continued.
            if previous is not None:
                api.evict(previous)
            if api.recent is not before:
                api.recent = None if before is None or before.response_id == previous else before
