"""Chunk frames -> OpenAI Responses JSON: the streamed events and the
``response`` object.

Owns the answer side of the Responses API as OpenAI's reference documents it
and the official SDK reads it (the SDK's stream helper checks each item's
identity from ``output_item.added`` to ``.done``):

- ``StreamRenderer.feed(chunk)`` returns the SSE events (``event:`` line,
  ``data:`` with the same ``type`` and a ``sequence_number`` that goes up by
  one from 0) that one decoded ``Chunk`` becomes: ``response.created`` and
  ``response.in_progress`` first; then output items, one at a time, each
  ``response.output_item.added`` ... ``response.output_item.done``:

  - reasoning (``rs_...``): ``response.reasoning_summary_part.added``,
    ``response.reasoning_summary_text.delta``s, ``.done`` and
    ``response.reasoning_summary_part.done``; closed by the chunk's
    ``reasoning_part`` (its ``encrypted_content`` when the request's
    ``include`` asked for ``reasoning.encrypted_content``:
    ``translate.encrypted_of``) or by the next item. The item keeps the id it
    was added with (the SDK refuses a changed one): a backend's own id, to
    which its ``encrypted_content`` is bound, is used when its part opens the
    item (a Responses-native backend's adapter sends the part with the id
    alone as the item begins);
  - a message (``msg_...``): ``response.content_part.added`` (an
    ``output_text`` part), ``response.output_text.delta``s,
    ``response.output_text.done``, ``response.content_part.done``;
  - function calls (``fc_...``, with the wire call's id as ``call_id``, and a
    namespaced tool's call named as the client declared it, with its
    ``namespace``): ``response.function_call_arguments.delta``s, then
    ``.done``; calls stay open until the next other item or the end;
  - a hosted tool's output item from a Responses-native backend (a chunk's
    extras in this dialect, ``{"output_item": {...}}``): added and done as
    sent;

  then ``response.completed``, or ``response.incomplete`` (finish ``Length``:
  ``max_output_tokens``; ``ContentFilter``: ``content_filter``; the open items
  ``incomplete``). An error chunk raises ``RenderedFailure``: the
  ``FlatgateError`` it carries, with its ``response.failed`` event (the response
  so far, ``error: {code, message}`` with one of OpenAI's codes:
  ``rate_limit_exceeded`` for a 429, which Codex retries, else
  ``server_error``; flatgate's code in the message), which ``endpoint``'s
  ``error_event`` sends; ``fail(err)`` renders it for any other failure.
  Every stream ends with ``data: [DONE]`` (``DONE``: after the terminal
  event, as the Open Responses specification says it MUST).
- ``Aggregator`` folds a whole answer's chunks into the ``response`` object
  (the same items, in order; no events).
- Both give ``response_json()``: the ``response`` object as it stands (what
  ``GET /v1/responses/{id}`` serves), echoing the request (``echo.Echo``).

The JSON carries no ``output_text``: the SDKs compute it from the output
items, as OpenAI's reference has it. ``completed_at`` is the time the
answer completed (the ``clock`` read once, as the final chunk is rendered),
``null`` before and for a response that did not complete. Usage (``input_tokens`` with
``input_tokens_details.cached_tokens``, ``output_tokens`` with
``output_tokens_details.reasoning_tokens``, ``total_tokens``) is the
backend's counts, ``null`` when it sent none (never made up). A text delta
inside an open message (the per-token path) is a pre-encoded head, the
msgspec-encoded text and a fixed tail, written with ``Encoder.encode_into``
into one reused ``bytearray``. Pure: no I/O; the one clock read is the
given ``clock``'s (``created`` is given).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from flatgate.edge_translator.errors import chunk_error
from flatgate.edge_translator.responses.echo import Echo, new_id
from flatgate.edge_translator.responses.output import (
    FC,
    MSG,
    RS,
    OutputItem,
    failed_error,
    logprobs_of,
    usage_json,
)
from flatgate.edge_translator.responses.translate import encrypted_of
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ToolCallDelta, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = ["DONE", "Aggregator", "RenderedFailure", "StreamRenderer"]

_encoder = msgspec.json.Encoder()
_encode = _encoder.encode
_encode_into = _encoder.encode_into
_extras_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
_INCOMPLETE = {
    FinishReason.LENGTH: b"max_output_tokens",
    FinishReason.CONTENT_FILTER: b"content_filter",
}


_TEXT_DELTA = b"response.output_text.delta"
_DELTA_TAIL = b',"logprobs":[],"sequence_number":'
_NO_ERROR = b'"error":null,"incomplete_details":null'
# The last bytes of every stream (the Open Responses specification, "HTTP
# Requests and Responses": "The terminal event MUST be the literal string
# [DONE]"); the SDKs stop reading at it, as they do for Chat Completions.
DONE = b"data: [DONE]\n\n"


class RenderedFailure(FlatgateError):
    """An ``FlatgateError`` a stream ends with, and the ``response.failed`` event
    (``event``) that says it, in sequence."""

    def __init__(self, err: FlatgateError, event: bytes) -> None:
        super().__init__(
            err.message,
            param=err.param,
            code=err.code,
            status=err.status,
            retry_after=err.retry_after,
            headers=err.headers,
        )
        self.event = event


class _Answer:
    """One answer's items, events and outcome (see the module docstring)."""

    def __init__(
        self,
        *,
        response_id: str,
        created: int,
        model: str,
        echo: Echo,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._id = response_id
        self._created = created
        self._clock = clock
        # When the answer completed (``completed_at``; 0: not completed).
        self._completed_at = 0
        self._model = model
        self._echo = echo
        self._seq = 0
        self._started = False
        self._items: list[OutputItem | bytes] = []
        self._msg: OutputItem | None = None
        self._rs: OutputItem | None = None
        # Wire call index -> its item (done ones kept: a late fragment joins it).
        self._calls: dict[int, OutputItem] = {}
        self._usage: Usage | None = None
        # b"completed", b"incomplete" or b"failed" once the answer has ended.
        self._status = b""
        self._details = _NO_ERROR
        self._buf = bytearray()

    @property
    def finished(self) -> bool:
        return bool(self._status)

    @property
    def complete(self) -> bool:
        return bool(self._status)

    @property
    def usage(self) -> Usage | None:
        return self._usage

    # -- events -------------------------------------------------------------

    def _event(self, kind: bytes, body: bytes) -> bytes:
        seq = self._seq
        self._seq = seq + 1
        return b'event: %s\ndata: {"type":"%s",%s,"sequence_number":%d}\n\n' % (
            kind,
            kind,
            body,
            seq,
        )

    def _response(
        self,
        status: bytes,
        details: bytes = _NO_ERROR,
        *,
        final: bool = True,
        encrypted: bool | None = None,
    ) -> bytes:
        output = b",".join(self._output(encrypted)) if final else b""
        return (
            b'{"id":'
            + _encode(self._id)
            + b',"object":"response","created_at":%d,"status":"%s","background":false,'
            b'"completed_at":%s,'
            % (
                self._created,
                status,
                b"%d" % self._completed_at if final and status == b"completed" else b"null",
            )
            + details
            + b","
            + self._echo.fields
            + b',"model":'
            + _encode(self._model)
            + b',"output":['
            + output
            + b'],"usage":'
            + (usage_json(self._usage) if final else b"null")
            + b"}"
        )

    def _output(self, encrypted: bool | None = None) -> list[bytes]:
        """The output items' JSON (``encrypted``: with reasoning items'
        ``encrypted_content`` whatever the request asked for)."""
        asked = self._echo.encrypted
        status = b"incomplete" if self._status != b"completed" else b"completed"
        if encrypted is None or encrypted == asked:
            return [
                item if isinstance(item, bytes) else item.done or item.json(status, asked)
                for item in self._items
            ]
        return [
            item
            if isinstance(item, bytes)
            else item.json(status, encrypted)
            if item.kind == RS
            else item.done or item.json(status, encrypted)
            for item in self._items
        ]

    def _start(self, out: list[bytes]) -> None:
        self._started = True
        opening = b'"response":' + self._response(b"in_progress", final=False)
        out.append(self._event(b"response.created", opening))
        out.append(self._event(b"response.in_progress", opening))

    # -- items --------------------------------------------------------------

    def _open(self, out: list[bytes], kind: int, prefix: str, item_id: str = "") -> OutputItem:
        self._close(out, b"completed")
        item = OutputItem(kind, item_id or new_id(prefix), len(self._items))
        self._items.append(item)
        return item

    def _added(self, out: list[bytes], item: OutputItem, status: bytes = b"in_progress") -> None:
        if item.kind == MSG:
            body = (
                b'{"id":%s,"type":"message","status":"in_progress","role":"assistant","content":[]}'
                % _encode(item.id)
            )
        elif item.kind == RS:
            body = b'{"id":%s,"type":"reasoning","summary":[]}' % _encode(item.id)
        else:
            body = item.json(status, False)
        out.append(
            self._event(
                b"response.output_item.added", b'"output_index":%d,"item":%s' % (item.index, body)
            )
        )

    def _message(self, out: list[bytes]) -> OutputItem:
        item = self._msg = self._open(out, MSG, "msg")
        self._added(out, item)
        out.append(
            self._event(
                b"response.content_part.added",
                item.ref
                + b',"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}',
            )
        )
        item.head = (
            b"event: "
            + _TEXT_DELTA
            + b'\ndata: {"type":"'
            + _TEXT_DELTA
            + b'",'
            + item.ref
            + b',"content_index":0,"delta":'
        )
        return item

    def _text(self, item: OutputItem, text: str, logprobs: list[bytes] | None = None) -> bytes:
        item.texts.append(text)
        buf = self._buf
        buf[:] = item.head
        _encode_into(text, buf, -1)
        if logprobs:
            item.logprobs += logprobs
            buf += b',"logprobs":[' + b",".join(logprobs) + b'],"sequence_number":'
        else:
            buf += _DELTA_TAIL
        seq = self._seq
        self._seq = seq + 1
        buf += b"%d}\n\n" % seq
        return bytes(buf)

    def _reasoning(self, out: list[bytes], item_id: str = "") -> OutputItem:
        item = self._rs = self._open(out, RS, "rs", item_id)
        self._added(out, item)
        return item

    def _summary(self, out: list[bytes], item: OutputItem, text: str) -> None:
        if not item.texts:
            out.append(
                self._event(
                    b"response.reasoning_summary_part.added",
                    item.ref + b',"summary_index":0,"part":{"type":"summary_text","text":""}',
                )
            )
        item.texts.append(text)
        out.append(
            self._event(
                b"response.reasoning_summary_text.delta",
                item.ref + b',"summary_index":0,"delta":' + _encode(text),
            )
        )

    def _part(self, out: list[bytes], part: ReasoningPart) -> None:
        """A reasoning block began (a part with nothing but its id, while no
        reasoning item is open: the item opened with the backend's id, which
        its payload is bound to) or ended (its item closed with its payload)."""
        item = self._rs
        if item is None:
            item = self._reasoning(out, part.id)
            if not (part.text or part.opaque or part.redacted):
                return
            if part.text:
                self._summary(out, item, part.text)
        item.encrypted = encrypted_of(part)
        self._close(out, b"completed")

    def _call(self, out: list[bytes], call: ToolCallDelta) -> None:
        item = self._calls.get(call.index)
        if item is None:
            if self._msg is not None or self._rs is not None:
                self._close(out, b"completed")
            item = OutputItem(FC, new_id("fc"), len(self._items))
            self._items.append(item)
            self._calls[call.index] = item
            item.call_id = call.id
            item.namespace, item.name = self._echo.names.get(call.name, ("", call.name))
            self._added(out, item)
        if call.arguments:
            item.texts.append(call.arguments)
            if item.done is None:
                out.append(
                    self._event(
                        b"response.function_call_arguments.delta",
                        item.ref + b',"delta":' + _encode(call.arguments),
                    )
                )

    def _hosted(self, out: list[bytes], extras: str) -> None:
        """A hosted tool's output item, from a Responses-native backend."""
        item = _extras_decoder.decode(extras).get("output_item")
        if item is None:
            return
        self._close(out, b"completed")
        raw = bytes(item)
        index = len(self._items)
        self._items.append(raw)
        at = b'"output_index":%d,"item":' % index + raw
        out.append(self._event(b"response.output_item.added", at))
        out.append(self._event(b"response.output_item.done", at))

    def _close(self, out: list[bytes], status: bytes) -> None:
        """Close the open items, with ``status`` (of a message or a call)."""
        encrypted = self._echo.encrypted
        msg, rs = self._msg, self._rs
        if msg is not None:
            self._msg = None
            text = _encode("".join(msg.texts))
            out.append(
                self._event(
                    b"response.output_text.done",
                    msg.ref
                    + b',"content_index":0,"text":'
                    + text
                    + b',"logprobs":['
                    + b",".join(msg.logprobs)
                    + b"]",
                )
            )
            out.append(
                self._event(
                    b"response.content_part.done",
                    msg.ref
                    + b',"content_index":0,"part":{"type":"output_text","text":'
                    + text
                    + b',"annotations":[]'
                    + msg.logprobs_member()
                    + b"}",
                )
            )
            self._done(out, msg, status, encrypted)
        if rs is not None:
            self._rs = None
            if rs.texts:
                text = _encode("".join(rs.texts))
                tail = b',"summary_index":0,'
                out.append(
                    self._event(
                        b"response.reasoning_summary_text.done", rs.ref + tail + b'"text":' + text
                    )
                )
                out.append(
                    self._event(
                        b"response.reasoning_summary_part.done",
                        rs.ref + tail + b'"part":{"type":"summary_text","text":' + text + b"}",
                    )
                )
            self._done(out, rs, status, encrypted)
        for call in self._calls.values():
            if call.done is None:
                arguments = _encode("".join(call.texts))
                name = _encode(call.name)
                out.append(
                    self._event(
                        b"response.function_call_arguments.done",
                        call.ref + b',"name":' + name + b',"arguments":' + arguments,
                    )
                )
                self._done(out, call, status, encrypted)

    def _done(self, out: list[bytes], item: OutputItem, status: bytes, encrypted: bool) -> None:
        item.done = item.json(status, encrypted)
        out.append(
            self._event(
                b"response.output_item.done", b'"output_index":%d,"item":' % item.index + item.done
            )
        )

    # -- chunks -------------------------------------------------------------

    def _feed(self, chunk: Chunk) -> bytes:
        if chunk.error is not None or chunk.finish_reason == FinishReason.ERROR:
            err = chunk_error(chunk.error)
            raise RenderedFailure(err, self.fail(err))
        out: list[bytes] = []
        if not self._started:
            if chunk.model:
                self._model = chunk.model
            self._start(out)
        if chunk.reasoning:
            self._summary(out, self._rs or self._reasoning(out), chunk.reasoning)
        if chunk.reasoning_part is not None:
            self._part(out, chunk.reasoning_part)
        if chunk.extras and chunk.extras_dialect == _RESPONSES:
            self._hosted(out, chunk.extras)
        if chunk.content:
            logprobs = logprobs_of(chunk) if chunk.extras else None
            out.append(self._text(self._msg or self._message(out), chunk.content, logprobs))
        elif chunk.extras and self._msg is not None:
            # A token with no text (vLLM scores the end token on its finish
            # chunk): its logprobs join the message's, with no delta of its own.
            self._msg.logprobs += logprobs_of(chunk)
        for call in chunk.tool_calls:
            self._call(out, call)
        if chunk.usage is not None:
            self._usage = chunk.usage
        finish = chunk.finish_reason
        if finish:
            reason = _INCOMPLETE.get(finish)
            if reason is None:
                self._close(out, b"completed")
                self._status = b"completed"
                self._completed_at = int(self._clock())
                out.append(
                    self._event(
                        b"response.completed", b'"response":' + self._response(b"completed")
                    )
                )
            else:
                self._close(out, b"incomplete")
                self._status = b"incomplete"
                self._details = b'"error":null,"incomplete_details":{"reason":"%s"}' % reason
                out.append(
                    self._event(
                        b"response.incomplete",
                        b'"response":' + self._response(b"incomplete", self._details),
                    )
                )
        return b"".join(out)

    def fail(self, err: FlatgateError) -> bytes:
        """The events that end this answer with ``err``: ``response.failed``
        (after ``response.created`` if nothing went out yet), then the
        stream's terminal ``[DONE]``; a failure this answer rendered already
        (``RenderedFailure``) is its events again, in the same sequence."""
        if isinstance(err, RenderedFailure) and self._status == b"failed":
            return err.event
        out: list[bytes] = []
        if not self._started:
            self._start(out)
        self._status = b"failed"
        self._details = b'"error":' + _encode(failed_error(err)) + b',"incomplete_details":null'
        out.append(
            self._event(
                b"response.failed", b'"response":' + self._response(b"failed", self._details)
            )
        )
        out.append(DONE)
        return b"".join(out)

    def response_json(self, *, stored: bool = False) -> bytes:
        """The ``response`` object as it stands (an answer that ended without
        finishing, or never began, is ``failed``); ``stored``: as the store
        keeps it, its reasoning items' ``encrypted_content`` included whatever
        the request asked for (the next request of its chain sends it back to
        the backend)."""
        if not self._status:
            self._status = b"failed"
            self._details = (
                b'"error":{"code":"server_error","message":"The response ended before it '
                b'completed."},"incomplete_details":null'
            )
        return self._response(self._status, self._details, encrypted=True if stored else None)


class StreamRenderer(_Answer):
    """The SSE events of one streamed response, chunk by chunk (``Rendering``)."""

    def feed(self, chunk: Chunk) -> bytes:
        """The events one chunk becomes (``RenderedFailure`` for an error chunk)."""
        msg = self._msg
        content = chunk.content
        if (
            msg is not None
            and content
            and not chunk.finish_reason
            and not chunk.reasoning
            and not chunk.tool_calls
            and chunk.usage is None
            and chunk.error is None
            and chunk.reasoning_part is None
            and not chunk.extras
        ):
            return self._text(msg, content)
        return self._feed(chunk)

    def end(self) -> bytes:
        """The stream's terminal ``data: [DONE]`` (after the final chunk's
        ``response.completed`` or ``.incomplete``), which the Open
        Responses specification says a stream MUST end with."""
        return DONE


class Aggregator(_Answer):
    """A whole answer's chunks folded into one ``response`` object (``Folding``)."""

    def feed(self, chunk: Chunk) -> None:
        """Take one chunk; an error chunk raises the ``FlatgateError`` it carries."""
        if chunk.error is not None or chunk.finish_reason == FinishReason.ERROR:
            raise chunk_error(chunk.error)
        self._feed(chunk)

    def body(self) -> bytes:
        """The ``response`` JSON body."""
        return self.response_json()
