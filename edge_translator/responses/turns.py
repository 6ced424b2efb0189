"""One ``response.create`` on a Responses WebSocket as an ``Exchange``:
``Turn``, and ``as_body``, the message read as a ``POST /v1/responses`` body.

The specification's WebSocket mode carries "the same request and event model
as HTTP": a ``response.create`` message is a creation request's body with a
``type``, and the answer is the streaming events, each as one text message.
So a turn runs the edge's whole ``POST /v1/responses`` (authentication,
admission, the tenant's limits, the model allow-list, translation, the
proxy's round trip, the access log, metrics and traces, as on HTTP) over a
``Turn``, an ``Exchange`` whose request is the upgrade's headers and the
message, and whose answer goes to the socket:

- a streamed answer's server-sent events are sent one event to a message,
  the ``data`` alone (keep-alive comments and the ``[DONE]`` line are
  HTTP's: a socket has pings); ``failed`` notes a terminal
  ``response.failed`` or ``error`` event;
- an error answered before any event is the specification's envelope
  (``socket_api.socket_error``), with the HTTP status and the headers a
  client acts on;
- ``disconnected`` returns once the socket has closed, which cancels the
  turn as a client leaving cancels an HTTP request.

``as_body`` checks the message (a JSON object of ``type``
``response.create``; the specification says HTTP's ``stream``,
``stream_options`` and ``background`` must not be sent, but Codex sends
``stream: true``: a value that asks for what a socket does anyway, ``stream:
true``, ``background: false``, is taken, another refused naming the field,
and ``stream_options`` is judged as on HTTP; ``stream_id``, OpenAI's
several responses at once on one socket, is refused naming it) and writes
it as a streamed request body; ``generate: false`` (the OpenAI SDK's and
Codex's warmup) is taken out and said (``Asked.warmup``). No I/O beyond
the socket's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import msgspec

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.responses.socket_api import socket_error
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.body import BodyPolicy, BodyTooLarge

__all__ = ["HTTP_ONLY", "Asked", "Turn", "as_body"]

# The creation request's fields the specification forbids on a socket, with
# the values that ask for what a socket does anyway (Codex sends ``stream:
# true``): those are taken, any other refused naming the field.
# ``stream_options`` (its ``include_obfuscation``) the request's decode judges.
HTTP_ONLY = ("stream", "background")
_HARMLESS = {"stream": (b"true", b"null"), "background": (b"false", b"null")}
_CREATE = b'"response.create"'
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_encode = msgspec.json.Encoder().encode
_DATA = b"data: "
_DONE = b"[DONE]"
# A terminal event that is a failure: its message begins so (the renderers'
# and the error envelope's order, ``type`` first).
_FAILED = (b'{"type":"response.failed"', b'{"type":"error"')


class Asked(NamedTuple):
    """A ``response.create`` message, read: the ``POST /v1/responses`` body
    it is, its ``previous_response_id`` (``None``: none), and whether it is
    a warmup (``generate: false``)."""

    body: bytes
    previous: str | None
    warmup: bool


def as_body(message: str | bytes) -> Asked:
    """A ``response.create`` message as a ``POST /v1/responses`` body with
    ``stream: true`` (``generate`` taken out: a warmup is answered at the
    edge); ``InvalidRequest`` naming what makes it not one."""
    data = message.encode() if isinstance(message, str) else message
    try:
        fields = _fields(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise InvalidRequest(
            "A WebSocket message must be a JSON object with type 'response.create'.",
            code=codes.INVALID_JSON,
        ) from None
    except (RecursionError, UnicodeDecodeError):
        raise InvalidRequest(
            "A WebSocket message must be valid JSON.", code=codes.INVALID_JSON
        ) from None
    kind = fields.pop("type", None)
    if kind is None or bytes(kind) != _CREATE:
        shown = "none" if kind is None else bytes(kind)[:64].decode("utf-8", "replace")
        raise InvalidRequest(
            f"Unsupported WebSocket message type {shown}: flatgate takes 'response.create'.",
            param="type",
        )
    for name in HTTP_ONLY:
        value = fields.get(name)
        if value is None or bytes(value) in _HARMLESS[name]:
            continue
        raise InvalidRequest(
            f"'{name}' is HTTP's and must not be sent on a WebSocket: every response on it "
            "streams, and is answered on it.",
            param=name,
        )
    stream_id = fields.get("stream_id")
    if stream_id is not None and bytes(stream_id) != b"null":
        raise InvalidRequest(
            "'stream_id' (several responses at once on one socket) is not served: a socket "
            "runs one response at a time; open another socket for another conversation.",
            param="stream_id",
        )
    fields.pop("stream_id", None)
    generate = fields.pop("generate", None)
    warmup = generate is not None and bytes(generate) == b"false"
    if generate is not None and bytes(generate) not in (b"true", b"false", b"null"):
        raise InvalidRequest("'generate' must be a boolean.", param="generate")
    previous = fields.get("previous_response_id")
    found: str | None = None
    if previous is not None:
        try:
            found = msgspec.json.decode(previous, type=str | None)
        except msgspec.ValidationError:
            found = None  # the request's own decode refuses it, naming it
    fields["stream"] = msgspec.Raw(b"true")
    return Asked(_encode(fields), found, warmup)


class _Events:
    """A turn's streamed answer, to the socket one event to a message."""

    __slots__ = ("_send", "_turn")

    def __init__(self, send: Callable[[bytes], Awaitable[None]], turn: Turn) -> None:
        self._send = send
        self._turn = turn

    async def send(self, data: bytes) -> None:
        turn = self._turn
        for block in data.split(b"\n\n"):
            start = block.find(_DATA)
            if start < 0 or (start and block[start - 1 : start] != b"\n"):
                continue  # a comment (a keep-alive), or a piece of nothing
            event = block[start + len(_DATA) :]
            end = event.find(b"\n")
            if end >= 0:
                event = event[:end]
            if event == _DONE or not event:
                continue
            if event.startswith(_FAILED):
                turn.failed = True
            turn.bytes_out += len(event)
            await self._send(event)

    async def close(self) -> None:
        return None


class Turn:
    """One ``response.create`` as an ``Exchange`` (see the module
    docstring): ``header`` the upgrade's headers by lower-case name (its
    ``x-request-id`` is the connection's, not the turn's), ``body`` the
    message as ``as_body`` wrote it, ``send`` the socket's, ``closed`` set
    once the socket has closed."""

    __slots__ = ("_body", "_closed", "_header", "_send", "bytes_out", "failed", "peer_address")

    method = "POST"
    path = "/v1/responses"
    query = ""

    def __init__(
        self,
        header: Callable[[str], str | None],
        body: bytes,
        *,
        peer: str,
        send: Callable[[bytes], Awaitable[None]],
        closed: asyncio.Event,
    ) -> None:
        self._header = header
        self._body = body
        self._send = send
        self._closed = closed
        self.peer_address = peer
        # Whether the turn failed: an error answer, or a terminal failure event.
        self.failed = False
        self.bytes_out = 0

    @property
    def peer(self) -> str:
        return self.peer_address

    def header(self, name: str) -> str | None:
        if name == "content-length":
            return str(len(self._body))
        if name == "x-request-id":
            return None
        return self._header(name)

    async def body(self, policy: BodyPolicy) -> bytes:
        if len(self._body) > policy.max_bytes:
            raise BodyTooLarge(policy.max_bytes)
        return self._body

    async def respond(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        if status < 400:
            # A warmup's events (``socket_api.Warmup``), one to a message.
            await _Events(self._send, self).send(body)
            return
        self.failed = True
        try:
            detail = msgspec.json.decode(body).get("error", {})
        except (msgspec.DecodeError, AttributeError):
            detail = {"message": body.decode("utf-8", "replace")}
        event = socket_error(status, detail, headers)
        self.bytes_out += len(event)
        await self._send(event)

    async def stream(self, status: int, headers: list[tuple[str, str]]) -> _Events:
        return _Events(self._send, self)

    async def disconnected(self) -> None:
        await self._closed.wait()
