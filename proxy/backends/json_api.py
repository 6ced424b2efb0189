"""What the JSON backends (``openai``, ``anthropic``) share.

``JsonAdapter`` is their adapter's common part: the endpoint, the headers
(content type, the request id, flatgate's credential or, where configured, the
caller's, and static extras), the names of what the request's encoder left
out (``Outbound.omitted``), the refusal read from an error body, and the
probe; each protocol supplies its path, credential header, request encoder and
translator. ``failed_result`` is how the OpenAI APIs, which have no error
flag on a tool's result, say that a call failed.

``EventStream`` parses the body as server-sent events and hands each event to
its subclass (``_event``), which returns the frames it makes. Whatever the
backend sends, a stream ends in exactly one terminal chunk: the backend's own
finish (the subclass's), or an error chunk (``_fail``): a backend error event,
bytes that are not the protocol (``backend_protocol_error``, after the frames
of the good events before them), or a body that ends before the finish
(``_ended``). Nothing after the terminal chunk is translated.

``WholeAnswer`` is the other kind of translator: for a request the client
did not stream, which the adapter asked for whole (``stream: false``:
``JsonAdapter.whole_for``, the backend's ``whole_answers``), it keeps the
body, bounded by ``MAX_EVENT_BYTES``, and at its end turns the JSON into the
answer's frames in one step (its subclass's ``_answer``): no per-token work
on either side. A body that begins as server-sent events (a server that
streamed anyway) is handed, as it came, to the protocol's stream translator.
No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from flatgate.proxy.backends.base import (
    Inbound,
    Outbound,
    Probe,
    Refusal,
    Translator,
    Untranslatable,
    classify,
)
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.backends.sse import MAX_EVENT_BYTES, SSEError, SSEParser
from flatgate.proxy.errors import codes
from flatgate.proxy.transport.base import retry_after
from flatgate.proxy.transport.credentials import Refreshing
from flatgate.proxy.wire.chunk.frames import ChunkError, Usage
from flatgate.proxy.wire.chunk.writer import ChunkWriter, write_chunk
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import JSON, SSE, FinishReason

__all__ = [
    "INT32_MAX",
    "EventStream",
    "JsonAdapter",
    "WholeAnswer",
    "count",
    "error_frame",
    "error_message",
    "failed_result",
    "object_arguments",
    "usage",
]

INT32_MAX = (1 << 31) - 1


def count(value: int | None) -> int:
    """A token count as the wire carries it (an int32, never negative)."""
    return min(max(value or 0, 0), INT32_MAX)


def usage(
    prompt: int | None, completion: int | None, cached: int | None, thought: int | None
) -> Usage:
    return Usage(count(prompt), count(completion), count(cached), count(thought))


def error_frame(request_id: str, code: codes.ErrorCode, message: str) -> bytes:
    """The error chunk that ends an answer, framed."""
    return write_chunk(
        request_id=request_id,
        error=ChunkError(code.code, message),
        finish_reason=FinishReason.ERROR,
    )


class EventStream:
    """A backend's SSE stream into chunk frames; subclasses say what each event means.

    Text that arrived together is one chunk: a subclass hands a text delta
    with nothing else in its event to ``_hold`` (instead of writing it), and
    the deltas of one read, while they are of one choice and nothing else
    comes between them, go out as one content chunk, before the next frame
    or at the end of the read. Nothing waits for more: what one read brought
    goes out with that read.
    """

    __slots__ = ("_held", "_held_index", "_held_writer", "_parser", "_request_id", "done")

    def __init__(self, request_id: str) -> None:
        self._parser = SSEParser()
        self._request_id = request_id
        self.done = False
        self._held: list[str] = []
        self._held_index = 0
        self._held_writer: ChunkWriter | None = None

    def _hold(self, w: ChunkWriter, text: str, index: int) -> bytes:
        """A content delta, held to go out with the text that came with it
        (``b""``), or its frame when held text of another choice is waiting."""
        held = self._held
        if held and index != self._held_index:
            return w.content(text, index)  # the feed sends the held text first
        held.append(text)
        self._held_index = index
        self._held_writer = w
        return b""

    def _release(self) -> bytes:
        """The held text as one content chunk (``b""``: none held)."""
        held = self._held
        if not held:
            return b""
        text = held[0] if len(held) == 1 else "".join(held)
        held.clear()
        w = self._held_writer
        assert w is not None
        return w.content(text, self._held_index)

    def _events(self, events: list[tuple[bytes, bytes]], out: list[bytes], cut: bool) -> None:
        """Each event's frames into ``out``, held text first; ``cut``: the
        body ended (an event that does not decode was cut short, not bad)."""
        for name, data in events:
            try:
                frames = self._event(name, data)
            except ValueError as exc:  # JSON, UTF-8, a number out of range
                if cut:
                    continue
                frames = self._fail(
                    codes.BACKEND_PROTOCOL_ERROR, f"backend sent a bad event: {exc}"
                )
            if frames:
                if self._held:
                    out.append(self._release())
                out.append(frames)
            if self.done:
                break

    def _event(self, name: bytes, data: bytes) -> bytes:
        """The frames one event makes (``ValueError`` for one that does not decode)."""
        raise NotImplementedError

    def _ended(self) -> bytes:
        """The terminal frames when the body ends before the backend's own end."""
        return self._fail(codes.BACKEND_STREAM_TRUNCATED, "backend ended the stream early")

    def _fail(self, code: codes.ErrorCode, message: str) -> bytes:
        self.done = True
        return error_frame(self._request_id, code, message)

    def feed(self, piece: bytes) -> bytes:
        if self.done:
            return b""
        try:
            events = self._parser.feed(piece)
        except SSEError as exc:
            return self._fail(codes.BACKEND_PROTOCOL_ERROR, str(exc))
        if not events:
            return b""
        out: list[bytes] = []
        self._events(events, out, False)
        if self._held:
            out.append(self._release())
        return out[0] if len(out) == 1 else b"".join(out)

    def end(self) -> bytes:
        if self.done:
            return b""
        out: list[bytes] = []
        self._events(self._parser.end(), out, True)
        if self._held:
            out.append(self._release())
        if not self.done:
            out.append(self._ended())
        return b"".join(out)


_SPACE = b" \t\r\n"


class WholeAnswer:
    """A backend's whole answer into chunk frames (see the module docstring):
    subclasses say what its JSON body means (``_answer``)."""

    __slots__ = ("_body", "_failed", "_request_id", "_size", "_stream", "_streamed", "_sure")

    def __init__(self, request_id: str, stream: Callable[[], Translator]) -> None:
        self._request_id = request_id
        self._stream = stream  # the protocol's stream translator, if it streams
        self._streamed: Translator | None = None
        self._body: list[bytes] = []
        self._size = 0
        self._sure = False  # whether the body's first byte was seen
        self._failed = False

    def _answer(self, body: bytes) -> bytes:
        """The frames the whole JSON body makes (``ValueError``: it is not the
        protocol's answer)."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        streamed = self._streamed
        return self._failed if streamed is None else streamed.done

    def _fail(self, code: codes.ErrorCode, message: str) -> bytes:
        self._failed = True
        self._body.clear()
        return error_frame(self._request_id, code, message)

    def feed(self, piece: bytes) -> bytes:
        streamed = self._streamed
        if streamed is not None:
            return streamed.feed(piece)
        if self._failed:
            return b""
        if not self._sure:
            head = piece.lstrip(_SPACE)
            if head:
                self._sure = True
                if head[:1] != b"{":  # server-sent events: the server streamed
                    streamed = self._streamed = self._stream()
                    return streamed.feed(b"".join(self._body) + piece)
        self._size += len(piece)
        if self._size > MAX_EVENT_BYTES:
            return self._fail(
                codes.BACKEND_PROTOCOL_ERROR, f"backend's answer is over {MAX_EVENT_BYTES} bytes"
            )
        self._body.append(piece)
        return b""

    def end(self) -> bytes:
        streamed = self._streamed
        if streamed is not None:
            return streamed.end()
        if self._failed:
            return b""
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        try:
            out = self._answer(body)
        except ValueError as exc:  # JSON, UTF-8, a number out of range, a shape
            return self._fail(codes.BACKEND_PROTOCOL_ERROR, f"backend sent a bad answer: {exc}")
        self._failed = True  # ended: nothing after it is translated
        return out


_EMPTY_OBJECT = msgspec.Raw(b"{}")


def object_arguments(text: str, where: str) -> msgspec.Raw:
    """A tool call's arguments as the APIs that take them as a JSON object
    want them (Anthropic's ``input``, Converse's): ``{}`` for none; anything
    but an object is ``Untranslatable``, naming ``where``."""
    if not text.strip():
        return _EMPTY_OBJECT
    data = text.encode()
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        raise Untranslatable(f"{where}: tool-call arguments are not a JSON object")
    return msgspec.Raw(data)


def failed_result(text: str) -> str:
    """A failed tool call's result text for an API without an error flag:
    prefixed ``Error:``, unless it starts with "error" already."""
    if text[:5].lower() == "error":
        return text
    return f"Error: {text}" if text else "Error"


def error_message(body: bytes) -> str:
    """The message of an OpenAI- or Anthropic-shaped error body, or its text."""
    try:
        doc = json.loads(body)
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str) and err:
            return err
    except ValueError:
        pass
    return body[:512].decode("utf-8", "replace").strip() or "no message"


class JsonAdapter:
    """The common part of the JSON backends' adapters (see the module docstring)."""

    protocol = ""
    translated = True
    credentials: Refreshing[Any] | None = None
    # Appended to the backend's url.
    path = ""

    def __init__(self, config: BackendConfig) -> None:
        # The API base (the configured url, with its version where the API has one).
        self.base = config.url.rstrip("/")
        self.url = self.base + self.path
        self.model = config.model
        self.health = config.health_url()
        key = config.credential()
        self.auth = self.credential(key) if key else []
        self.forward = config.forward_credentials
        self.extra = list(config.headers.items())
        self.whole = config.whole_answers
        # Leave out (true) or refuse the fields the encoder has no mapping for.
        self._drop = config.drop_unsupported

    def credential(self, key: str) -> list[tuple[str, str]]:
        """The headers that present flatgate's key."""
        raise NotImplementedError

    def fixed(self) -> list[tuple[str, str]]:
        """Headers every request of the protocol carries (besides the key)."""
        return []

    def encode(self, req: Request, model: str, omitted: list[str], whole: bool) -> bytes:
        """The backend's JSON body (``whole``: asking for a whole answer, not a
        stream); appends to ``omitted`` the name of each field of the request
        it leaves out."""
        raise NotImplementedError

    def whole_for(self, req: Request) -> bool:
        """Whether ``req``'s answer is asked for whole: the client did not
        stream it, and the backend's ``whole_answers`` is on."""
        return self.whole and not req.stream

    def endpoint(self, model: str) -> str:
        """The URL of a request to ``model`` when ``url`` is ``""``: one that
        depends on the model (Azure OpenAI's deployment URLs)."""
        raise NotImplementedError

    def prepare(self, call: Inbound[Request]) -> Outbound:
        req = call.request()
        omitted: list[str] = []
        whole = self.whole_for(req)
        model = self.model or req.model_name
        payload = self.encode(req, model, omitted, whole)
        headers = self.headers(call.request_id, call.authorization, JSON if whole else SSE)
        url = self.url or self.endpoint(model)
        return Outbound(url, headers, payload, tuple(dict.fromkeys(omitted)), whole)

    def headers(self, request_id: str, authorization: str, accept: str) -> list[tuple[str, str]]:
        """What goes with a JSON body: its type, ``accept``, the request id,
        the protocol's fixed headers, flatgate's key, the caller's credential
        when the backend forwards it, and the static extras."""
        headers = [("content-type", JSON), ("accept", accept), ("x-request-id", request_id)]
        headers += self.fixed()
        headers += self.auth
        if self.forward and authorization:
            headers.append(("authorization", authorization))
        headers += self.extra
        return headers

    def refusal(self, status: int, headers: Mapping[str, str], body: bytes) -> Refusal:
        return Refusal(classify(status), status, error_message(body), retry_after(headers))

    def probe(self) -> Probe:
        return Probe(self.health, [*self.fixed(), *self.auth, *self.extra])
