"""Anthropic's Messages API through Bedrock's InvokeModel and
InvokeModelWithResponseStream: the body out, the answer in.

The request (``encode_invoke``) is the ``anthropic`` adapter's Messages body
(``anthropic.adapter.encode_request``: every mapping, the extras with
``cache_control``, thinking blocks with their signatures, server tools,
what is left out named) in Bedrock's envelope, as Anthropic's Bedrock
client writes it: ``anthropic_version`` (``bedrock-2023-05-31``) first, the
betas the Messages API would take as the ``anthropic-beta`` header (the
configured ones, the client's, those its content parts need) as an
``anthropic_beta`` list, and neither ``model`` (it is in the URL) nor
``stream`` (the operation says it: ``/invoke`` or
``/invoke-with-response-stream``). The body's other members are the
encoder's bytes, not parsed again: it writes an empty ``model`` first, which
is cut (0.2 us a 2 KB body, where parsing the members and writing them again
took 1.9).

The answer: InvokeModel's body is the Messages API's ``message`` (the
``anthropic`` protocol's whole translator, ``AnthropicWhole``).
InvokeModelWithResponseStream's is AWS's event stream (``eventstream``) whose
``chunk`` events carry ``{"bytes": base64(one Messages stream event's
JSON)}``; ``InvokeStream`` is the ``anthropic`` protocol's stream translator
(``AnthropicStream``: every event's meaning, the held text, the one terminal
chunk) fed those events instead of server-sent ones. An exception message
(``throttlingException``, ``modelStreamErrorException``,
``modelTimeoutException``, ``internalServerException``,
``serviceUnavailableException``, ``validationException``, or a generic
``error`` message) ends the stream with one error chunk naming it, after the
frames of the events before it; a frame that is not the framing, or a chunk
that is not base64 JSON, is a ``backend_protocol_error``; other event types
are ignored.

No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.backends.anthropic.adapter import encode_request
from flatgate.proxy.backends.anthropic.stream import AnthropicStream
from flatgate.proxy.backends.bedrock.eventstream import (
    EventMessage,
    EventStreamError,
    EventStreamParser,
    event_type,
    message_type,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.request.decode import Request

__all__ = ["InvokeStream", "encode_invoke"]

_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_encode = msgspec.json.Encoder().encode
_NO_MODEL = b'{"model":"",'


def encode_invoke(
    req: Request,
    *,
    anthropic_version: str,
    default_max_tokens: int,
    betas: list[str],
    omitted: list[str],
    drop_unsupported: bool,
) -> bytes:
    """InvokeModel's body for ``req`` (see the module docstring); ``betas``
    are the configured ones, to which the client's are added. What is left
    out is appended to ``omitted``; ``Untranslatable`` for what cannot be sent."""
    found = list(betas)
    messages = encode_request(
        req,
        model="",
        default_max_tokens=default_max_tokens,
        omitted=omitted,
        betas=found,
        drop_unsupported=drop_unsupported,
        whole=True,
        stream_field=False,
    )
    head = b'{"anthropic_version":' + _encode(anthropic_version) + b","
    if found:
        head += b'"anthropic_beta":' + _encode(list(dict.fromkeys(found))) + b","
    # The encoder writes the model first: empty, it is these bytes, cut
    # without parsing the body again.
    if messages.startswith(_NO_MODEL):
        return head + messages[len(_NO_MODEL) :]
    members = _members(messages)  # another order: taken apart and written again
    del members["model"]
    return head + _encode(members)[1:]


class _Chunk(msgspec.Struct, gc=False):
    # Base64 in the JSON: msgspec decodes it as it parses.
    data: bytes = msgspec.field(default=b"", name="bytes")


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class _Message(msgspec.Struct, gc=False):
    message: str = ""
    Message: str = ""


_decode_message = msgspec.json.Decoder(_Message).decode


def _exception_text(msg: EventMessage) -> str:
    """An exception or error message's name and text."""
    if message_type(msg) == "error":
        name = msg.headers.get(":error-code")
        text = msg.headers.get(":error-message")
        return f"{name if isinstance(name, str) else 'error'}: " + (
            text if isinstance(text, str) and text else "the backend failed"
        )
    try:
        said = _decode_message(msg.payload)
        said_text = said.message or said.Message
    except msgspec.DecodeError:
        said_text = msg.payload[:512].decode("utf-8", "replace")
    return f"{event_type(msg) or 'exception'}: {said_text or 'the backend failed'}"


class InvokeStream(AnthropicStream):
    """InvokeModelWithResponseStream's body into chunk frames (see the module
    docstring): the ``anthropic`` stream translator, fed its chunks' events."""

    __slots__ = ("_frames",)

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id, model)
        self._frames = EventStreamParser()

    def _take(self, messages: list[EventMessage], out: list[bytes]) -> None:
        """Each message's frames into ``out``: a chunk's event, or the end
        an exception (or a chunk that does not decode) makes. The headers are
        read as the dict they are (once per token: no helper calls)."""
        events: list[tuple[bytes, bytes]] = []
        for msg in messages:
            headers = msg.headers
            if headers.get(":message-type") == "event":
                if headers.get(":event-type") != "chunk":
                    continue
                try:
                    events.append((b"", _decode_chunk(msg.payload).data))
                    continue
                except msgspec.DecodeError as exc:
                    code, text = codes.BACKEND_PROTOCOL_ERROR, f"backend sent a bad chunk: {exc}"
            else:
                code, text = codes.BACKEND_STREAM_ERROR, _exception_text(msg)
            self._events(events, out, False)
            if not self.done:
                if self._held:
                    out.append(self._release())
                out.append(self._fail(code, text))
            return
        self._events(events, out, False)

    def feed(self, piece: bytes) -> bytes:
        if self.done:
            return b""
        try:
            messages = self._frames.feed(piece)
        except EventStreamError as exc:
            return self._fail(codes.BACKEND_PROTOCOL_ERROR, str(exc))
        if not messages:
            return b""
        out: list[bytes] = []
        self._take(messages, out)
        if self._held:
            out.append(self._release())
        return out[0] if len(out) == 1 else b"".join(out)

    def end(self) -> bytes:
        if self.done:
            return b""
        out: list[bytes] = []
        if self._held:
            out.append(self._release())
        if not self.done:
            out.append(self._ended())
        return b"".join(out)
